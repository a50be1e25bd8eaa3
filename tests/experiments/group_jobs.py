"""Module-level jobs for the process_group tests (a job group imports its function by name)."""

from __future__ import annotations

from pathlib import Path

from famlab.experiments.plumbing.signals import Preempted


def double(x: int) -> int:
    return 2 * x


def fail(x: int) -> int:
    raise ValueError(f"bad value {x}")


def stop(x: int) -> int:
    raise Preempted(7, Path("ck/last.ckpt"), signum=15, run_dir=Path("run"))
