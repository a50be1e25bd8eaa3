"""How a stopped run ends: the exit status of a preempted or non-finite stop, and the command that resumes it."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from famlab.experiments.plumbing.nonfinite import NonFiniteError
from famlab.experiments.plumbing.prepare_once import env_rank
from famlab.experiments.plumbing.signals import Preempted, request_requeue

PREEMPTED_EXIT = 3  # exit status of a preempted (checkpointed, resumable) run


def stop_exit_code(e: BaseException, job: str = "pretrain") -> int:
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
    print(f"famlab: preempted {where}. Resume with: {resume_hint(e.run_dir, job)}", file=sys.stderr)
    return PREEMPTED_EXIT


def resume_hint(run_dir: Path, job: str = "pretrain") -> str:
    """The command line that resumes this run."""
    args = " ".join(a for a in sys.argv[1:] if not a.startswith(("run_dir=", "resume=")))
    return f"famlab {args or job} run_dir={run_dir} resume=auto"
