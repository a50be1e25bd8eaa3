"""Reliable training: the callbacks every fit gets, and the names the commands use, from the modules that own them.

One concern per module: ``rng`` (exact resume of randomness), ``checkpoints`` (``last.ckpt`` rotation),
``signals`` (preemption, requeue), ``nonfinite`` (skipped steps), ``resume`` (which checkpoint to resume,
does it fit), ``exits`` (exit status of a stopped run), ``csv_logger`` (``metrics.csv`` across resumes).
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.plans import TrainerSetup
from famlab.experiments.plumbing.checkpoints import PREV_NAME, save_last
from famlab.experiments.plumbing.csv_logger import AppendingCSVLogger
from famlab.experiments.plumbing.exits import PREEMPTED_EXIT, resume_hint, stop_exit_code
from famlab.experiments.plumbing.nonfinite import NonFiniteCallback, NonFiniteError
from famlab.experiments.plumbing.resume import (
    RESUME_FREE_KEYS,
    check_checkpoint_matches,
    check_resumed_config,
    resolve_resume,
)
from famlab.experiments.plumbing.rng import RNG_KEY, RNGStateCallback, rng_state, set_rng_state
from famlab.experiments.plumbing.signals import (
    STOP_SIGNALS,
    Preempted,
    PreemptionCallback,
    SignalLatch,
    request_requeue,
)


def reliability_callbacks(t: TrainerSetup, seed: int, checkpoint_dir: Path) -> list[pl.Callback]:
    """The callbacks every famlab fit gets (RNG states, preemption, non-finite steps); ``seed`` is the run's."""
    if t.max_bad_steps < 1:
        raise ConfigInputError(f"trainer.max_bad_steps={t.max_bad_steps} must be >= 1")
    preemption = PreemptionCallback(checkpoint_dir)  # its stop flag rides on the non-finite check's all-reduce
    return [
        RNGStateCallback(seed),
        preemption,
        NonFiniteCallback(t.max_bad_steps, checkpoint_dir, preemption=preemption),
    ]


__all__ = [
    "PREEMPTED_EXIT", "PREV_NAME", "RESUME_FREE_KEYS", "RNG_KEY", "STOP_SIGNALS", "AppendingCSVLogger",
    "NonFiniteCallback", "NonFiniteError", "Preempted", "PreemptionCallback", "RNGStateCallback", "SignalLatch",
    "check_checkpoint_matches", "check_resumed_config", "reliability_callbacks", "request_requeue", "resolve_resume",
    "resume_hint", "rng_state", "save_last", "set_rng_state", "stop_exit_code",
]
