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


def sleep_until_sigterm(path: str) -> str:
    """Wait for SIGTERM (at most a minute) after touching ``ready`` beside ``path``; what arrived."""
    import signal
    import time
    from pathlib import Path

    got: list[str] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: got.append("SIGTERM"))
    Path(path).with_name("ready").touch()
    deadline = time.time() + 60
    while not got and time.time() < deadline:
        time.sleep(0.05)
    return got[0] if got else "timeout"
