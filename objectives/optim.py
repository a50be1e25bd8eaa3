"""AdamW (or Adafactor) with weight-decay groups and a linear-warmup + cosine learning-rate schedule (as nanoGPT).

Adafactor is T5's pretraining optimiser (Raffel et al., 2020; Shazeer & Stern, 2018). torch's implementation
scales each step by the parameter's RMS (``alpha = max(eps2, RMS(p)) * min(lr, 1/sqrt(t))``), so T5's
embeddings, initialised with std 1, move as fast relative to their size as its attention weights
(std ``(d_model * d_kv) ** -0.5``). Under AdamW one learning rate cannot serve both: either the embeddings
barely move or the small matrices blow up.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from famlab.families.network import Network
from famlab.objectives.errors import ObjectiveError
from torch import nn

if TYPE_CHECKING:
    from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig

OPTIMIZERS = ("adamw", "adafactor")


@dataclass
class OptimSettings:
    """Optimiser and schedule settings (`optim.*` in the config).

    Attributes:
        name: `adamw` or `adafactor` (torch's, with relative step sizes; `betas`, `eps` and `fused` are AdamW's
            and ignored by it; `lr` caps its relative step size).
        lr: peak learning rate, reached at the end of warmup.
        betas: AdamW betas.
        eps: AdamW epsilon.
        weight_decay: decoupled weight decay, applied only to parameters with >= 2 dims.
        warmup_steps: optimiser steps of linear warmup.
        max_steps: optimiser steps until the cosine reaches its floor (`trainer.max_steps` usually).
        min_lr_ratio: the cosine's floor as a fraction of `lr`.
        fused: fused AdamW kernel; `None` = automatic (fused for float parameters on CPU and CUDA, where torch
            has the kernel: faster than the foreach path on CPU too; docs/results.md, Speed; not under 16-mixed,
            whose grad scaler must unscale before clipping: `use_fused_adamw`).
    """

    lr: float = 3e-4
    name: str = "adamw"
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    warmup_steps: int = 100
    max_steps: int = 1000
    min_lr_ratio: float = 0.1
    fused: bool | None = None

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ObjectiveError(f"optim.name={self.name} is not one of {list(OPTIMIZERS)}")
        if self.lr <= 0:
            raise ObjectiveError(f"optim.lr={self.lr} must be > 0")
        if self.warmup_steps < 0:
            raise ObjectiveError(f"optim.warmup_steps={self.warmup_steps} must be >= 0")
        if self.max_steps < 1:
            raise ObjectiveError(f"optim.max_steps={self.max_steps} must be >= 1")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ObjectiveError(f"optim.min_lr_ratio={self.min_lr_ratio} must be in [0, 1]")
        if self.weight_decay < 0:
            raise ObjectiveError(f"optim.weight_decay={self.weight_decay} must be >= 0")
        self.betas = (float(self.betas[0]), float(self.betas[1]))


def decay_groups(module: nn.Module | Network, weight_decay: float, lr: float | None = None) -> list[dict[str, Any]]:
    """Two AdamW parameter groups: decay for >= 2-D weights (matmuls, embeddings), none for biases and norms.

    nanoGPT's rule. `named_parameters` lists a tied weight once. `lr` (optional) is set on both groups, e.g.
    a classification head's own rate.
    """
    params = [p for _, p in module.named_parameters() if p.requires_grad]
    groups: list[dict[str, Any]] = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    if lr is not None:
        for group in groups:
            group["lr"] = lr
    return [g for g in groups if g["params"]]


def lr_factor(step: int, settings: OptimSettings) -> float:
    """Multiplier of the peak rate after `step` optimiser steps: linear warmup, then cosine to `min_lr_ratio`.

    Warmup is `(step + 1) / (warmup_steps + 1)` (nanoGPT), so the first step already moves the weights.
    """
    if step < settings.warmup_steps:
        return (step + 1) / (settings.warmup_steps + 1)
    if step >= settings.max_steps:
        return settings.min_lr_ratio
    progress = (step - settings.warmup_steps) / max(1, settings.max_steps - settings.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return settings.min_lr_ratio + (1.0 - settings.min_lr_ratio) * cosine


SCALED_PRECISIONS = ("16-mixed", "16")  # Lightning's fp16 autocast with a gradient scaler ("16" is its alias)


def use_fused_adamw(
    groups: Iterable[dict[str, Any]], settings: OptimSettings, *, precision: str | None = None, clipping: bool = False
) -> bool:
    """Whether AdamW runs its fused kernel: ``optim.fused``, or automatically (None) for float parameters on CPU or
    CUDA, except under 16-mixed.

    Under 16-mixed Lightning's grad scaler hands a fused optimizer the scale to undo inside its step, so gradients
    are never unscaled before clipping, and Lightning refuses to clip them (``MixedPrecision.clip_gradients``).
    The foreach AdamW gets unscaled gradients, which clipping then bounds; bf16-mixed has no scaler.

    Raises:
        ObjectiveError: ``optim.fused=true`` with 16-mixed and gradient clipping (one line, at configuration).
    """
    scaled = str(precision) in SCALED_PRECISIONS
    if settings.fused is not None:
        if settings.fused and scaled and clipping:
            raise ObjectiveError(f"optim.fused=true cannot clip gradients under trainer.precision={precision}: the "
                                 "grad scaler unscales inside a fused step; set optim.fused=false (or leave it "
                                 "unset) or optim.grad_clip=null")
        return settings.fused
    floats = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
    return floats and not scaled


def configure_optimizer(
    groups: Iterable[dict[str, Any]], settings: OptimSettings, *, precision: str | None = None, clipping: bool = False
) -> OptimizerLRSchedulerConfig:
    """AdamW or Adafactor + LambdaLR stepped every optimiser step, in the form `configure_optimizers` returns.

    Args:
        groups: Parameter groups (`decay_groups`).
        settings: `optim.*`.
        precision: The trainer's precision (`Trainer.precision`), which decides fused AdamW (`use_fused_adamw`).
        clipping: Whether the trainer clips gradients (`Trainer.gradient_clip_val` set).
    """
    groups = list(groups)
    optimizer: torch.optim.Optimizer
    if settings.name == "adafactor":
        optimizer = torch.optim.Adafactor(groups, lr=settings.lr)
    else:
        fused = use_fused_adamw(groups, settings, precision=precision, clipping=clipping)
        optimizer = torch.optim.AdamW(groups, lr=settings.lr, betas=settings.betas, eps=settings.eps, fused=fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, settings))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1}}


def clip_unscaled(optimizer: torch.optim.Optimizer, clip_val: float, algorithm: str | None = None) -> None:
    """Clip the optimizer's gradients by their global norm (or by value, ``algorithm="value"``) as Lightning's
    ``Precision.clip_gradients`` does, for a precision without a grad scaler (32-true, bf16-mixed).

    Lightning's ``MixedPrecision.clip_gradients`` refuses any optimizer that takes a scale into its step (fused
    AdamW), bf16-mixed included, although bf16-mixed has no scaler and its gradients are never scaled; a
    LightningModule's ``configure_gradient_clipping`` calls this instead there, so the fused kernel stays.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if algorithm == "value":
        torch.nn.utils.clip_grad_value_(params, clip_val)
    else:
        torch.nn.utils.clip_grad_norm_(params, clip_val)


