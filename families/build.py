"""``build_network``: the family's network class for a :class:`ModelConfig` (re-exported by ``famlab.families``)."""

from __future__ import annotations

from famlab.families.bert import Bert
from famlab.families.config import Family, ModelConfig
from famlab.families.gpt import GPT
from famlab.families.t5 import T5
from torch import nn


def build_network(cfg: ModelConfig) -> nn.Module:
    """Build the network for ``cfg.family`` (``bert | gpt | t5``); raises ConfigError if ``vocab_size`` is unset."""
    family = Family(cfg.family)
    return {Family.BERT: Bert, Family.GPT: GPT, Family.T5: T5}[family](cfg)
