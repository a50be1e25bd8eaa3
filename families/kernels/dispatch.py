"""The one place that decides, per call, whether a fast kernel replaces its block's reference computation.

| kernel | replaces | fast when |
|---|---|---|
| ``linear_cross_entropy`` | LM head logits + ``F.cross_entropy`` (the dense LM loss) | always |
| ``biased_attention`` | ``F.scaled_dot_product_attention`` with a float bias | the bias needs a gradient, not on CUDA |
| ``rms_norm`` | ``norms.rms_norm_reference`` under autograd | fp32 input and weight, gradients enabled |
| ``context_kv`` | each cross-attention layer projecting the encoder output | always (a stack of > 1 cross layers) |
| ``joint_embedding`` | T5 looking up encoder and decoder tokens separately | always |

:func:`reference_only` turns every kernel off, so a whole network or loss can be compared with its reference.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum

import torch
from torch import Tensor


class Kernel(str, Enum):
    """The fast kernels, one module each in ``famlab.families.kernels``."""

    LINEAR_CROSS_ENTROPY = "linear_cross_entropy"
    BIASED_ATTENTION = "biased_attention"
    RMS_NORM = "rms_norm"
    CONTEXT_KV = "context_kv"
    JOINT_EMBEDDING = "joint_embedding"


_fast = True  # False inside reference_only()


def use_fast(kernel: Kernel, x: Tensor, other: Tensor | None = None) -> bool:
    """Whether ``kernel`` runs instead of the reference, given its main input ``x`` and, where the rule reads
    one, a second tensor ``other`` (RMSNorm's weight, attention's float bias).

    Args:
        kernel: Which kernel.
        x: The main input (hidden states, queries, token ids).
        other: ``rms_norm``: the weight; ``biased_attention``: the mask or bias (None = no mask).
    """
    if not _fast:
        return False
    if kernel is Kernel.RMS_NORM:
        # Half precision keeps the reference's fp32 statistics and casts; without autograd the backward is moot.
        weight_fp32 = other is not None and other.dtype == torch.float32
        return x.dtype == torch.float32 and weight_fp32 and torch.is_grad_enabled()
    if kernel is Kernel.BIASED_ATTENTION:
        # CPU SDPA has no fused kernel for a bias with a gradient; CUDA's memory-efficient kernel takes one.
        return other is not None and other.dtype != torch.bool and other.requires_grad and not x.is_cuda
    return True  # linear_cross_entropy, context_kv, joint_embedding: no worse anywhere


@contextmanager
def reference_only() -> Iterator[None]:
    """Run every block, head and loss on its plain reference path inside the ``with`` (tests, debugging)."""
    global _fast
    previous, _fast = _fast, False
    try:
        yield
    finally:
        _fast = previous