def trainer_precision(module: L.LightningModule) -> tuple[str | None, bool]:
    """(precision, gradient clipping on) of the ``Trainer`` ``module`` is attached to; ``(None, False)`` outside
    ``fit`` (the keyword arguments of `configure_optimizer` a LightningModule passes)."""
    trainer = attached_trainer(module)
    if trainer is None:
        return None, False
    return str(trainer.precision), bool(trainer.gradient_clip_val)


def attached_trainer(module: L.LightningModule) -> L.Trainer | None:
    """The ``Trainer`` ``module`` is attached to, or None (a module called outside ``fit``: Lightning's public
    ``trainer`` property raises ``RuntimeError`` then)."""
    try:
        return module.trainer
    except RuntimeError:
        return None


class ClipsUnscaled(L.LightningModule):
    """A LightningModule that clips gradients itself where nothing scaled them (32-true, bf16-mixed), so a fused
    AdamW stays fused: Lightning's ``MixedPrecision.clip_gradients`` refuses any fused optimizer, bf16 included. Under
    16-mixed the grad scaler unscales first and Lightning clips (:func:`use_fused_adamw` keeps AdamW unfused there).
    """

    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        precision, _ = trainer_precision(self)
        if gradient_clip_val and precision not in SCALED_PRECISIONS:
            clip_unscaled(optimizer, gradient_clip_val, gradient_clip_algorithm)
        else:
            super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
