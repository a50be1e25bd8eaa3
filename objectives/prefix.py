"""Prefix-LM building blocks shared by GPT's prefix_lm / span / ul2 and T5's prefix_lm / ul2.

A decoder-only model sees one sequence `z` = prefix then target. The prefix is read bidirectionally, the
target causally, and only the target carries loss (Raffel et al. 2020, sec. 3.2.1, "prefix LM"). The mask
is built from the per-row prefix length on the model's device, so batches stay small (no `(B, T, T)` tensor
crosses the data loader).

An encoder-decoder model gets the prefix as encoder input and the target as decoder output.

Legend: B batch, R raw block length, T model sequence length, P prefix length, Q target length.
"""

from __future__ import annotations

import torch
from famlab.objectives.corruption import IGNORE


def prefix_lm_mask(prefix_len: torch.Tensor, length: int) -> torch.Tensor:
    """Boolean attention mask `(B, 1, T, T)`: query i may read key j iff `j <= i` or `j < prefix_len`.

    Args:
        prefix_len: `(B,)` long, the number of leading positions every position may read.
        length: T.
    """
    pos = torch.arange(length, device=prefix_len.device)
    causal = pos[None, :] <= pos[:, None]  # (T, T): key j <= query i
    in_prefix = pos[None, None, :] < prefix_len[:, None, None]  # (B, 1, T): key j in the prefix
    return (causal[None] | in_prefix)[:, None]  # (B, 1, T, T)


def decoder_batch(z: torch.Tensor, prefix_len: torch.Tensor, length: torch.Tensor) -> dict[str, torch.Tensor]:
    """Next-token batch of a decoder-only prefix LM from full sequences `z` `(B, T + 1)`.

    Position i reads `z[i]` and is labelled with `z[i + 1]` when that token belongs to the target, i.e.
    `prefix_len - 1 <= i < length - 1`; the prefix and the right padding carry no loss.

    Args:
        z: `(B, T + 1)` prefix then target then padding.
        prefix_len: `(B,)` tokens of the prefix (>= 1).
        length: `(B,)` tokens of prefix + target (the rest of `z` is padding).

    Returns:
        `input_ids` `(B, T)`, `labels` `(B, T)` (-100 off target) and `prefix_len` `(B,)`.
    """
    inputs, nxt = z[:, :-1], z[:, 1:]
    pos = torch.arange(inputs.shape[1], device=z.device)[None]  # (1, T)
    labelled = (pos >= prefix_len[:, None] - 1) & (pos < length[:, None] - 1)  # (B, T)
    labels = torch.where(labelled, nxt, torch.full_like(nxt, IGNORE))
    return {"input_ids": inputs.contiguous(), "labels": labels, "prefix_len": prefix_len}


def pad_right(x: torch.Tensor, width: int, value: int) -> torch.Tensor:
    """`(B, L)` -> `(B, width)` padded on the right with `value` (`width >= L`)."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


def split_prefix(
    block: torch.Tensor, prefix_len: torch.Tensor, *, eos: int, pad: int, lead: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Encoder-decoder prefix LM: the encoder reads `[lead] block[:P] [EOS]`, the decoder writes `block[P:] [EOS]`.

    Vectorised with one gather per side (P differs per row).

    Args:
        block: `(B, R)` raw tokens.
        prefix_len: `(B,)` P, in `[1, R - 1]`.
        eos, pad: `[EOS]` and `[PAD]` ids.
        lead: optional token put before the prefix (UL2's mode token).

    Returns:
        `(encoder_ids (B, m + max P + 1), encoder_len (B,), targets (B, R + 1 - min P), target_len (B,))`,
        padded with `pad` on the right (m = 1 with a lead token, else 0).
    """
    batch, raw = block.shape
    lead_len = 0 if lead is None else 1
    enc_width = lead_len + int(prefix_len.max()) + 1
    tgt_width = raw + 1 - int(prefix_len.min())
    p = prefix_len[:, None]
    k = torch.arange(enc_width, device=block.device)[None] - lead_len  # (1, S) index into the block
    enc = block.gather(1, k.clamp(0, raw - 1).expand(batch, -1))
    enc = torch.where(k == p, torch.full_like(enc, eos), enc)
    enc = torch.where(k > p, torch.full_like(enc, pad), enc)
    if lead is not None:
        enc[:, 0] = lead
    j = p + torch.arange(tgt_width, device=block.device)[None]  # (B, Q) index into the block
    tgt = block.gather(1, j.clamp(max=raw - 1))
    tgt = torch.where(j == raw, torch.full_like(tgt, eos), tgt)
    tgt = torch.where(j > raw, torch.full_like(tgt, pad), tgt)
    return enc, lead_len + prefix_len + 1, tgt, raw - prefix_len + 1


def encoder_decoder_batch(
    enc: torch.Tensor, enc_len: torch.Tensor, tgt: torch.Tensor, tgt_len: torch.Tensor, *, pad: int
) -> dict[str, torch.Tensor]:
    """T5 batch from right-padded encoder inputs and targets.

    Returns `input_ids` `(B, S)`, `attention_mask` `(B, S)` (encoder padding), `decoder_input_ids` `(B, Q)`
    (targets shifted right behind `[PAD]`, T5's start token) and `labels` `(B, Q)` (-100 on padding).
    """
    s_pos = torch.arange(enc.shape[1], device=enc.device)[None]
    q_pos = torch.arange(tgt.shape[1], device=tgt.device)[None]
    labels = torch.where(q_pos < tgt_len[:, None], tgt, torch.full_like(tgt, IGNORE))
    start = torch.full((tgt.shape[0], 1), pad, dtype=tgt.dtype, device=tgt.device)
    return {
        "input_ids": enc,
        "attention_mask": s_pos < enc_len[:, None],
        "decoder_input_ids": torch.cat([start, tgt[:, :-1]], 1),
        "labels": labels,
    }


def sample_prefix_len(
    batch: int, low: int, high: int, fraction: float | None, generator: torch.Generator | None
) -> torch.Tensor:
    """`(B,)` prefix lengths: uniform integers in `[low, high]`, or `round(fraction * (high + 1))` clamped.

    A random split point per sequence is the T5 paper's prefix LM (sec. 3.3.1); a fixed fraction gives
    every row the same split (e.g. 0.5 for "first half in, second half out").
    """
    if fraction is not None:
        value = min(max(round(fraction * (high + 1)), low), high)
        return torch.full((batch,), value, dtype=torch.long)
    return torch.randint(low, high + 1, (batch,), generator=generator)
