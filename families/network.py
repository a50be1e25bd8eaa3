"""What the assemblers share: the output type, the :class:`Network` protocol every family's network follows,
config-to-stack wiring and faithful initialisation."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

import torch
from famlab.families.blocks.attention import Attention
from famlab.families.blocks.feedforward import FeedForward
from famlab.families.blocks.layers import LayerCache, Stack
from famlab.families.blocks.norms import RMSNorm
from famlab.families.blocks.positions import LearnedPositions, T5RelativeBias, make_positions
from famlab.families.config import ConfigError, InitScheme, ModelConfig, NormPosition
from famlab.families.heads import LMHead, MLMHead
from torch import Tensor, nn


@dataclass
class NetworkOutput:
    """What every network returns.

    Attributes:
        logits: ``(B, T, V)`` (T = decoder length for T5), or None with ``compute_logits=False``.
        hidden: Final hidden states after the final norm ``(B, T, C)`` (decoder side for T5).
        encoder_hidden: T5's encoder output ``(B, S, C)``; None for BERT and GPT.
    """

    logits: Tensor | None
    hidden: Tensor
    encoder_hidden: Tensor | None = None


_N = TypeVar("_N", bound="Network")  # the network itself (what nn.Module's train / to / eval return)


@runtime_checkable
class Network(Protocol):
    """What a famlab network is to its callers (the LightningModules, the objectives, evaluation, zero-shot scoring,
    fine-tuning, export): an ``nn.Module`` (these are the ``nn.Module`` methods they use) that names its family and
    its config, computes a :class:`NetworkOutput` and projects hidden states onto the vocabulary.

    The family's :class:`~famlab.families.formats.InputFormat` says what else a network of its architecture offers:
    a causal decoder :class:`CausalDecoder` (``decoder.new_cache()``, ``output_embedding()``), an encoder-decoder
    :class:`EncoderDecoder` (``encode`` / ``decode``, ``output_embedding()``).
    """

    family: str  # ``model.family``: the name the family is registered under (``famlab.families.registry``)
    config: ModelConfig
    training: bool

    def __call__(self, input_ids: Tensor, **kwargs: Tensor | bool | list[LayerCache] | None) -> NetworkOutput:
        """The forward: ``input_ids`` and the family's keyword inputs (``attention_mask``, ``position_ids``,
        ``token_type_ids``, ``decoder_input_ids``, ``compute_logits``, ``cache``, ...)."""
        ...

    def project(self, hidden: Tensor) -> Tensor:
        """The output head on any ``(..., C)`` tensor, giving ``(..., V)``."""
        ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
                         ) -> Iterator[tuple[str, nn.Parameter]]: ...

    def modules(self) -> Iterator[nn.Module]: ...

    def train(self: _N, mode: bool = True) -> _N: ...

    def to(self: _N, device: torch.device | str | int | None = None, dtype: torch.dtype | None = None,
           non_blocking: bool = False) -> _N: ...

    def eval(self: _N) -> _N: ...

    def state_dict(self, *, prefix: str = "", keep_vars: bool = False) -> dict[str, Tensor]: ...

    def load_state_dict(self, state_dict: Mapping[str, Tensor], strict: bool = True, assign: bool = False
                        ) -> tuple[list[str], list[str]]:
        """``(missing keys, unexpected keys)`` (``nn.Module``'s ``_IncompatibleKeys``)."""
        ...


class CausalDecoder(Network, Protocol):
    """A causal decoder (GPT): ``decoder`` is its :class:`Stack` (``decoder.new_cache()`` for incremental decoding),
    ``forward(input_ids, attention_mask, position_ids, compute_logits, cache)``."""

    decoder: Stack

    def output_embedding(self) -> tuple[Tensor, float]: ...


class EncoderDecoder(Network, Protocol):
    """An encoder-decoder (T5): ``encode(input_ids, attention_mask) -> (B, S, C)``, ``decode(decoder_input_ids,
    encoder_hidden, encoder_attention_mask, decoder_attention_mask, cache) -> (B, T, C)``."""

    decoder: Stack

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor: ...

    def decode(self, decoder_input_ids: Tensor, encoder_hidden: Tensor, encoder_attention_mask: Tensor | None = None,
               decoder_attention_mask: Tensor | None = None, cache: list[LayerCache] | None = None) -> Tensor: ...

    def output_embedding(self) -> tuple[Tensor, float]: ...


def check_buildable(cfg: ModelConfig) -> None:
    """Reject what ``__post_init__`` had to tolerate (vocab_size=0 means "not set yet")."""
    if cfg.vocab_size < 1:
        raise ConfigError("model.vocab_size=0: set it (experiments takes it from the tokenizer) before building")


def make_stack(
    cfg: ModelConfig,
    *,
    causal: bool,
    cross: bool = False,
    num_layers: int | None = None,
    t5_dropout: bool = False,
) -> Stack:
    """Build one :class:`Stack` from the config (the only place the blocks meet ``ModelConfig``).

    ``t5_dropout`` adds T5's two extra dropout sites (after the feed-forward activation and after the
    final norm), so a T5 in training mode drops exactly where HF's ``T5ForConditionalGeneration`` does.
    """
    positions = make_positions(
        cfg.pos,
        dim=cfg.dim,
        num_heads=cfg.num_heads,
        head_dim=cfg.head_dim or 0,
        max_len=cfg.max_seq_len,
        causal=causal,
        rope_theta=cfg.rope_theta,
        num_buckets=cfg.rel_pos_buckets,
        max_distance=cfg.rel_pos_max_distance,
    )
    return Stack(
        positions,
        num_layers=num_layers or cfg.num_layers,
        causal=causal,
        max_len=cfg.max_seq_len,
        dim=cfg.dim,
        norm=cfg.norm.value,
        norm_eps=cfg.norm_eps,
        pre_norm=cfg.norm_position is NormPosition.PRE,
        bias=cfg.bias,
        dropout=cfg.dropout,
        final_dropout=t5_dropout,
        ffn_dropout=t5_dropout,
        num_heads=cfg.num_heads,
        num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        ffn_dim=cfg.ffn_dim,
        cross=cross,
        ffn=cfg.ffn.value,
        activation=cfg.activation.value,
        qk_scale=cfg.qk_scale,
        attn_impl=cfg.attn_impl.value,
    )


def set_attn_impl(net: nn.Module, impl: str) -> None:
    """Switch every attention module of ``net`` to ``sdpa`` or ``math`` (e.g. for FLOP counting)."""
    for module in net.modules():
        if isinstance(module, Attention):
            module.impl = impl


@torch.no_grad()
def init_weights(net: nn.Module, cfg: ModelConfig) -> None:
    """Initialise ``net`` as its family's reference does (``cfg.init``).

    - ``bert``: every weight normal(0, init_std), biases 0, norms 1, the padding embedding row 0 (HF BERT).
    - ``gpt2``: as bert without the padding row, plus residual output projections (attention ``o`` and FFN
      ``down``) at init_std / sqrt(2 * layers): each layer adds two residual branches (GPT-2 paper).
    - ``t5``: Mesh-TF factors (HF ``T5PreTrainedModel._init_weights``): embeddings and an untied head
      normal(0, 1); q (C·D)^-0.5, k/v C^-0.5, o (H·D)^-0.5; FFN in C^-0.5, out F^-0.5; relative bias
      C^-0.5 — all times ``init_std / 0.02`` (HF's ``initializer_factor``). No 1/sqrt(D) in attention, so q's
      init carries it.
    """
    std, scheme, C = cfg.init_std, cfg.init, cfg.dim
    factor = std / 0.02
    t5 = scheme is InitScheme.T5
    for module in net.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=factor * C**-0.5 if t5 else std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=factor if t5 else std)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, (nn.LayerNorm, RMSNorm)):
            nn.init.ones_(module.weight)
            norm_bias = getattr(module, "bias", None)
            if isinstance(norm_bias, Tensor):
                nn.init.zeros_(norm_bias)
        elif isinstance(module, LearnedPositions):
            nn.init.normal_(module.weight, std=factor if t5 else std)
        elif isinstance(module, T5RelativeBias):
            nn.init.normal_(module.weight, std=factor * C**-0.5 if t5 else std)
        elif isinstance(module, (LMHead, MLMHead)):
            if module.weight is not None:
                nn.init.normal_(module.weight, std=factor if t5 else std)
            if isinstance(module, MLMHead):
                module.bias.zero_()
    for stack in (m for m in net.modules() if isinstance(m, Stack)):
        for module in stack.modules():
            if isinstance(module, Attention):
                H, D = module.num_heads, module.head_dim
                if t5:
                    q = module.q.weight if module.cross else module.qkv.weight[: H * D]
                    nn.init.normal_(q, std=factor * (C * D) ** -0.5)
                    nn.init.normal_(module.o.weight, std=factor * (H * D) ** -0.5)
                elif scheme is InitScheme.GPT2:
                    nn.init.normal_(module.o.weight, std=std / math.sqrt(2 * len(stack.layers)))
            elif isinstance(module, FeedForward):
                if t5:
                    nn.init.normal_(module.down.weight, std=factor * module.hidden**-0.5)
                elif scheme is InitScheme.GPT2:
                    nn.init.normal_(module.down.weight, std=std / math.sqrt(2 * len(stack.layers)))
