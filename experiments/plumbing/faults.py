"""The test hook: faults injected into a training run on request, to exercise the reliability callbacks.

This is famlab's one entry point for tests into a run: :func:`test_hook_callbacks` is what ``make_trainer`` asks,
and it returns nothing in a normal run. Tests that run the ``famlab`` command (in this process or as separate
processes, DDP ranks included) turn faults on through these environment variables, which every rank inherits;
tests that build their own ``Trainer`` pass a :class:`FaultInjection` directly (``tests/experiments/test_faults.py``).

- ``FAMLAB_FAULT_NAN_STEPS=3,4`` poisons the gradients of those optimizer steps (1-based step being
  taken, i.e. ``trainer.global_step + 1``) with NaN, to exercise non-finite skipping.
- ``FAMLAB_FAULT_SIGTERM_STEP=5`` sends this process SIGTERM during that optimizer step (before the optimizer
  runs; the run stops after it, with that many steps done), to
  exercise preemption from inside a process (a test may also just ``kill -TERM`` the process);
  ``FAMLAB_FAULT_SIGNAL=USR1`` makes that signal SIGUSR1 (SLURM's ``--signal=USR1@<seconds>`` warning);
  ``FAMLAB_FAULT_SIGTERM_FIT=2`` limits it to the second ``fit`` this process starts (a fine-tune runs one
  fit per grid point x seed), where by default every fit gets it.
- ``FAMLAB_FAULT_RAISE_STEP=3`` raises ``RuntimeError`` after that many optimizer steps: a rank that dies.
- ``FAMLAB_FAULT_RANKS=1`` limits every fault above to those global ranks (default: every rank), so ranks can
  disagree: a NaN, a signal or a failure on one rank only.
- ``FAMLAB_FAULT_STEP_SLEEP=0.2`` sleeps that many seconds after every training step, so a signal sent
  from outside reliably lands while training runs, however fast the machine is.

The callback goes before the reliability callbacks, so in each hook the fault happens first and the reliability
callback sees it in the same step (the NaN before the finite check, the signal before the preemption check).
"""

from __future__ import annotations

import os
import signal
import time

import lightning.pytorch as pl
from famlab.experiments.plumbing.prepare_once import env_rank
from torch.optim import Optimizer

KNOBS = ("FAMLAB_FAULT_NAN_STEPS", "FAMLAB_FAULT_SIGTERM_STEP", "FAMLAB_FAULT_SIGTERM_FIT", "FAMLAB_FAULT_SIGNAL",
         "FAMLAB_FAULT_STEP_SLEEP", "FAMLAB_FAULT_RAISE_STEP")
FITS_STARTED = [0]  # fits this process has started (FAMLAB_FAULT_SIGTERM_FIT picks one of them)


class FaultInjection(pl.Callback):
    """Poisons gradients, signals this process and slows steps.

    Args:
        nan_steps: optimizer steps (1-based) whose first gradient becomes NaN.
        signal_step: send ``signal_name`` to this process after that many optimizer steps (None: never).
        signal_name: ``SIGTERM``, ``SIGUSR1``, ...
        signal_fit: only in the fit with this number (1-based, counted in ``FITS_STARTED``); None: every fit.
        step_sleep: seconds to sleep after every training step.
        raise_step: raise ``RuntimeError`` after that many optimizer steps (None: never).
    """

    def __init__(self, nan_steps: set[int] | None = None, signal_step: int | None = None,
                 signal_name: str = "SIGTERM", signal_fit: int | None = None, step_sleep: float = 0.0,
                 raise_step: int | None = None) -> None:
        self.nan_steps = set(nan_steps or ())
        self.signal_step, self.signal_name, self.signal_fit = signal_step, signal_name, signal_fit
        self.step_sleep, self.raise_step = step_sleep, raise_step

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        FITS_STARTED[0] += 1
        if self.signal_fit is not None and self.signal_fit != FITS_STARTED[0]:
            self.signal_step = None

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: Optimizer) -> None:
        if trainer.global_step + 1 in self.nan_steps:
            grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
            if grads:
                grads[0].fill_(float("nan"))
        # the signal lands before the reliability callbacks' one per-step collective (nonfinite.py), so every
        # rank stops after this very step
        if self.signal_step is not None and trainer.global_step + 1 == self.signal_step:
            self.signal_step = None
            os.kill(os.getpid(), getattr(signal, self.signal_name))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: object) -> None:
        if self.step_sleep:
            time.sleep(self.step_sleep)
        if self.raise_step is not None and trainer.global_step == self.raise_step:
            raise RuntimeError(f"injected failure after step {self.raise_step} (FAMLAB_FAULT_RAISE_STEP)")


def faults_from_environment() -> FaultInjection:
    """A :class:`FaultInjection` as the ``FAMLAB_FAULT_*`` variables ask."""
    env = os.environ
    step, fit, fail = env.get("FAMLAB_FAULT_SIGTERM_STEP"), env.get("FAMLAB_FAULT_SIGTERM_FIT"), env.get(
        "FAMLAB_FAULT_RAISE_STEP")
    ranks = {int(r) for r in env.get("FAMLAB_FAULT_RANKS", "").split(",") if r.strip()}
    if ranks and env_rank() not in ranks:
        return FaultInjection(step_sleep=float(env.get("FAMLAB_FAULT_STEP_SLEEP") or 0))
    return FaultInjection(
        nan_steps={int(s) for s in env.get("FAMLAB_FAULT_NAN_STEPS", "").split(",") if s.strip()},
        signal_step=int(step) if step else None,
        signal_name="SIG" + env.get("FAMLAB_FAULT_SIGNAL", "TERM"),
        signal_fit=int(fit) if fit else None,
        step_sleep=float(env.get("FAMLAB_FAULT_STEP_SLEEP") or 0),
        raise_step=int(fail) if fail else None,
    )


def test_hook_callbacks() -> list[pl.Callback]:
    """The test hook ``make_trainer`` calls: ``[faults_from_environment()]`` when a ``FAMLAB_FAULT_*`` variable is
    set, else ``[]`` (a normal run)."""
    return [faults_from_environment()] if any(os.environ.get(k) for k in KNOBS) else []


test_hook_callbacks.__test__ = False  # type: ignore[attr-defined]  # a hook for tests, not a pytest test

__all__ = ["FITS_STARTED", "KNOBS", "FaultInjection", "faults_from_environment", "test_hook_callbacks"]
