"""One Transformer layer (pre/post norm, optional cross-attention) and one stack of them.

Encoder (bidirectional), decoder (causal) and cross-attending decoder are the same :class:`Stack` with
``causal`` / ``cross`` pinned. The stack computes positions, the attention mask and any position bias
once and hands them to every layer (x-transformers' pattern; T5 computes its bias in the first layer and
reuses it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import torch
from famlab.families.blocks.attention import Attention
from famlab.families.blocks.feedforward import FFN_KINDS, FeedForward
from famlab.families.blocks.norms import make_norm
from famlab.families.blocks.positions import Positions
from famlab.families.kernels.context_kv import project_context
from famlab.families.kernels.dispatch import Kernel, use_fast
from torch import Tensor, nn

LayerCache = dict[str, dict[str, Tensor]]


def _is_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and compiler.is_compiling())


def prepare_mask(
    attention_mask: Tensor | None,
    *,
    q_len: int,
    k_len: int,
    causal: bool,
    bias: Tensor | None = None,
    device: torch.device | None = None,
) -> tuple[Tensor | None, bool]:
    """Turn a user mask into what :func:`attend` takes: ``(mask, is_causal)``.

    Args:
        attention_mask: None; a ``(B, S)`` padding mask (1/True = keep), combined with causality when
            ``causal``; or a full boolean ``(B, T, S)`` / ``(B, 1, T, S)`` mask (True = may attend), which is
            used exactly as given (prefix-LM and packed-document masks replace causality).
        q_len: T. With a KV cache the queries are the last T of the S keys.
        k_len: S.
        causal: Whether the stack is causal.
        bias: Optional additive position bias ``(B|1, H, T, S)``.
        device: Where a causal mask built here goes.

    Returns:
        ``(None, is_causal)``, a boolean ``(B|1, 1, T, S)`` mask, or a float ``(B|1, H, T, S)`` bias with
        masked entries at ``-inf``. Rows with no allowed key (e.g. left padding under a causal mask) are
        opened fully: their outputs are padding anyway, and an all-``-inf`` row would give NaN that leaks
        through ``0 * NaN`` in the next layer.
    """
    mask: Tensor | None = None
    user_mask = attention_mask is not None
    if attention_mask is not None:
        if attention_mask.dim() == 2:
            if attention_mask.shape[-1] != k_len:
                raise ValueError(f"attention_mask has {attention_mask.shape[-1]} positions, expected {k_len}")
            keep = attention_mask.bool()
            # an all-ones padding mask is no mask: keeps SDPA on its fused causal / unmasked kernels
            if _is_compiling() or not bool(keep.all()):
                mask = keep[:, None, None, :]  # (B, 1, 1, S)
                if causal:
                    mask = mask & _causal(q_len, k_len, keep.device)
        elif attention_mask.dim() in (3, 4):
            mask = attention_mask if attention_mask.dim() == 4 else attention_mask[:, None]  # (B, 1, T, S)
            if mask.dtype != torch.bool:
                raise ValueError(f"a full attention_mask must be boolean, got {mask.dtype}")
            if tuple(mask.shape[-2:]) != (q_len, k_len):
                raise ValueError(f"attention_mask is {tuple(mask.shape)}, expected (B, 1, {q_len}, {k_len})")
        else:
            raise ValueError(
                f"attention_mask must be (B, S), (B, T, S) or (B, 1, T, S); got {tuple(attention_mask.shape)}"
            )
    is_causal = False
    if mask is None and causal and q_len > 1:
        if bias is None and q_len == k_len:
            is_causal = True
        else:
            mask = _causal(q_len, k_len, device)
    if mask is not None and user_mask:
        mask = mask | ~mask.any(dim=-1, keepdim=True)  # open fully masked rows (see docstring)
    if bias is not None:
        return (bias if mask is None else bias.masked_fill(~mask, float("-inf"))), False
    return mask, is_causal


def _causal(q_len: int, k_len: int, device: torch.device | None) -> Tensor:
    """Causal mask ``(T, S)`` aligned bottom-right: query i is key ``S - T + i``."""
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=k_len - q_len)


class Layer(nn.Module):
    """Self-attention, optional cross-attention and a feed-forward block, each in a residual branch.

    Args:
        dim, num_heads, num_kv_heads, head_dim, qk_scale, attn_impl: see :class:`Attention`.
        ffn_dim, ffn, activation: see :class:`FeedForward` (``ffn`` is ``plain | gated``).
        cross: Add a cross-attention sub-layer (T5 decoder).
        norm, norm_eps: Norm kind (``layernorm | rmsnorm``) and epsilon.
        pre_norm: ``x + f(norm(x))`` when True, ``norm(x + f(x))`` (BERT) when False.
        bias, dropout: Linear/LayerNorm biases; residual-branch and attention dropout.
        ffn_dropout: Also drop inside the feed-forward block, after its activation (T5's
            ``DenseReluDense.dropout``; BERT and GPT-2 have none there).
    """

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        ffn_dim: int,
        cross: bool = False,
        norm: str = "layernorm",
        norm_eps: float = 1e-5,
        pre_norm: bool = True,
        ffn: str = "plain",
        activation: str = "gelu",
        bias: bool = True,
        dropout: float = 0.0,
        qk_scale: float | None = None,
        attn_impl: str = "sdpa",
        ffn_dropout: bool = False,
    ) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        attn_args = dict(
            num_kv_heads=num_kv_heads, head_dim=head_dim, bias=bias, dropout=dropout, qk_scale=qk_scale, impl=attn_impl
        )
        self.attn = Attention(dim, num_heads, **attn_args)  # type: ignore[arg-type]
        self.attn_norm = make_norm(norm, dim, eps=norm_eps, bias=bias)
        self.cross_attn = Attention(dim, num_heads, cross=True, **attn_args) if cross else None  # type: ignore[arg-type]
        self.cross_norm = make_norm(norm, dim, eps=norm_eps, bias=bias) if cross else None
        self.ffn = FeedForward(
            dim,
            ffn_dim,
            activation=activation,
            gated=FFN_KINDS.get(getattr(ffn, "value", ffn)).gated,
            bias=bias,
            dropout=dropout if ffn_dropout else 0.0,
        )
        self.ffn_norm = make_norm(norm, dim, eps=norm_eps, bias=bias)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None,
        is_causal: bool,
        rope: tuple[Tensor, Tensor] | None = None,
        context: Tensor | None = None,
        context_mask: Tensor | None = None,
        cache: LayerCache | None = None,
        context_kv: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """``(B, T, C) -> (B, T, C)``; ``context`` ``(B, S, C)`` (or its K/V projection ``context_kv``) feeds the
        cross-attention."""
        self_cache = cache["self"] if cache is not None else None
        cross_cache = cache["cross"] if cache is not None else None
        if self.pre_norm:
            x = x + self.drop(self.attn(self.attn_norm(x), mask=mask, is_causal=is_causal, rope=rope, cache=self_cache))
            if self.cross_attn is not None and self.cross_norm is not None:
                y = self.cross_attn(
                    self.cross_norm(x), context, mask=context_mask, cache=cross_cache, context_kv=context_kv
                )
                x = x + self.drop(y)
            x = x + self.drop(self.ffn(self.ffn_norm(x)))
        else:
            x = self.attn_norm(x + self.drop(self.attn(x, mask=mask, is_causal=is_causal, rope=rope, cache=self_cache)))
            if self.cross_attn is not None and self.cross_norm is not None:
                y = self.cross_attn(x, context, mask=context_mask, cache=cross_cache, context_kv=context_kv)
                x = self.cross_norm(x + self.drop(y))
            x = self.ffn_norm(x + self.drop(self.ffn(x)))
        return x


class Stack(nn.Module):
    """Positions + ``num_layers`` :class:`Layer` s + the norm that goes with the norm placement.

    Pre-norm stacks end with a final norm (GPT-2's ``ln_f``, T5's ``final_layer_norm``); post-norm stacks
    normalise the embeddings instead (BERT's embedding LayerNorm). Dropout sits on the embeddings, the
    attention weights and every residual branch; ``final_dropout`` adds one after the final norm and
    ``ffn_dropout`` (a :class:`Layer` argument) one after the feed-forward activation, which is where T5
    places its other dropouts (Raffel et al. 2020; HF ``T5Stack`` / ``T5DenseActDense``).

    Args:
        positions: The stack's position scheme (shared by all its layers).
        num_layers: Depth.
        causal: Decoder (causal self-attention) or encoder.
        max_len: Longest position the absolute schemes cover.
        final_dropout: Dropout after the final norm (T5).
        **layer_args: Passed to every :class:`Layer` (``cross=True`` for a cross-attending decoder).
    """

    def __init__(
        self,
        positions: Positions,
        *,
        num_layers: int,
        causal: bool,
        max_len: int,
        dim: int,
        norm: str = "layernorm",
        norm_eps: float = 1e-5,
        pre_norm: bool = True,
        bias: bool = True,
        dropout: float = 0.0,
        final_dropout: bool = False,
        **layer_args: object,
    ) -> None:
        super().__init__()
        self.positions = positions
        self.causal = causal
        self.max_len = max_len
        self.layers = nn.ModuleList(
            Layer(dim=dim, norm=norm, norm_eps=norm_eps, pre_norm=pre_norm, bias=bias, dropout=dropout, **layer_args)  # type: ignore[arg-type]
            for _ in range(num_layers)
        )
        self.embed_norm = None if pre_norm else make_norm(norm, dim, eps=norm_eps, bias=bias)
        self.final_norm = make_norm(norm, dim, eps=norm_eps, bias=bias) if pre_norm else None
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.final_drop = nn.Dropout(dropout) if dropout > 0 and final_dropout else nn.Identity()

    def new_cache(self) -> list[LayerCache]:
        """An empty KV cache for incremental decoding with this stack."""
        return [{"self": {}, "cross": {}} for _ in self.layers]

    def forward(
        self,
        x: Tensor,
        *,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        context: Tensor | None = None,
        context_mask: Tensor | None = None,
        cache: list[LayerCache] | None = None,
    ) -> Tensor:
        """Run the stack on embedded tokens ``x`` ``(B, T, C)``; returns ``(B, T, C)``.

        Args:
            x: Token (+ token-type) embeddings.
            attention_mask: See :func:`prepare_mask`; with a cache it covers all S = past + T keys.
            position_ids: ``(T,)`` or ``(B, T)``; default ``past + arange(T)``. Bias schemes (ALiBi, T5)
                use the default positions (as Hugging Face's T5 does).
            context: Encoder output ``(B, S_enc, C)`` for cross-attention.
            context_mask: ``(B, S_enc)`` encoder padding mask.
            cache: From :meth:`new_cache`; updated in place.
        """
        B, T, _ = x.shape
        past = 0
        if cache is not None and "k" in cache[0]["self"]:
            past = cache[0]["self"]["k"].shape[2]
        S = past + T
        steps = torch.arange(past, S, device=x.device)  # (T,)
        if position_ids is None:
            position_ids = steps
        x = self._embed(x, position_ids, S)
        rope = self.positions.rotary(position_ids)
        bias = self.positions.bias(steps, torch.arange(S, device=x.device))  # (1, H, T, S) or None
        mask, is_causal = prepare_mask(attention_mask, q_len=T, k_len=S, causal=self.causal, bias=bias, device=x.device)
        cross_mask = None
        if context_mask is not None:
            S_enc = context.shape[1] if context is not None else context_mask.shape[-1]
            cross_mask, _ = prepare_mask(context_mask, q_len=T, k_len=S_enc, causal=False)
        context_kv = self._context_kv(context, cache)
        for i, layer in enumerate(self.layers):
            x = layer(
                x,
                mask=mask,
                is_causal=is_causal,
                rope=rope,
                context=context,
                context_mask=cross_mask,
                cache=cache[i] if cache is not None else None,
                context_kv=context_kv[i],
            )
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.final_drop(x)

    def _embed(self, x: Tensor, position_ids: Tensor, S: int) -> Tensor:
        """``x`` with the absolute position embeddings (if the scheme has them), the embedding norm (post-norm
        stacks) and dropout; ``S`` keys in all (past + new) must fit a length-bounded scheme."""
        if S > self.max_len and self.positions.scheme.length_bounded:
            raise ValueError(f"sequence of {S} positions exceeds model.max_seq_len={self.max_len}")
        absolute = self.positions.embed(position_ids)
        if absolute is not None:
            x = x + absolute
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        return self.drop(x)

    def _context_kv(self, context: Tensor | None, cache: list[LayerCache] | None) -> list[tuple[Tensor, Tensor] | None]:
        """Each layer's cross-attention K/V of ``context``, all projected in one matmul where the fast kernel is on
        (:func:`project_context`); None for a layer that projects its own (the default, and every cached step)."""
        context_kv: list[tuple[Tensor, Tensor] | None] = [None] * len(self.layers)  # None: each layer projects
        layers = cast("Iterable[Layer]", self.layers)  # built of Layers in __init__; the ModuleList is untyped
        cross = [layer.cross_attn for layer in layers if layer.cross_attn is not None]
        cached = cache is not None and "k" in cache[0]["cross"]  # later decoding steps reuse the cached K/V
        if context is not None and len(cross) == len(self.layers) > 1 and not cached:
            if use_fast(Kernel.CONTEXT_KV, context):
                context_kv = list(project_context(context, [a.kv for a in cross], cross[0].split_sizes[1:]))
        return context_kv
