"""The environment famlab sets: the one value rank 0 hands to the DDP ranks (the run directory), and variables set
for a while and put back as they were (:func:`set_env`, :func:`restore_env`, :func:`env_vars`).

Lightning's launcher (``trainer.strategy=ddp`` on one machine) starts the other ranks by re-running the same
command line, so they cannot be passed arguments; and a default run directory carries rank 0's start time, which
the other ranks cannot recompute. Rank 0 therefore names it in ``FAMLAB_RUN_DIR``, which the ranks it launches
inherit. Ranks started by torchrun or SLURM (every rank at once, before rank 0 chose anything) need an explicit
``run_dir=`` instead. Everything else is passed explicitly.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

RUN_DIR_ENV = "FAMLAB_RUN_DIR"


def publish_run_dir(path: Path) -> None:
    """On rank 0: name the run directory for the ranks Lightning's launcher will start from this process."""
    os.environ[RUN_DIR_ENV] = str(path.resolve())


_TRAINED_WORLD = [1]  # the largest world a Trainer of this process had (Lightning's teardown drops WORLD_SIZE)


def note_world(world: int) -> None:
    """Remember the world size of a Trainer this process built (``make_trainer``)."""
    _TRAINED_WORLD[0] = max(_TRAINED_WORLD[0], world)


def launched_world() -> int:
    """The world size a launcher (Lightning's, torchrun, SLURM's srun) gave this process, or a Trainer of it had; 1
    when none did. (SLURM: the tasks of this job step; a batch script itself is one task whatever ``--ntasks``
    allocated.)"""
    for key in ("WORLD_SIZE", "SLURM_STEP_NUM_TASKS"):
        value = os.environ.get(key, "")
        if value.isdigit() and int(value) > 1:
            return int(value)
    return _TRAINED_WORLD[0]


def inherited_run_dir() -> str | None:
    """On another rank: the run directory rank 0 published, if this rank was launched by it."""
    return os.environ.get(RUN_DIR_ENV) or None


def set_env(values: Mapping[str, str]) -> dict[str, str | None]:
    """Set ``values`` in ``os.environ``; returns what each variable was (None: unset), for :func:`restore_env`."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    return saved


def restore_env(saved: Mapping[str, str | None]) -> None:
    """Put each variable back as :func:`set_env` found it: its value, or unset."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextlib.contextmanager
def env_vars(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set in ``os.environ`` while the block runs, put back after it."""
    saved = set_env(values)
    try:
        yield
    finally:
        restore_env(saved)
