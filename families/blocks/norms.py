"""Normalisation layers: LayerNorm (BERT, GPT-2) and RMSNorm (T5), chosen by name (:data:`NORMS`, kept in
``famlab.families.config`` and registered here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from famlab.families.config import NORMS, Norm
from famlab.families.kernels.dispatch import Kernel, use_fast
from famlab.families.kernels.rms_norm import rms_norm
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """Root-mean-square norm without mean subtraction or bias (Zhang & Sennrich 2019; T5's ``T5LayerNorm``).

    Args:
        dim: Feature size C.
        eps: Added to the mean square before the square root.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        """Normalise ``x`` of shape ``(..., C)``; statistics in fp32 as T5 does (half-precision variance overflows)."""
        if use_fast(Kernel.RMS_NORM, x, self.weight):
            return rms_norm(x, self.weight, self.eps)
        return rms_norm_reference(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def rms_norm_reference(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """T5's formula step by step, differentiated by autograd (``famlab.families.kernels.rms_norm`` is the fast
    fp32 path)."""
    variance = x.float().pow(2).mean(-1, keepdim=True)
    y = x * torch.rsqrt(variance + eps)
    if weight.dtype in (torch.float16, torch.bfloat16):
        y = y.to(weight.dtype)
    return weight * y


# (dim, eps, bias) -> the norm layer
NormBuilder = Callable[[int, float, bool], nn.Module]

# Each built-in ``model.norm`` value and how it is built (``famlab.families.config.NORMS``, which ``ModelConfig`` checks
# ``model.norm`` against; a plugin registers its own norm there the same way).
NORMS.register(Norm.LAYERNORM.value, lambda dim, eps, bias: nn.LayerNorm(dim, eps=eps, bias=bias))
NORMS.register(Norm.RMSNORM.value, lambda dim, eps, bias: RMSNorm(dim, eps=eps))  # no bias, as T5
NORMS.seal()


def make_norm(kind: str, dim: int, *, eps: float, bias: bool = True) -> nn.Module:
    """Build a norm by name: ``layernorm`` (with bias when ``bias``) or ``rmsnorm``; another name is a ConfigError
    naming ``model.norm``."""
    return cast(NormBuilder, NORMS.get(kind))(dim, eps, bias)  # what NORMS.register put there
