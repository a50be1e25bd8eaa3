"""A line a minute while a fit trains with no progress bar (a log file, CI, a comparison's workers), and the fit's
progress in its job's status file for the comparison's live view (:mod:`famlab.experiments.plumbing.live`)."""

from __future__ import annotations

import os
import time

import lightning.pytorch as pl
from famlab.experiments.plumbing.console import say
from famlab.experiments.plumbing.live import BOARD_ENV, PROGRESS_ENV, report_progress

STATUS_EVERY_S = 2.0  # how often a fit rewrites its job's status file (a tiny JSON file)


class Heartbeat(pl.Callback):
    """A line every ``every_s`` seconds while a fit trains: its name, step / max steps, train loss, steps per
    second and the time left at that rate. For fits with no progress bar, so a log never goes quiet for long."""

    def __init__(self, name: str, every_s: float = 60.0) -> None:
        self.name, self.every_s = name, every_s
        self._last = self._t0 = self._reported = 0.0
        self._step0 = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last = self._t0 = time.time()
        self._step0 = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: object) -> None:
        now = time.time()
        if not trainer.is_global_zero:
            return
        status = os.environ.get(PROGRESS_ENV) and now - self._reported >= STATUS_EVERY_S
        line = now - self._last >= self.every_s and os.environ.get(BOARD_ENV) != "1"  # a comparison's board shows it
        if not (status or line):
            return
        step, total, loss, rate = self._state(trainer, now)
        if status:
            self._reported = now
            report_progress(fit=self.name, step=step, max_steps=total, loss=loss, rate=rate)
        if not line:
            return
        self._last = now
        left = f", about {_duration((total - step) / rate)} left" if total and rate > 0 else ""
        say(f"{self.name}: step {step}{f'/{total}' if total else ''}"
            f"{f', train/loss {loss:.4f}' if loss is not None else ''}, {rate:.1f} steps/s{left}")

    def _state(self, trainer: pl.Trainer, now: float) -> tuple[int, int | None, float | None, float]:
        """Step, max steps (None: unbounded), the last train loss and the steps per second of this fit."""
        rate = (trainer.global_step - self._step0) / max(now - self._t0, 1e-9)
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        loss = trainer.callback_metrics.get("train/loss")
        return trainer.global_step, total, float(loss) if loss is not None else None, rate


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
