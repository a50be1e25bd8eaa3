"""Normalisation layers: LayerNorm (BERT, GPT-2) and RMSNorm (T5), chosen by name."""

from __future__ import annotations

from typing import Any

import torch
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
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32 and torch.is_grad_enabled():
            return _RMSNormFunction.apply(x, self.weight, self.eps)
        return rms_norm_reference(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def rms_norm_reference(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """T5's formula step by step, differentiated by autograd: the path for half precision and no-grad calls."""
    variance = x.float().pow(2).mean(-1, keepdim=True)
    y = x * torch.rsqrt(variance + eps)
    if weight.dtype in (torch.float16, torch.bfloat16):
        y = y.to(weight.dtype)
    return weight * y


class _RMSNormFunction(torch.autograd.Function):
    """fp32 RMSNorm with a hand-written backward: 3 full-size temporaries instead of autograd's 7.

    With ``y = x * r``, ``r = (mean(x^2) + eps)^-1/2`` and ``out = w * y``:
    ``dx = r * (gy - y * mean(gy * y))`` where ``gy = g * w``, and ``dw = sum_rows(g * y)``.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        dim = x.shape[-1]
        rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(dim).add_(eps).rsqrt_()  # (..., 1)
        y = x * rms
        ctx.save_for_backward(y, rms, weight)
        return y * weight

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        y, rms, weight = ctx.saved_tensors
        grad_weight = (grad * y).reshape(-1, y.shape[-1]).sum(0) if ctx.needs_input_grad[1] else None
        grad_y = grad * weight
        mean = torch.linalg.vecdot(grad_y, y).unsqueeze(-1).div_(y.shape[-1])  # (..., 1)
        grad_x = torch.addcmul(grad_y, y, mean, value=-1.0).mul_(rms)
        return grad_x, grad_weight, None


def make_norm(kind: str, dim: int, *, eps: float, bias: bool = True) -> nn.Module:
    """Build a norm by name: ``layernorm`` (with bias when ``bias``) or ``rmsnorm``."""
    kind = getattr(kind, "value", kind)
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if kind == "rmsnorm":
        return RMSNorm(dim, eps=eps)
    raise ValueError(f"unknown norm {kind!r}; expected layernorm or rmsnorm")
