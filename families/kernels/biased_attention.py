"""Attention with an additive bias that needs a gradient (T5's learned relative bias), for CPUs.

Reference: ``F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale)``
(``famlab.families.blocks.attention.attend``). Shape legend as there: B batch, H heads, T queries, S keys, D head dim.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def biased_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, *, scale: float, dropout: float) -> Tensor:
    """``softmax(scale * q @ k^T + bias) @ v``: ``(B, H, T, D)``, ``(B, H, S, D)`` x2, bias ``(B|1, H|1, T, S)``.

    CPU SDPA has no fused kernel for a bias with a gradient and takes its math path, which scales q and k
    separately (even by 1.0, as T5's scale is) and guards fully masked rows (isneginf / all / where): about
    six extra passes over ``(B, H, T, S)`` per layer, forward and backward. Here: matmul, in-place bias add,
    softmax, matmul. The bias must have no fully masked row (``layers.prepare_mask`` opens them), else NaN.
    """
    if scale != 1.0:
        q = q * scale  # (B, H, T, D): cheaper than scaling the (B, H, T, S) scores
    scores = torch.matmul(q, k.transpose(-2, -1)).add_(bias)  # (B, H, T, S); matmul saves q, k, not its output
    weights = scores.softmax(-1) if scores.dtype == torch.float32 else scores.float().softmax(-1).to(q.dtype)
    if dropout > 0:
        weights = F.dropout(weights, p=dropout)
    return torch.matmul(weights, v)  # (B, H, T, D)
