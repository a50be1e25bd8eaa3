"""Reliable training: exact resume, preemption, non-finite steps, checkpoint fallback.

Callbacks ``make_trainer`` adds to every fit (``reliability_callbacks``), plus the resume-path
resolution (``resolve_resume``). The faults the tests inject to exercise them live in
``experiments/plumbing/faults.py``.

Why a separate collation RNG stream: Lightning prefetches one batch ahead, so batch k+1 is collated
(masks drawn from the global RNG) before step k runs its dropout. Saving the global RNG at a step
boundary therefore cannot reproduce both the next batch's masks and the next step's dropout on
resume. Collation in the main process (``data.num_workers=0``) runs on its own torch RNG state, and
the checkpoint stores that stream's state from before the first batch not yet trained on.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from famlab.experiments.configuration.config import Config, ConfigInputError
from famlab.experiments.plumbing.prepare_once import env_rank
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

RNG_KEY = "famlab_rng"  # checkpoint key of the per-rank RNG states
PREV_NAME = "last-prev.ckpt"  # the previous last.ckpt, kept so a truncated last.ckpt is survivable
PREEMPTED_EXIT = 3  # exit status of a preempted (checkpointed, resumable) run


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


# Signals that checkpoint and stop: SIGTERM (preemption), SIGINT (Ctrl-C), and SIGUSR1, which SLURM sends
# ahead of the time limit with `--signal=USR1@<seconds>` (the job then asks to be requeued).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGUSR1") if hasattr(signal, name))


class NonFiniteError(RuntimeError):
    """Raised out of ``fit`` after ``trainer.max_bad_steps`` consecutive non-finite steps."""


def _dist() -> tuple[bool, int, int]:
    ok = torch.distributed.is_available() and torch.distributed.is_initialized()
    return ok, torch.distributed.get_rank() if ok else 0, torch.distributed.get_world_size() if ok else 1


def _all_reduce(value: float, op: str) -> float:
    """The MIN / MAX of a scalar over ranks (the value itself in one process)."""
    ok, _, world = _dist()
    if not ok or world == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    if torch.distributed.get_backend() == "nccl":
        t = t.cuda()
    reduce_op = torch.distributed.ReduceOp.MIN if op == "min" else torch.distributed.ReduceOp.MAX
    torch.distributed.all_reduce(t, op=reduce_op)
    return float(t.item())


def rng_state() -> dict[str, Any]:
    """torch / numpy / python RNG states as tensors and lists (``torch.load(weights_only=True)`` safe)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [str(kind), torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)],
        "python": [int(version), list(internal), gauss_next],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Inverse of ``rng_state``."""
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class _StreamCollate:
    """Runs a collate function on its own torch RNG state and remembers the state before each call."""

    def __init__(self, fn: Any, state: torch.Tensor) -> None:
        self.fn, self.state = fn, state
        self.pending: collections.deque[torch.Tensor] = collections.deque()  # pre-call states, not yet trained

    def __call__(self, items: Any) -> Any:
        self.pending.append(self.state)
        outer = torch.get_rng_state()
        torch.set_rng_state(self.state)
        try:
            return self.fn(items)
        finally:
            self.state = torch.get_rng_state()
            torch.set_rng_state(outer)

    def resume_state(self) -> torch.Tensor:
        """The state to restart from: before the oldest collated-but-untrained batch, else the current one."""
        return self.pending[0] if self.pending else self.state


class RNGStateCallback(pl.Callback):
    """Saves every rank's RNG states (and the collation stream) in the checkpoint; restores them on resume."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.stream: _StreamCollate | None = None
        self._loaded: list[dict[str, Any]] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        _, rank, _ = _dist()
        mine = None
        if self._loaded is not None:
            mine = self._loaded[rank] if rank < len(self._loaded) else None
            if mine is None:
                warnings.warn(f"checkpoint has RNG states for {len(self._loaded)} ranks, not rank {rank}; "
                              "this rank continues with fresh RNG states (resume is not exact)", stacklevel=2)
            else:
                set_rng_state(mine["global"])
        loader = trainer.train_dataloader
        # workers collate in their own processes with their own seeds; only main-process collation is streamed
        if isinstance(loader, torch.utils.data.DataLoader) and loader.num_workers == 0:
            if mine is not None and "collate" in mine:
                start = mine["collate"]
            else:
                start = torch.Generator().manual_seed(self.seed * 1000 + rank + 12345).get_state()
            self.stream = _StreamCollate(loader.collate_fn, start)
            loader.collate_fn = self.stream

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        if self.stream is not None and self.stream.pending:
            self.stream.pending.popleft()  # this batch is now being trained on

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        state = {"global": rng_state()}
        if self.stream is not None:
            state["collate"] = self.stream.resume_state()
        ok, _, world = _dist()
        states: list[Any] = [None] * world
        if ok and world > 1:
            torch.distributed.all_gather_object(states, state)  # every rank calls save_checkpoint
        else:
            states = [state]
        checkpoint[RNG_KEY] = states

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        # applied in on_train_start: restoring here would be consumed by setup before the first batch
        self._loaded = checkpoint.get(RNG_KEY)


class KeepTwoCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that moves the previous ``last.ckpt`` to ``last-prev.ckpt`` before overwriting it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No last-v1.ckpt: a resumed run whose last.ckpt was written by save_last (not by this callback) must
        # overwrite it, since finetune / compare / generate read last.ckpt (the previous one is kept anyway).
        kwargs.setdefault("enable_version_counter", False)
        super().__init__(*args, **kwargs)

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        rotate_last(trainer, Path(filepath))
        super()._save_checkpoint(trainer, filepath)


def rotate_last(trainer: pl.Trainer, path: Path) -> None:
    """Before writing ``last.ckpt``: keep the current one as ``last-prev.ckpt`` (rank 0 moves the file)."""
    if path.name == "last.ckpt" and trainer.is_global_zero and path.is_file():
        os.replace(path, path.with_name(PREV_NAME))
    trainer.strategy.barrier("famlab_rotate_last")


def save_last(trainer: pl.Trainer, checkpoint_dir: Path) -> Path:
    """Write ``last.ckpt`` now (all ranks call this), keeping the previous one."""
    path = checkpoint_dir / "last.ckpt"
    rotate_last(trainer, path)
    trainer.save_checkpoint(str(path))
    return path


class PreemptionCallback(pl.Callback):
    """SIGTERM / SIGINT / SIGUSR1: finish the current step, write ``last.ckpt``, stop with ``Preempted``.

    The flag is reduced over ranks (MAX) at every step boundary so all ranks stop at the same step
    even if only one got the signal. A second SIGINT interrupts at once (no checkpoint). A signal that
    arrives after the last step boundary leaves the fit to finish; ``signal`` still says it came, so a
    command that runs several fits (fine-tuning) stops before the next one.
    """

    def __init__(self, checkpoint_dir: Path) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.signal: int | None = None
        self.saved: tuple[int, Path] | None = None
        self._step_at_start = -1
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signum
        print(f"famlab: got {signal.Signals(signum).name}; checkpointing at the end of this step", file=sys.stderr)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        import threading

        if threading.current_thread() is threading.main_thread():  # signals install only in the main thread
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handler)

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        # a batch that did not step is between accumulated micro-batches: their gradients are not checkpointed.
        # Every rank steps at the same batches, so all skip the collective below together.
        if trainer.global_step == self._step_at_start or self.saved is not None:
            return
        if _all_reduce(1.0 if self.signal is not None else 0.0, "max") > 0:
            self.saved = (trainer.global_step, save_last(trainer, self.checkpoint_dir))

    # Raised one hook later than the save: this step's metrics are written to the loggers after
    # on_train_batch_end, and a run preempted at its last step has nothing left to stop.
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
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

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        norms = [torch.linalg.vector_norm(g.float()) for g in grads]
        finite = self._loss_finite and (not norms or bool(torch.isfinite(torch.stack(norms)).all()))
        if _all_reduce(1.0 if finite else 0.0, "min") > 0:
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

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        pl_module.log("train/skipped_steps", float(self.skipped), on_step=True, on_epoch=False, sync_dist=False)
        if self._stop_at is not None and self._error is None:
            path = save_last(trainer, self.checkpoint_dir)
            self._error = (
                f"stopped at step {self._stop_at}: {self.consecutive} consecutive non-finite steps "
                f"(trainer.max_bad_steps={self.max_bad_steps}); checkpoint {path}"
            )

    # raised one hook later than the checkpoint, so the bad step's metrics reach the loggers
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if self._error is not None:
            raise NonFiniteError(self._error)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._error is not None:
            raise NonFiniteError(self._error)

    def state_dict(self) -> dict[str, Any]:
        return {"skipped": self.skipped}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipped = int(state.get("skipped", 0))


