"""A line a minute while a fit trains with no progress bar (a log file, CI, a comparison's workers)."""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
from famlab.experiments.plumbing.console import say


class Heartbeat(pl.Callback):
    """A line every ``every_s`` seconds while a fit trains: its name, step / max steps, train loss, steps per
    second and the time left at that rate. For fits with no progress bar, so a log never goes quiet for long."""

    def __init__(self, name: str, every_s: float = 60.0) -> None:
        self.name, self.every_s = name, every_s
        self._last = self._t0 = 0.0
        self._step0 = 0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last = self._t0 = time.time()
        self._step0 = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        now = time.time()
        if now - self._last < self.every_s or not trainer.is_global_zero:
            return
        self._last = now
        done = trainer.global_step - self._step0
        rate = done / max(now - self._t0, 1e-9)
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        loss = trainer.callback_metrics.get("train/loss")
        left = f", about {_duration((total - trainer.global_step) / rate)} left" if total and rate > 0 else ""
        say(f"{self.name}: step {trainer.global_step}{f'/{total}' if total else ''}"
            f"{f', train/loss {float(loss):.4f}' if loss is not None else ''}, {rate:.1f} steps/s{left}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
