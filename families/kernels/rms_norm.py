"""fp32 RMSNorm with a hand-written backward (reference: ``famlab.families.blocks.norms.rms_norm_reference``)."""

from __future__ import annotations

from typing import Protocol, cast

import torch
from torch import Tensor


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``weight * x / sqrt(mean(x^2) + eps)`` over the last dim of fp32 ``x`` ``(..., C)``, weight ``(C,)``.

    Autograd's backward of the step-by-step formula keeps 7 full-size temporaries; this one keeps 3.
    """
    return cast(Tensor, _RMSNormFunction.apply(x, weight, eps))


class _Context(Protocol):
    """What the autograd context (``torch.autograd.function.FunctionCtx``) offers these two methods."""

    saved_tensors: tuple[Tensor, ...]
    needs_input_grad: tuple[bool, ...]

    def save_for_backward(self, *tensors: Tensor | None) -> None: ...


class _RMSNormFunction(torch.autograd.Function):
    """With ``y = x * r``, ``r = (mean(x^2) + eps)^-1/2`` and ``out = w * y``:
    ``dx = r * (gy - y * mean(gy * y))`` where ``gy = g * w``, and ``dw = sum_rows(g * y)``.
    """

    @staticmethod
    def forward(ctx: _Context, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        dim = x.shape[-1]
        rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(dim).add_(eps).rsqrt_()  # (..., 1)
        y = x * rms
        ctx.save_for_backward(y, rms, weight)
        return y * weight

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: _Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
        y, rms, weight = ctx.saved_tensors
        grad_weight = (grad * y).reshape(-1, y.shape[-1]).sum(0) if ctx.needs_input_grad[1] else None
        grad_y = grad * weight
        mean = torch.linalg.vecdot(grad_y, y).unsqueeze(-1).div_(y.shape[-1])  # (..., 1)
        grad_x = torch.addcmul(grad_y, y, mean, value=-1.0).mul_(rms)
        return grad_x, grad_weight, None
