"""Preemption: SIGTERM / SIGINT / SIGUSR1 checkpoint the run and stop it with ``Preempted``; SLURM requeue.

``PreemptionCallback`` stops a fit at the next step boundary after writing ``last.ckpt``; ``SignalLatch`` remembers
a signal that arrives between the fits of a command that runs several (fine-tuning), so it stops at a boundary.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import lightning.pytorch as pl
from famlab.experiments.plumbing.checkpoints import save_last
from famlab.experiments.plumbing.collective import all_reduce_scalar, dist_info


class Preempted(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised out of ``fit`` after SIGTERM/SIGINT/SIGUSR1 once the checkpoint is written."""

    def __init__(
        self, step: int, checkpoint: Path | None, signum: int | None = None, run_dir: Path | None = None
    ) -> None:
        super().__init__(f"preempted at step {step}; checkpoint {checkpoint}")
        self.step, self.checkpoint, self.signum = step, checkpoint, signum
        # the directory the resume command names; a fine-tune's checkpoints sit deeper (one per grid point x seed).
        # checkpoint None: stopped between a fine-tune's jobs before any of them trained in this process
        self.run_dir = run_dir if run_dir is not None else checkpoint.parent.parent if checkpoint else Path(".")

    def __reduce__(self) -> tuple[type[Preempted], tuple[int, Path | None, int | None, Path]]:
        # a comparison's worker process hands it back to the parent pickled; the default would call
        # Preempted(message) and fail to unpickle, breaking the pool instead of stopping it
        return (Preempted, (self.step, self.checkpoint, self.signum, self.run_dir))


# Signals that checkpoint and stop: SIGTERM (preemption), SIGINT (Ctrl-C), and SIGUSR1, which SLURM sends
# ahead of the time limit with `--signal=USR1@<seconds>` (the job then asks to be requeued).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGUSR1") if hasattr(signal, name))
# what signal.getsignal returns and signal.signal takes back
SignalHandler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


def install_stop_handlers(handler: Callable[[int, FrameType | None], None]) -> dict[int, SignalHandler]:
    """``handler`` for every stop signal; returns the handlers it replaced (none outside the main thread, where
    signals cannot be installed)."""
    previous: dict[int, SignalHandler] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            previous[sig] = signal.getsignal(sig)
            signal.signal(sig, handler)
    return previous


def restore_handlers(previous: dict[int, SignalHandler]) -> None:
    """Put back the handlers :func:`install_stop_handlers` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)


class PreemptionCallback(pl.Callback):
    """SIGTERM / SIGINT / SIGUSR1: finish the current step, write ``last.ckpt``, stop with ``Preempted``.

    The flag is reduced over ranks (MAX) at every step boundary so all ranks stop at the same step
    even if only one got the signal. A second SIGINT interrupts at once (no checkpoint). A signal that
    arrives after the last step boundary leaves the fit to finish; ``signal`` still says it came, so a
    command that runs several fits (fine-tuning) stops before the next one.

    The reduction costs no collective of its own when ``NonFiniteCallback`` carries the flag in its per-step
    all-reduce (before the optimizer step) and hands the result to :meth:`agree`: under DDP a signal that lands
    after that point of a step then stops the run one step later. In one process the flag is read directly.
    """

    def __init__(self, checkpoint_dir: Path) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.signal: int | None = None
        self.saved: tuple[int, Path] | None = None
        self._step_at_start = -1
        self._agreed: tuple[int, bool] | None = None  # (optimizer step, any rank signalled) from agree()
        self._previous: dict[int, SignalHandler] = {}

    def agree(self, step: int, stop: bool) -> None:
        """Whether any rank had a stop signal before optimizer step ``step`` (1-based), as reduced over ranks by
        another callback's collective in that step (``NonFiniteCallback``)."""
        self._agreed = (step, stop)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signum
        print(f"famlab: got {signal.Signals(signum).name}; checkpointing at the end of this step", file=sys.stderr)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._previous = install_stop_handlers(self._handler)

    def _restore(self) -> None:
        restore_handlers(self._previous)
        self._previous = {}

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: object) -> None:
        # a batch that did not step is between accumulated micro-batches: their gradients are not checkpointed.
        # Every rank steps at the same batches, so all skip the collective below together.
        if trainer.global_step == self._step_at_start or self.saved is not None:
            return
        if self._stop_agreed(trainer.global_step):
            self.saved = (trainer.global_step, save_last(trainer, self.checkpoint_dir))

    def _stop_agreed(self, step: int) -> bool:
        """Whether every rank stops after optimizer step ``step``: the local flag in one process, this step's
        agreed flag when another callback reduced it, else a reduction of its own."""
        local = self.signal is not None
        if dist_info()[2] == 1:
            return local
        if self._agreed is not None and self._agreed[0] == step:
            return self._agreed[1]
        return all_reduce_scalar(1.0 if local else 0.0, "max") > 0

    # Raised one hook later than the save: this step's metrics are written to the loggers after
    # on_train_batch_end, and a run preempted at its last step has nothing left to stop.
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: object) -> None:
        if self.saved is not None:
            self._restore()
            # Flush metrics.csv now: under DDP the teardown that would write it races with the other ranks'
            # exit, and a lost first segment leaves the resumed run's metrics.csv without its early steps.
            for logger in trainer.loggers:
                logger.save()
            raise Preempted(*self.saved, signum=self.signal)
        self._step_at_start = trainer.global_step

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore()


class SignalLatch:
    """While a command runs several fits (fine-tuning: one per grid point x seed), remember a stop signal that
    arrives outside a fit's training steps (setup, testing, between fits), so the command stops at the next
    fit boundary with ``Preempted`` instead of dying half-way through writing a fit's results.

    Inside a fit ``PreemptionCallback`` installs its own handlers over these; a signal it saw too late to
    stop the fit (after the last step boundary) is handed back with ``note``. A second SIGINT interrupts at once.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, SignalHandler] = {}

    def __enter__(self) -> SignalLatch:
        self._previous = install_stop_handlers(self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        restore_handlers(self._previous)
        self._previous = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and self.signum is not None:
            raise KeyboardInterrupt
        self.note(signum)
        print(f"famlab: got {signal.Signals(signum).name}; stopping at the next job boundary", file=sys.stderr)

    def note(self, signum: int | None) -> None:
        """Record a stop signal (the first one is kept)."""
        if self.signum is None:
            self.signum = signum

    def requested(self) -> bool:
        """Whether any rank got a stop signal (MAX over ranks, so all ranks stop at the same boundary)."""
        return all_reduce_scalar(1.0 if self.signum is not None else 0.0, "max") > 0


def request_requeue() -> str:
    """After SLURM's SIGUSR1: ask SLURM to requeue this job (``scontrol requeue $SLURM_JOB_ID``); say what happened.

    The requeued job runs the same command; with ``resume=auto`` it continues from ``last.ckpt``.
    """
    import shutil
    import subprocess

    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return "got SIGUSR1 outside a SLURM job; nothing to requeue"
    if shutil.which("scontrol") is None:
        return f"SLURM job {job}: scontrol not found, requeue the job yourself (scontrol requeue {job})"
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"SLURM job {job}: scontrol requeue failed ({(done.stderr or done.stdout).strip()[:200]})"
    return f"SLURM job {job} requeued"


