"""Every cross-attention layer's K/V projection of the encoder output as one matmul.

Reference: each layer's own ``kv(context).split(sizes, dim=-1)`` (``famlab.families.blocks.attention.Attention``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def project_context(
    context: Tensor, projections: Sequence[nn.Linear], sizes: Sequence[int]
) -> list[tuple[Tensor, Tensor]]:
    """``[p(context).split(sizes, dim=-1) for p in projections]`` (each layer's k and v) with one matmul.

    A decoder's cross-attention layers all project the same encoder output ``(B, S, C)``: one
    ``(B*S, C) @ (C, L*2*K*D)`` matmul over the concatenated K/V weights (and one of each in the backward)
    instead of L narrow ones; the encoder output's gradient comes out of one matmul instead of L summed ones,
    and the 2L slices are cut in one split (one concatenation in the backward).

    Args:
        context: Encoder output ``(B, S, C)``.
        projections: The L layers' K/V projections, each ``C -> sum(sizes)``, all with or all without a bias.
        sizes: The k and v widths of each projection's output (``K * D`` each).
    """
    weights: list[Tensor] = [p.weight for p in projections]
    weight = torch.cat(weights)  # (L * 2KD, C)
    biases: list[Tensor] = [p.bias for p in projections if p.bias is not None]
    bias = torch.cat(biases) if biases else None
    parts = F.linear(context, weight, bias).split(list(sizes) * len(projections), dim=-1)  # (B, S, K * D) each
    return [(parts[2 * i], parts[2 * i + 1]) for i in range(len(projections))]
