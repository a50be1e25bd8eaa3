"""Multi-head self- and cross-attention with GQA, masks, position hooks and a KV cache.

Shape legend: B batch, T query length, S key length, H query heads, K key/value heads (H % K == 0),
D head dim, C model dim.

Masks arrive prepared once per stack (see ``layers.prepare_mask``): ``mask`` is ``None``, a boolean
``(B|1, 1, T, S)`` tensor (True = may attend) or an additive float ``(B|1, H|1, T, S)`` tensor (position
bias with masked entries at ``-inf``); ``is_causal`` asks for a top-left causal mask when ``mask`` is None,
which lets ``scaled_dot_product_attention`` use its fused causal kernels.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from famlab.families.blocks.positions import apply_rotary
from famlab.families.kernels.biased_attention import biased_attention
from famlab.families.kernels.dispatch import Kernel, use_fast
from torch import Tensor, nn


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None,
    is_causal: bool,
    scale: float,
    dropout: float = 0.0,
    impl: str = "sdpa",
) -> Tensor:
    """Scaled dot-product attention ``(B, H, T, D) x (B, H, S, D) -> (B, H, T, D)``.

    ``impl="sdpa"`` calls ``F.scaled_dot_product_attention`` (or the biased-attention kernel where
    ``famlab.families.kernels.dispatch`` picks it); ``impl="math"`` is the plain reference
    (matmul, mask, fp32 softmax, matmul) used by tests and by FLOP counting, which sees no FLOPs in SDPA on CPU.
    """
    if impl == "sdpa" and use_fast(Kernel.BIASED_ATTENTION, q, mask):
        assert mask is not None
        return biased_attention(q, k, v, mask, scale=scale, dropout=dropout)
    if impl == "sdpa":
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, scale=scale
        )
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T, S)
    if is_causal:
        T, S = scores.shape[-2:]
        causal = torch.ones(T, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    if dropout > 0:
        weights = F.dropout(weights, p=dropout)
    return weights @ v  # (B, H, T, D)


class Attention(nn.Module):
    """Multi-head attention; self-attention uses one fused QKV Linear, cross-attention a fused KV Linear.

    Args:
        dim: Model width C.
        num_heads: Query heads H.
        num_kv_heads: Key/value heads K (GQA; 1 = MQA); defaults to H.
        head_dim: Per-head width D, independent of C (T5's ``d_kv``); defaults to C // H.
        cross: Keys and values come from a ``context`` (the encoder output) instead of ``x``.
        bias: Biases on the projections.
        dropout: Dropout on the attention weights.
        qk_scale: Logit scale; None = 1/sqrt(D). T5 uses 1.0 (folded into its q init).
        impl: ``sdpa`` or ``math``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        cross: bool = False,
        bias: bool = True,
        dropout: float = 0.0,
        qk_scale: float | None = None,
        impl: str = "sdpa",
    ) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads or num_heads
        self.head_dim = head_dim or dim // num_heads
        if num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads={self.num_kv_heads} must divide num_heads={num_heads}")
        self.cross = cross
        self.dropout = dropout
        self.scale = qk_scale if qk_scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.impl = getattr(impl, "value", impl)
        q_width, kv_width = num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.split_sizes = [q_width, kv_width, kv_width]
        if cross:
            self.q = nn.Linear(dim, q_width, bias=bias)
            self.kv = nn.Linear(dim, 2 * kv_width, bias=bias)
        else:
            self.qkv = nn.Linear(dim, q_width + 2 * kv_width, bias=bias)
        self.o = nn.Linear(q_width, dim, bias=bias)

    def _heads(self, x: Tensor, n: int) -> Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.head_dim).transpose(1, 2)  # (B, n, T, D), a view

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        rope: tuple[Tensor, Tensor] | None = None,
        cache: dict[str, Tensor] | None = None,
        context_kv: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """Attend from ``x`` ``(B, T, C)`` to itself or to ``context`` ``(B, S, C)``; returns ``(B, T, C)``.

        ``rope`` rotates q and k of the new tokens (self-attention only). ``cache`` is a dict owned by the
        caller: self-attention appends this call's k/v to it; cross-attention fills it once and reuses it.
        ``context_kv`` is ``self.kv(context)`` split into k and v ``(B, S, K * D)`` when the caller already
        computed it (``famlab.families.kernels.context_kv``).
        """
        B, T, _ = x.shape
        if self.cross:
            q = self._heads(self.q(x), self.num_heads)  # (B, H, T, D)
            if cache is not None and "k" in cache:
                k, v = cache["k"], cache["v"]  # (B, K, S, D) computed on the first step
            else:
                if context_kv is None:
                    assert context is not None, "cross-attention needs a context"
                    context_kv = self.kv(context).split(self.split_sizes[1:], dim=-1)  # (B, S, K * D) each
                k, v = context_kv
                k, v = self._heads(k, self.num_kv_heads), self._heads(v, self.num_kv_heads)  # (B, K, S, D)
                if cache is not None:
                    cache["k"], cache["v"] = k, v
        else:
            q, k, v = self.qkv(x).split(self.split_sizes, dim=-1)
            q = self._heads(q, self.num_heads)  # (B, H, T, D)
            k, v = self._heads(k, self.num_kv_heads), self._heads(v, self.num_kv_heads)  # (B, K, T, D)
            if rope is not None:
                q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
            if cache is not None:
                if "k" in cache:
                    k, v = torch.cat((cache["k"], k), dim=2), torch.cat((cache["v"], v), dim=2)  # (B, K, S, D)
                cache["k"], cache["v"] = k, v
        if self.num_kv_heads != self.num_heads:  # GQA: each K/V head serves H/K query heads
            repeats = self.num_heads // self.num_kv_heads
            k, v = k.repeat_interleave(repeats, dim=1), v.repeat_interleave(repeats, dim=1)  # (B, H, S, D)
        if mask is not None and mask.dtype != torch.bool and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)
        y = attend(
            q,
            k,
            v,
            mask=mask,
            is_causal=is_causal,
            scale=self.scale,
            dropout=self.dropout if self.training else 0.0,
            impl=self.impl,
        )  # (B, H, T, D)
        return self.o(y.transpose(1, 2).reshape(B, T, -1))  # (B, T, H*D) -> (B, T, C)