def reliability_callbacks(cfg: Config, checkpoint_dir: Path) -> list[pl.Callback]:
    """The callbacks every famlab fit gets (RNG states, preemption, non-finite steps)."""
    if cfg.trainer.max_bad_steps < 1:
        raise ConfigInputError(f"trainer.max_bad_steps={cfg.trainer.max_bad_steps} must be >= 1")
    return [
        RNGStateCallback(cfg.seed),
        PreemptionCallback(checkpoint_dir),
        NonFiniteCallback(cfg.trainer.max_bad_steps, checkpoint_dir),
    ]


class AppendingCSVLogger(CSVLogger):
    """``CSVLogger`` that keeps an existing ``metrics.csv`` (Lightning deletes it) and appends to it.

    A resumed run continues the file: steps logged after the checkpoint it resumes from appear twice (the
    resumed run's row comes later). A fresh run has none, so this is a plain CSVLogger there.
    """

    @property
    def experiment(self) -> Any:  # type: ignore[override]
        if self._experiment is not None:
            return self._experiment
        if rank_zero_only.rank != 0:  # Lightning asks every rank for .experiment; only rank 0 may touch the file
            return super().experiment
        path = Path(self.log_dir) / "metrics.csv"
        kept = path.read_text(encoding="utf-8") if path.is_file() else None
        with warnings.catch_warnings():
            # "Previous log files in this directory will be deleted": not here (the run directory also holds
            # config.yaml / tokenizer.json, which Lightning never touches, and metrics.csv is kept below)
            warnings.filterwarnings("ignore", message="Experiment logs directory .* exists and is not empty")
            experiment = super().experiment
        if kept and hasattr(experiment, "metrics_keys"):
            path.write_text(kept, encoding="utf-8")
            experiment.metrics_keys = sorted(kept.splitlines()[0].split(","))
        return experiment


def _loadable(path: Path) -> str | None:
    """None if ``torch.load`` reads the checkpoint, else the reason it does not."""
    try:
        torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        return None
    except Exception as e:  # noqa: BLE001 - any failure means unusable (truncated zip, bad pickle, ...)
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def resolve_resume(cfg: Config, checkpoint_dir: Path) -> str | None:
    """The checkpoint ``fit`` resumes from: ``resume=never`` None; ``auto`` ``last.ckpt`` (or, if it is
    unreadable, ``last-prev.ckpt`` with a warning; None if there is none); else the given path."""
    if cfg.resume == "never":
        return None
    if cfg.resume == "auto":
        last, prev = checkpoint_dir / "last.ckpt", checkpoint_dir / PREV_NAME
        if not last.is_file():
            return str(prev) if prev.is_file() and _loadable(prev) is None else None
        problem = _loadable(last)
        if problem is None:
            return str(last)
        if prev.is_file() and _loadable(prev) is None:
            warnings.warn(f"{last} is unreadable ({problem}); resuming from the previous checkpoint {prev}",
                          stacklevel=2)
            print(f"famlab: WARNING {last} is unreadable ({problem}); resuming from {prev}", file=sys.stderr)
            return str(prev)
        raise ConfigInputError(f"resume=auto: {last} is unreadable ({problem}) and no readable {PREV_NAME}")
    path = Path(cfg.resume).expanduser()
    if not path.is_file():
        raise ConfigInputError(f"resume={cfg.resume}: no such checkpoint file (use never | auto | <path.ckpt>)")
    problem = _loadable(path)
    if problem is not None:
        raise ConfigInputError(f"resume={cfg.resume}: unreadable checkpoint ({problem})")
    return str(path)


