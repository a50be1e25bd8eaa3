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

import torch
from famlab.families.network import Network
from famlab.objectives.errors import ObjectiveError
from torch import nn

if TYPE_CHECKING:
    import lightning as L
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
            has the kernel: faster than the foreach path on CPU too; docs/results.md, Speed).
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


def configure_optimizer(groups: Iterable[dict[str, Any]], settings: OptimSettings) -> OptimizerLRSchedulerConfig:
    """AdamW or Adafactor + LambdaLR stepped every optimiser step, in the form `configure_optimizers` returns."""
    groups = list(groups)
    optimizer: torch.optim.Optimizer
    if settings.name == "adafactor":
        optimizer = torch.optim.Adafactor(groups, lr=settings.lr)
    else:
        fused = settings.fused
        if fused is None:
            fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
        optimizer = torch.optim.AdamW(groups, lr=settings.lr, betas=settings.betas, eps=settings.eps, fused=fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, settings))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1}}


def attached_trainer(module: L.LightningModule) -> L.Trainer | None:
    """The ``Trainer`` ``module`` is attached to, or None (a module called outside ``fit``: Lightning's public
    ``trainer`` property raises ``RuntimeError`` then)."""
    try:
        return module.trainer
    except RuntimeError:
        return None
