"""Non-finite steps: skip an optimizer step whose loss or gradient norm is not finite; stop after too many."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from famlab.experiments.plumbing.checkpoints import save_last
from famlab.experiments.plumbing.collective import all_reduce_scalar


class NonFiniteError(RuntimeError):
    """Raised out of ``fit`` after ``trainer.max_bad_steps`` consecutive non-finite steps."""


class NonFiniteCallback(pl.Callback):
    """Skips optimizer steps whose loss or gradient norm is not finite on any rank; counts them.

    Runs after backward and before the optimizer (and clipping): dropping every gradient makes the
    optimizer leave the parameters and its moments untouched. The decision is a MIN all-reduce of a
    finite flag, so every rank skips the same steps (the gradients are already all-reduced, the
    losses are not). After ``max_bad_steps`` consecutive skips: checkpoint, then ``NonFiniteError``.
    """

    def __init__(self, max_bad_steps: int, checkpoint_dir: Path) -> None:
        self.max_bad_steps, self.checkpoint_dir = max_bad_steps, checkpoint_dir
        self.skipped = 0
        self.consecutive = 0
        self._loss_finite = True
        self._stop_at: int | None = None
        self._error: str | None = None

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self._loss_finite = bool(torch.isfinite(loss.detach()).all())

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        norms = [torch.linalg.vector_norm(g.float()) for g in grads]
        finite = self._loss_finite and (not norms or bool(torch.isfinite(torch.stack(norms)).all()))
        if all_reduce_scalar(1.0 if finite else 0.0, "min") > 0:
            self.consecutive = 0
            return
        for p in pl_module.parameters():
            p.grad = None  # the optimizer skips parameters without gradients: no update, moments unchanged
        self.skipped += 1
        self.consecutive += 1
        step = trainer.global_step + 1
        warnings.warn(f"step {step}: non-finite loss or gradient norm; step skipped "
                      f"({self.consecutive} in a row, trainer.max_bad_steps={self.max_bad_steps})", stacklevel=2)
        self._stop_at = step if self.consecutive >= self.max_bad_steps else None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: object) -> None:
        pl_module.log("train/skipped_steps", float(self.skipped), on_step=True, on_epoch=False, sync_dist=False)
        if self._stop_at is not None and self._error is None:
            path = save_last(trainer, self.checkpoint_dir)
            self._error = (
                f"stopped at step {self._stop_at}: {self.consecutive} consecutive non-finite steps "
                f"(trainer.max_bad_steps={self.max_bad_steps}); checkpoint {path}"
            )

    # raised one hook later than the checkpoint, so the bad step's metrics reach the loggers
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: object) -> None:
        if self._error is not None:
            raise NonFiniteError(self._error)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._error is not None:
            raise NonFiniteError(self._error)

    def state_dict(self) -> dict[str, int]:
        return {"skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipped = int(state.get("skipped", 0))