def check_checkpoint_matches(path: str, module: Any, key: str = "resume") -> None:
    """Refuse a checkpoint whose parameters are not this module's (another family or size) with one line,
    instead of Lightning's wall of missing / unexpected keys from deep inside ``load_state_dict``."""
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("state_dict", {})
    ours = module.state_dict()
    missing, unexpected = sorted(set(ours) - set(state)), sorted(set(state) - set(ours))
    wrong = sorted(k for k in set(ours) & set(state) if tuple(ours[k].shape) != tuple(state[k].shape))
    if missing or unexpected or wrong:
        example = (missing or unexpected or wrong)[0]
        raise ConfigInputError(
            f"{key}={path} does not fit this model (model.family={module.net.config.family.value}): "
            f"{len(missing)} missing, {len(unexpected)} unexpected, {len(wrong)} differently shaped tensors, "
            f"e.g. {example!r}; is it a checkpoint of another family or size?"
        )


def stop_exit_code(e: BaseException, cfg: Config, job: str = "pretrain") -> int:
    """Report a preempted or non-finite stop on stderr and return the CLI's exit status for it.

    Preempted: `PREEMPTED_EXIT` on rank 0 with the command that resumes (``run_dir=<e.run_dir> resume=auto``);
    other DDP ranks return 0, since a non-zero exit would make Lightning's launcher kill rank 0 mid-message.
    Non-finite stop: 1.
    """
    if isinstance(e, NonFiniteError):
        print(f"famlab: {e}", file=sys.stderr)
        return 1
    assert isinstance(e, Preempted)
    if env_rank() != 0:
        return 0
    if e.signum == getattr(signal, "SIGUSR1", None):
        print(f"famlab: {request_requeue()}", file=sys.stderr)
    where = f"at step {e.step}; checkpoint {e.checkpoint}" if e.checkpoint is not None else "before training"
    print(f"famlab: preempted {where}. Resume with: {resume_hint(cfg, e.run_dir, job)}", file=sys.stderr)
    return PREEMPTED_EXIT


class SignalLatch:
    """While a command runs several fits (fine-tuning: one per grid point x seed), remember a stop signal that
    arrives outside a fit's training steps (setup, testing, between fits), so the command stops at the next
    fit boundary with ``Preempted`` instead of dying half-way through writing a fit's results.

    Inside a fit ``PreemptionCallback`` installs its own handlers over these; a signal it saw too late to
    stop the fit (after the last step boundary) is handed back with ``note``. A second SIGINT interrupts at once.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> SignalLatch:
        import threading

        if threading.current_thread() is threading.main_thread():  # signals install only in the main thread
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.getsignal(sig)
                signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handler(self, signum: int, frame: Any) -> None:
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
        return _all_reduce(1.0 if self.signum is not None else 0.0, "max") > 0


# keys a resumed run may change: where it runs and how it reports, not what it computes
RESUME_FREE_KEYS = ("resume", "run_dir", "provenance", "wandb", "trainer.progress_bar", "data.cache_dir")


def check_resumed_config(run_dir: Path, config: dict[str, Any]) -> None:
    """Refuse to resume ``run_dir`` under a config that differs from its stored ``config.yaml``.

    ``config`` is the resolved config as ``run.write_config`` would write it. Only the keys of
    ``RESUME_FREE_KEYS`` may differ; any other changed key would mix results of two configurations.
    """
    import yaml
    from famlab.experiments.configuration.compose import flatten

    path = run_dir / "config.yaml"
    if not path.is_file():
        return  # nothing ran yet: a fresh start
    try:
        stored = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigInputError(f"resume=auto: {path} is not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(stored, dict):
        raise ConfigInputError(f"resume=auto: {path} is not a famlab config")
    old, new = flatten(stored), flatten(config)

    def free(key: str) -> bool:
        return any(key == k or key.startswith(k + ".") for k in RESUME_FREE_KEYS)

    changed = sorted(k for k in set(old) | set(new) if not free(k) and old.get(k, "<unset>") != new.get(k, "<unset>"))
    if changed:
        shown = ", ".join(f"{k}={new.get(k, '<unset>')} (stored {old.get(k, '<unset>')})" for k in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise ConfigInputError(f"resume=auto: {path} was written with other settings: {shown}{more}; "
                               "resume with the original settings, or start a new run_dir")


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


def resume_hint(cfg: Config, run_dir: Path, job: str = "pretrain") -> str:
    """The command line that resumes this run."""
    args = " ".join(a for a in sys.argv[1:] if not a.startswith(("run_dir=", "resume=")))
    return f"famlab {args or job} run_dir={run_dir} resume=auto"
