"""Turns tokenized classification examples into each family's input format (docs/interfaces.md).

The format is the family's :class:`~famlab.families.formats.InputFormat` (its template: BERT
`[CLS] a [SEP] (b [SEP])` with token types; GPT and T5 `a ([SEP] b) [EOS]`). Padding with `[PAD]` to the longest row
of the batch, on the right (default) or the left, with an attention mask.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from famlab.families import registry
from famlab.families.formats import truncate_pair
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.tokens import TokenIds

__all__ = ["ClassificationCollator", "truncate_pair"]


class ClassificationCollator:
    """Collate `{"input_ids", "pair_ids", "label"}` items (no special tokens yet) into a padded batch.

    Args:
        family: a registered family (`bert` | `gpt` | `t5` built in); its input format writes each row.
        ids: the tokenizer's special ids.
        max_len: longest row, special tokens included; texts are truncated to fit, the specials are kept.
        pad_side: `right` | `left`.

    Returns (from `__call__`): `input_ids`, `attention_mask` `(B, T)`, `labels` `(B,)`; plus the format's
    `extra_inputs`: `token_type_ids` `(B, T)` for BERT and `decoder_input_ids` `(B, 1)` (the decoder start token
    `[PAD]`, as HF T5) for T5.
    """

    def __init__(self, family: str, ids: TokenIds, max_len: int, pad_side: str = "right") -> None:
        if family not in registry.family_names():
            raise ObjectiveError(f"model.family={family} is not one of {list(registry.family_names())}")
        if pad_side not in ("right", "left"):
            raise ObjectiveError(f"pad_side={pad_side} must be right or left")
        if max_len < 5:
            raise ObjectiveError(f"max_len={max_len} is too short for a classification input (need at least 5)")
        self.family = family
        self.input_format = registry.family(family).input_format
        self.ids = ids
        self.max_len = max_len
        self.pad_side = pad_side

    def format(self, a: Sequence[int], b: Sequence[int] | None) -> tuple[list[int], list[int]]:
        """One example's `(token ids, token type ids)`, truncated to `max_len`."""
        return self.input_format.classification(a, b, self.ids, self.max_len)

    def __call__(self, items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        rows = [self.format(item["input_ids"], item.get("pair_ids")) for item in items]
        width = max(len(tokens) for tokens, _ in rows)
        batch = len(rows)
        input_ids = torch.full((batch, width), self.ids.pad, dtype=torch.long)
        token_types = torch.zeros(batch, width, dtype=torch.long)
        mask = torch.zeros(batch, width, dtype=torch.long)
        for i, (tokens, types) in enumerate(rows):
            n = len(tokens)
            span = slice(width - n, width) if self.pad_side == "left" else slice(0, n)
            input_ids[i, span] = torch.tensor(tokens)
            token_types[i, span] = torch.tensor(types)
            mask[i, span] = 1
        out = {
            "input_ids": input_ids,
            "attention_mask": mask,
            "labels": torch.tensor([int(item["label"]) for item in items], dtype=torch.long),
        }
        return out | self.input_format.extra_inputs(token_types, self.ids)
