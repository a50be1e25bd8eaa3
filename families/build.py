"""``build_network``: the family's network for a :class:`ModelConfig` (re-exported by ``famlab.families``)."""

from __future__ import annotations

from famlab.families.config import ModelConfig
from famlab.families.network import Network
from famlab.families.registry import family


def build_network(cfg: ModelConfig) -> Network:
    """Build the network of ``cfg.family``, a registered family (``famlab.families.registry``: ``bert | gpt | t5``
    built in); raises ConfigError if ``vocab_size`` is unset."""
    return family(cfg.family).network(cfg)
