"""famlab.families: one block library, three Transformer families (pure torch).

``build_network(cfg)`` builds a BERT, GPT or T5 network from a :class:`ModelConfig`; ``from_hf`` / ``to_hf``
convert to and from Hugging Face models (``transformers`` is imported inside them only).
"""

from __future__ import annotations

from typing import Any

from famlab.families.config import ConfigError, Family, ModelConfig
from famlab.families.network import NetworkOutput
from torch import nn


def build_network(cfg: ModelConfig) -> nn.Module:
    """Build the network for ``cfg.family`` (``bert | gpt | t5``); raises ConfigError if ``vocab_size`` is unset."""
    from famlab.families.bert import Bert
    from famlab.families.gpt import GPT
    from famlab.families.t5 import T5

    family = Family(cfg.family)
    return {Family.BERT: Bert, Family.GPT: GPT, Family.T5: T5}[family](cfg)


def from_hf(model: Any) -> nn.Module:
    """Our network with the weights of a Hugging Face BERT / GPT-2 / T5 model (see :mod:`famlab.families.hf`)."""
    from famlab.families.hf import from_hf as _from_hf

    return _from_hf(model)


def to_hf(net: nn.Module) -> Any:
    """The Hugging Face model equivalent to ``net`` (see :mod:`famlab.families.hf`)."""
    from famlab.families.hf import to_hf as _to_hf

    return _to_hf(net)


__all__ = ["ConfigError", "ModelConfig", "NetworkOutput", "build_network", "from_hf", "to_hf"]
