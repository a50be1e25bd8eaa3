"""The one place that decides, per call and per device, whether a fast kernel replaces its block's reference.

The kernels were written and measured on CPUs (docs/results.md, Speed). A CPU's fast path is not a GPU's: the
fused LM loss cuts the vocabulary into 1,024-column matmuls and the rows into 16 MiB chunks, which at the
``small`` preset's shapes (16,384 rows, vocabulary 16k) is thousands of small matmuls a step, each a kernel
launch on a GPU. So a kernel runs on a device only where a measurement on that device says it helps, or where
it is device-neutral and does strictly less work (fewer launches, the same FLOPs, no larger buffers). No GPU
measurement exists yet, so CUDA (and any other accelerator) gets the standard path the GPU anchors use
(nanoGPT, litgpt: SDPA, dense bf16 logits under autocast with an fp32 loss, plain autograd elsewhere).

| kernel | replaces | CPU | CUDA and other devices |
|---|---|---|---|
| ``linear_cross_entropy`` | LM head logits + ``F.cross_entropy`` | always | never (1) |
| ``biased_attention`` | SDPA with a float bias | the bias needs a gradient | never (2) |
| ``rms_norm`` | ``norms.rms_norm_reference`` under autograd | fp32 input and weight, with autograd | never (3) |
| ``context_kv`` | each cross-attention layer's own K/V matmul | always (> 1 cross layer) | always (4) |
| ``joint_embedding`` | T5's two lookups in one table | always | always (5) |

Every CPU rule is measured (docs/results.md, Speed). Per device otherwise:

1. The standard GPU LM loss instead: dense logits from one matmul (bf16 under autocast), the loss in fp32
   (``objectives.objective.dense_lm_loss``'s reference path, as nanoGPT and litgpt) - a handful of launches
   where the CPU kernel's slices and chunks make thousands at the ``small`` shapes.
2. SDPA's memory-efficient CUDA kernel takes an additive bias with a gradient; the CPU kernel only avoids
   CPU SDPA's math path.
3. Unmeasured on a GPU; what it saves (full-size temporaries) is CPU allocator traffic, and ``torch.compile``
   fuses the reference's elementwise chain into a kernel or two anyway.
4. Device-neutral and strictly less work: the L layers' projections of one encoder output as one matmul of
   the same FLOPs (one launch instead of L, forward and backward).
5. Device-neutral and strictly less work: one lookup and one dense ``(V, C)`` gradient instead of two.

The device is the main input's (``x.device.type``). :func:`as_device` makes every rule read another device type
(tests count a CUDA step's operators on CPU or meta tensors); :func:`reference_only` turns every kernel off,
so a whole network or loss can be compared with its reference.
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


# device-neutral kernels: the same FLOPs in fewer, larger operations, on every device
EVERYWHERE = frozenset({Kernel.CONTEXT_KV, Kernel.JOINT_EMBEDDING})

_fast = True  # False inside reference_only()
_device_type: str | None = None  # set inside as_device(): the device type every rule reads


def device_type(x: Tensor) -> str:
    """The device type the rules read for input ``x``: ``x.device.type``, or the one :func:`as_device` forces."""
    return _device_type if _device_type is not None else x.device.type


def use_fast(kernel: Kernel, x: Tensor, other: Tensor | None = None) -> bool:
    """Whether ``kernel`` runs instead of the reference, given its main input ``x`` and, where the rule reads
    one, a second tensor ``other`` (RMSNorm's weight, attention's float bias).

    Args:
        kernel: Which kernel.
        x: The main input (hidden states, queries, token ids); its device picks the rule.
        other: ``rms_norm``: the weight; ``biased_attention``: the mask or bias (None = no mask).
    """
    if not _fast:
        return False
    if kernel in EVERYWHERE:
        return True
    if device_type(x) != "cpu":  # measured on CPUs only: every other device takes the reference
        return False
    if kernel is Kernel.RMS_NORM:
        # Half precision keeps the reference's fp32 statistics and casts; without autograd the backward is moot.
        weight_fp32 = other is not None and other.dtype == torch.float32
        return x.dtype == torch.float32 and weight_fp32 and torch.is_grad_enabled()
    if kernel is Kernel.BIASED_ATTENTION:
        # CPU SDPA has no fused kernel for a bias with a gradient and takes its math path.
        return other is not None and other.dtype != torch.bool and other.requires_grad
    return True  # linear_cross_entropy on a CPU


@contextmanager
def reference_only() -> Iterator[None]:
    """Run every block, head and loss on its plain reference path inside the ``with`` (tests, debugging)."""
    global _fast
    previous, _fast = _fast, False
    try:
        yield
    finally:
        _fast = previous


@contextmanager
def as_device(kind: str) -> Iterator[None]:
    """Decide every kernel inside the ``with`` as on a ``kind`` device (``"cpu"``, ``"cuda"``), whatever device the
    tensors are on: a CUDA step's choices can be run and counted on a machine without a GPU."""
    global _device_type
    previous, _device_type = _device_type, kind
    try:
        yield
    finally:
        _device_type = previous
