"""Test hooks: faults injected into a training run on request, to exercise the reliability callbacks.

Nothing here runs in a normal run: ``make_trainer`` adds :class:`FaultInjection` to the trainer's callbacks only
when one of these environment variables is set (the tests set them; ``tests/experiments/test_faults.py``):

- ``FAMLAB_FAULT_NAN_STEPS=3,4`` poisons the gradients of those optimizer steps (1-based step being
  taken, i.e. ``trainer.global_step + 1``) with NaN, to exercise non-finite skipping.
- ``FAMLAB_FAULT_SIGTERM_STEP=5`` sends this process SIGTERM after that many optimizer steps, to
  exercise preemption from inside a process (a test may also just ``kill -TERM`` the process);
  ``FAMLAB_FAULT_SIGNAL=USR1`` makes that signal SIGUSR1 (SLURM's ``--signal=USR1@<seconds>`` warning);
  ``FAMLAB_FAULT_SIGTERM_FIT=2`` limits it to the second ``fit`` this process starts (a fine-tune runs one
  fit per grid point x seed), where by default every fit gets it.
- ``FAMLAB_FAULT_STEP_SLEEP=0.2`` sleeps that many seconds after every training step, so a signal sent
  from outside reliably lands while training runs, however fast the machine is.

The callback goes before the reliability callbacks, so in each hook the fault happens first and the reliability
callback sees it in the same step (the NaN before the finite check, the signal before the preemption check).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import lightning.pytorch as pl

KNOBS = ("FAMLAB_FAULT_NAN_STEPS", "FAMLAB_FAULT_SIGTERM_STEP", "FAMLAB_FAULT_SIGTERM_FIT", "FAMLAB_FAULT_SIGNAL",
         "FAMLAB_FAULT_STEP_SLEEP")
FITS_STARTED = [0]  # fits this process has started (FAMLAB_FAULT_SIGTERM_FIT picks one of them)


class FaultInjection(pl.Callback):
    """Poisons gradients, signals this process and slows steps as the ``FAMLAB_FAULT_*`` variables ask."""

    def __init__(self) -> None:
        knob = os.environ.get("FAMLAB_FAULT_NAN_STEPS", "")
        self.nan_steps = {int(s) for s in knob.split(",") if s.strip()}
        knob = os.environ.get("FAMLAB_FAULT_SIGTERM_STEP")
        self.signal_step = int(knob) if knob else None
        self.signal_name = "SIG" + os.environ.get("FAMLAB_FAULT_SIGNAL", "TERM")
        self.step_sleep = float(os.environ.get("FAMLAB_FAULT_STEP_SLEEP") or 0)
        fit = os.environ.get("FAMLAB_FAULT_SIGTERM_FIT")
        self.signal_fit = int(fit) if fit else None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        FITS_STARTED[0] += 1
        if self.signal_fit is not None and self.signal_fit != FITS_STARTED[0]:
            self.signal_step = None

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        if trainer.global_step + 1 in self.nan_steps:
            grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
            if grads:
                grads[0].fill_(float("nan"))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if self.step_sleep:
            time.sleep(self.step_sleep)
        if self.signal_step is not None and trainer.global_step == self.signal_step:
            self.signal_step = None
            os.kill(os.getpid(), getattr(signal, self.signal_name))


def fault_callbacks() -> list[pl.Callback]:
    """``[FaultInjection()]`` when a ``FAMLAB_FAULT_*`` variable is set, else ``[]``."""
    return [FaultInjection()] if any(os.environ.get(k) for k in KNOBS) else []


__all__ = ["FaultInjection", "fault_callbacks", "KNOBS"]
