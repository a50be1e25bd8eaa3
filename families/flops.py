"""Analytic matmul FLOPs of a training step (forward + backward = 3x forward, Kaplan et al. 2020 / PaLM App. B).

Counts every matrix multiply at its full size: projections, attention scores and the attention-weighted sum
(over all S keys, as the dense kernels compute them, causal or not), feed-forward, and the output head only
for the tokens that carry a label (MLM projects ~15 % of positions). Embedding lookups, norms, softmax and
biases are not matmuls and are left out, as in the usual 6·N·D estimate.
"""

from __future__ import annotations

from collections.abc import Mapping

from famlab.families.config import ModelConfig
from famlab.families.formats import Arch
from famlab.families.registry import family
from torch import Tensor


def _attention(C: int, H: int, K: int, D: int, T: int, S: int, *, self_attn: bool) -> int:
    """Forward FLOPs of one attention block for one sequence: T queries over S keys."""
    kv_tokens = T if self_attn else S
    proj = 2 * T * C * H * D + 2 * kv_tokens * C * 2 * K * D + 2 * T * H * D * C  # q, k/v, o
    return proj + 2 * (2 * H * T * S * D)  # scores q·k and weights·v


def _ffn(cfg: ModelConfig, T: int) -> int:
    F = cfg.ffn_dim or 0
    up = 2 * F if cfg.ffn.gated else F
    return 2 * T * cfg.dim * up + 2 * T * F * cfg.dim


def forward_flops(
    cfg: ModelConfig, *, batch_size: int, seq_len: int, dec_len: int = 0, num_label_tokens: int | None = None
) -> int:
    """Forward matmul FLOPs of a batch.

    Args:
        cfg: The network's config.
        batch_size: B.
        seq_len: Tokens per sequence read by the encoder (BERT, T5) or decoder (GPT).
        dec_len: An encoder-decoder's (T5's) decoder tokens per sequence.
        num_label_tokens: Positions the output head projects, over the whole batch; default every output
            position (B·seq_len, or B·dec_len for T5).
    """
    C, H, D = cfg.dim, cfg.num_heads, cfg.head_dim or 0
    K = cfg.num_kv_heads or H
    arch = family(cfg.family).arch
    per_seq = 0
    if arch is Arch.ENCODER_DECODER:
        enc = _attention(C, H, K, D, seq_len, seq_len, self_attn=True) + _ffn(cfg, seq_len)
        dec = (
            _attention(C, H, K, D, dec_len, dec_len, self_attn=True)
            + _attention(C, H, K, D, dec_len, seq_len, self_attn=False)
            + _ffn(cfg, dec_len)
        )
        per_seq = cfg.num_layers * enc + (cfg.num_decoder_layers or 0) * dec
        out_positions = batch_size * dec_len
    else:
        per_seq = cfg.num_layers * (_attention(C, H, K, D, seq_len, seq_len, self_attn=True) + _ffn(cfg, seq_len))
        out_positions = batch_size * seq_len
    labels = out_positions if num_label_tokens is None else num_label_tokens
    head = 2 * labels * C * cfg.vocab_size
    if arch is Arch.ENCODER:
        head += 2 * labels * C * C  # MLM transform dense
    return batch_size * per_seq + head


def batch_shape(cfg: ModelConfig, batch: Mapping[str, Tensor]) -> tuple[int, int, int | None]:
    """``(seq_len, dec_len, num_label_tokens)`` of a collated pretraining batch, as :func:`forward_flops` takes them:
    an encoder-decoder's decoder reads the targets (``dec_len``); an encoder's sparse MLM head projects only the
    labelled positions, every other head every output position (``num_label_tokens=None``)."""
    arch = family(cfg.family).arch
    dec_len = int(batch["labels"].shape[1]) if arch is Arch.ENCODER_DECODER else 0
    labels = int((batch["labels"] != -100).sum()) if arch is Arch.ENCODER else None
    return int(batch["input_ids"].shape[1]), dec_len, labels


def train_flops(
    cfg: ModelConfig, *, batch_size: int, seq_len: int, dec_len: int = 0, num_label_tokens: int | None = None
) -> int:
    """Training-step matmul FLOPs: the backward pass costs two forward passes (input and weight gradients)."""
    return 3 * forward_flops(
        cfg, batch_size=batch_size, seq_len=seq_len, dec_len=dec_len, num_label_tokens=num_label_tokens
    )
