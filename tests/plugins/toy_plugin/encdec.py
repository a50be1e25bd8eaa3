"""The toy plugin's encoder-decoder pieces, as a user's package would write them: a family, an objective for its
architecture (with a setting of its own and its scoring and generation rules) and a norm, each registered through
famlab's public registries by ``tests.plugins.toy_plugin`` (docs/architecture.md, Plugins).

``toy_t5`` is T5's network (the block library's encoder and cross-attending decoder) under another name with its own
defaults: no dropout and a gated SiLU feed-forward. ``lead_lm`` is an encoder-decoder
prefix LM whose encoder reads ``[X] prefix [EOS]`` (a lead token no built-in prefix LM uses) and whose decoder writes
the rest of the block; its own setting ``objective.split`` is the share of the block the encoder reads, and its rules
score and continue a text after that same ``[X]``. ``scalenorm`` is ScaleNorm (Nguyen & Salazar 2019): ``x`` scaled
to norm ``sqrt(C)`` times one learned gain, no per-feature weight.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import MappingProxyType

import torch
from famlab.families.formats import EncoderDecoderFormat, Reading, Rule
from famlab.families.registry import FamilyDefaults, FamilySpec, family_defaults
from famlab.families.t5 import T5
from famlab.objectives import ObjectiveError, TokenIds
from famlab.objectives.denoisers import T5PrefixLM
from famlab.objectives.objective import Batch, ObjectiveRules, stack_samples
from famlab.objectives.prefix import encoder_decoder_batch, pad_right, sample_prefix_len, split_prefix
from famlab.objectives.registry import Entry, ObjectiveSettings, Setting
from torch import Tensor, nn

FAMILY = "toy_t5"
OBJECTIVE = "lead_lm"
NORM = "scalenorm"
LEAD = "[X]"


class ScaleNorm(nn.Module):
    """``g * sqrt(C) * x / ||x||`` with one learned gain ``g`` (statistics in fp32)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(()))
        self.scale = math.sqrt(dim)

    def forward(self, x: Tensor) -> Tensor:
        norm = x.float().pow(2).sum(-1, keepdim=True).add(self.eps).rsqrt()
        return (self.gain * self.scale * x * norm).to(x.dtype)


def scalenorm(dim: int, eps: float, bias: bool) -> nn.Module:
    """The registered norm builder: ``(dim, eps, bias)`` -> the layer (ScaleNorm has no bias)."""
    return ScaleNorm(dim, eps)


class ToyT5(T5):
    """T5's encoder-decoder, registered as the family ``toy_t5``."""

    family = FAMILY


def toy_t5_spec() -> FamilySpec:
    """T5's defaults with the toy's own: no dropout, a gated SiLU feed-forward."""
    model = {**family_defaults("t5").model, "dropout": 0.0, "ffn": "gated", "activation": "silu"}
    return FamilySpec(
        name=FAMILY,
        network=ToyT5,
        defaults=FamilyDefaults(model=MappingProxyType(model), objective="span", pooling="decoder"),
        input_format=EncoderDecoderFormat(single="$A [EOS]", pair="$A [SEP] $B [EOS]"),
    )


class LeadLM(T5PrefixLM):
    """Encoder ``[X] block[:P] [EOS]``, decoder ``block[P:] [EOS]``, with ``P`` the ``split`` share of the block."""

    name = OBJECTIVE
    rules = ObjectiveRules(text=Rule(Reading.PREFIX, (LEAD,)), cloze=Rule(Reading.PREFIX, (LEAD,)),
                           generate=Rule(Reading.PREFIX, (LEAD,)))
    built: list[float] = []  # the split of every LeadLM built in this process, in order

    def __init__(self, ids: TokenIds, seq_len: int, split: float, generator: torch.Generator | None) -> None:
        super().__init__(ids, seq_len, split, generator)
        self.raw_block_len = seq_len - 2  # the lead, P <= R - 1 and [EOS] fit the encoder's T
        LeadLM.built.append(split)

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        block = stack_samples(samples, self.raw_block_len)
        raw = self.raw_block_len
        prefix = sample_prefix_len(block.shape[0], 1, raw - 1, self.prefix_fraction, self.generator)
        enc, enc_len, tgt, tgt_len = split_prefix(block, prefix, eos=self.ids.eos, pad=self.ids.pad, lead=self.ids.x)
        enc, tgt = pad_right(enc, self.seq_len, self.ids.pad), pad_right(tgt, raw, self.ids.pad)
        return encoder_decoder_batch(enc, enc_len, tgt, tgt_len, pad=self.ids.pad)


def build_lead(ids: TokenIds, seq_len: int, generator: torch.Generator | None, s: ObjectiveSettings) -> LeadLM:
    split = s["split"]  # type: ignore[typeddict-item]  # its own setting, declared on its Entry
    if not 0.0 < split < 1.0:
        raise ObjectiveError(f"objective.split={split} must be in (0, 1)")
    return LeadLM(ids, seq_len, split, generator)


def lead_entry() -> Entry:
    """Its registry entry: no famlab objective setting read, one of its own (``objective.split``)."""
    return Entry(LeadLM, (), build_lead, own={"split": Setting(0.5, float)})


__all__ = ["FAMILY", "NORM", "OBJECTIVE", "LeadLM", "ScaleNorm", "lead_entry", "scalenorm", "toy_t5_spec"]
