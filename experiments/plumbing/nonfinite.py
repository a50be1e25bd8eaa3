"""Non-finite steps: skip an optimizer step whose loss or gradient norm is not finite; stop after too many."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from famlab.experiments.plumbing.checkpoints import save_last
from famlab.experiments.plumbing.collective import any_over_ranks
from famlab.experiments.plumbing.signals import PreemptionCallback


class NonFiniteError(RuntimeError):
    """Raised out of ``fit`` after ``trainer.max_bad_steps`` consecutive non-finite steps."""


class NonFiniteCallback(pl.Callback):
    """Skips optimizer steps whose loss or gradient norm is not finite on any rank; counts them.

    Runs after backward and before the optimizer (and clipping): dropping every gradient makes the
    optimizer leave the parameters and its moments untouched. The decision is a MAX all-reduce of a
    non-finite flag, so every rank skips the same steps (the gradients are already all-reduced, the
    losses are not). After ``max_bad_steps`` consecutive skips: checkpoint, then ``NonFiniteError``.

    The flag stays on the device until that one reduction (the loss's and the gradient norms' checks are
    device tensors), and it carries ``preemption``'s stop flag with it, so a step costs one host read of
    both decisions instead of one per check (``collective.any_over_ranks``).
    """

    def __init__(self, max_bad_steps: int, checkpoint_dir: Path, preemption: PreemptionCallback | None = None) -> None:
        self.max_bad_steps, self.checkpoint_dir = max_bad_steps, checkpoint_dir
        self.preemption = preemption
        self.skipped = 0
        self.consecutive = 0
        self._loss_finite: torch.Tensor | None = None  # 0-d bool on the loss's device, this step's
        self._stop_at: int | None = None
        self._error: str | None = None

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        finite = torch.isfinite(loss.detach()).all()  # no host read here: it joins the step's one reduction
        self._loss_finite = finite if self._loss_finite is None else self._loss_finite & finite  # micro-batches

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        step = trainer.global_step + 1
        if not self._agree(pl_module, step):
            self.consecutive = 0
            return
        for p in pl_module.parameters():
            p.grad = None  # the optimizer skips parameters without gradients: no update, moments unchanged
        self.skipped += 1
        self.consecutive += 1
        warnings.warn(f"step {step}: non-finite loss or gradient norm; step skipped "
                      f"({self.consecutive} in a row, trainer.max_bad_steps={self.max_bad_steps})", stacklevel=2)
        self._stop_at = step if self.consecutive >= self.max_bad_steps else None

    def _agree(self, pl_module: pl.LightningModule, step: int) -> bool:
        """Whether any rank's loss or gradient norm of this step is non-finite; hands ``preemption`` whether any
        rank got a stop signal. One all-reduce, one host read."""
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        device = grads[0].device if grads else pl_module.device
        bad = torch.zeros((), dtype=torch.bool, device=device)
        if self._loss_finite is not None:
            bad = bad | ~self._loss_finite.to(device)
        if grads:  # per-tensor fp32 norms: non-finite exactly when a gradient has an inf or NaN (or overflows)
            norms = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads])
            bad = bad | ~torch.isfinite(norms).all()
        self._loss_finite = None
        stop = self.preemption is not None and self.preemption.signal is not None
        any_bad, any_stop = any_over_ranks(torch.stack([bad.float(), bad.new_full((), stop, dtype=torch.float32)]))
        if self.preemption is not None:
            self.preemption.agree(step, any_stop)
        return any_bad

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


