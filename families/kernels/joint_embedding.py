"""Two token lookups in one embedding table as one lookup (T5's encoder and decoder tokens).

Reference: ``embed(a), embed(b)`` (``famlab.families.t5.T5.forward`` outside the fast path).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def embed_both(embed: nn.Embedding, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``(embed(a), embed(b))`` for token ids ``a`` ``(B, S)`` and ``b`` ``(B, T)``: ``(B, S, C)``, ``(B, T, C)``.

    One lookup: the backward builds one dense ``(V, C)`` embedding gradient (a zero-filled V x C buffer plus
    an accumulation into a tied head's) instead of two. Both outputs are contiguous rows of one tensor.
    """
    embedded = embed(torch.cat((a.reshape(-1), b.reshape(-1))))  # (B*S + B*T, C)
    first, second = embedded.split((a.numel(), b.numel()))
    return first.view(*a.shape, -1), second.view(*b.shape, -1)
