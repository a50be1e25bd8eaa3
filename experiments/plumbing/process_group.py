"""One job on several devices: its own DDP world, started as a child process group.

Lightning's launcher for ``trainer.strategy=ddp`` re-executes the *current command* once per extra local rank
(``lightning/fabric/strategies/launchers/subprocess_script.py``), so a process that must exist once - a comparison,
which owns its directory - cannot call ``fit`` on several devices itself. :func:`run` writes the job (a function and
its arguments) to a spec file and starts ``python -m famlab.experiments.plumbing.process_group <spec>``; that command
*is* the job, so the ranks Lightning starts from it run the same job and nothing else. The caller waits for rank 0.

Each rank that fails writes one line (and its traceback) to ``<spec>.rank<r>.err``; :func:`run` raises
:class:`JobFailed` naming the first rank that failed and why, so a dying rank is reported in one line, not as the
other ranks' collective timeout (Lightning's launcher already ends the group when any rank exits non-zero). A stop
signal to the caller is passed to the group, whose ranks checkpoint and exit with ``PREEMPTED_EXIT``: then
:class:`~famlab.experiments.plumbing.signals.Preempted` is raised, as an in-process fit would.
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from famlab.experiments.plumbing import plugins
from famlab.experiments.plumbing.exits import PREEMPTED_EXIT
from famlab.experiments.plumbing.launch_env import RUN_DIR_ENV
from famlab.experiments.plumbing.prepare_once import env_rank
from famlab.experiments.plumbing.signals import Preempted

T = TypeVar("T")

# What a launcher hands the processes it starts: a child group must not inherit its parent's world (a comparison run
# under another launcher, or a process that already ran a one-device DDP fit and kept Lightning's variables).
LAUNCH_VARS = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
               "MASTER_PORT", "TORCHELASTIC_RUN_ID", "PL_GLOBAL_SEED", RUN_DIR_ENV)


class JobFailed(RuntimeError):
    """A job's process group ended without a result: the first failing rank's one line, and where its log is."""


def child_env(gpus: tuple[str, ...] | None, threads: int) -> dict[str, str]:
    """The environment of a job's rank 0: this one without any launcher's variables, seeing only ``gpus`` (None:
    as this process does), ``threads`` intra-op threads per rank."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS and not k.startswith("SLURM_")}
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    env["OMP_NUM_THREADS"] = str(max(1, threads))
    return env


def run(fn: Callable[..., T], *args: object, spec: Path, gpus: tuple[str, ...] | None = None, threads: int = 1,
        stop_requested: Callable[[], bool] = lambda: False) -> T:
    """``fn(*args)`` in a child process group (rank 0 of the job's world, which starts the others); its return value
    on rank 0.

    Args:
        fn: a module-level function (the child imports it by name); it builds its own ``Trainer``.
        spec: the spec file to write (``<spec>.log`` holds the group's console output).
        gpus: the CUDA devices the group sees; None keeps this process's view.
        threads: torch threads per rank.
        stop_requested: polled while the group runs; once true, the group gets SIGTERM (checkpoint and stop).

    Raises:
        JobFailed: a rank failed (its one line) or the group died without a result.
        Preempted: the group stopped on a signal after checkpointing.
    """
    spec.parent.mkdir(parents=True, exist_ok=True)
    for stale in spec.parent.glob(f"{spec.name}.*"):
        stale.unlink()
    # the plugins first, the job pickled on its own: its configs may name a plugin's registered choices
    spec.write_bytes(pickle.dumps((plugins.loaded(), pickle.dumps((fn.__module__, fn.__qualname__, args)))))
    log = spec.with_name(spec.name + ".log")
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", __name__, str(spec)], env=child_env(gpus, threads),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        code = _wait(proc, stop_requested)
        _end_group(proc.pid)
    result = spec.with_name(spec.name + ".result")
    if code == 0 and result.is_file():
        value: T = pickle.loads(result.read_bytes())
        return value
    if code == PREEMPTED_EXIT:
        raise pickle.loads(spec.with_name(spec.name + ".preempted").read_bytes())
    raise JobFailed(_first_failure(spec, code, log))


def _wait(proc: subprocess.Popen[bytes], stop_requested: Callable[[], bool]) -> int:
    signalled = False
    while True:
        try:
            return proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        except BaseException:  # this process is being torn down (a second Ctrl-C): take the group with it
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        if not signalled and stop_requested():
            signalled = True
            os.killpg(proc.pid, signal.SIGTERM)  # every rank: each checkpoints at the same step boundary


def _end_group(pgid: int, grace_s: float = 5.0) -> None:
    """After rank 0 exits: the other ranks have nothing left to do (only rank 0 writes); end any still waiting in a
    collective rank 0 will never join."""
    deadline = time.time() + grace_s
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _first_failure(spec: Path, code: int, log: Path) -> str:
    errors = sorted(spec.parent.glob(f"{spec.name}.rank*.err"), key=lambda p: p.stat().st_mtime)
    if errors:
        line = errors[0].read_text(encoding="utf-8").splitlines()[0]
        rank = errors[0].name.rsplit(".rank", 1)[1].split(".")[0]
        return f"rank {rank}: {line} (the ranks' output: {log})"
    how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
    return f"the job's process group {how} before any rank reported an error (its output: {log})"


def _main(spec: Path) -> int:
    """One rank of a job: run the spec's function; rank 0 writes its result (or its stop) beside the spec."""
    from famlab.experiments.plumbing.failures import one_line

    names, job = pickle.loads(spec.read_bytes())
    plugins.load(names)
    module, name, args = pickle.loads(job)
    fn: Any = importlib.import_module(module)
    for part in name.split("."):
        fn = getattr(fn, part)
    rank = env_rank()
    try:
        value = fn(*args)
    except Preempted as e:
        if rank == 0:
            _write_atomic(spec.with_name(spec.name + ".preempted"), pickle.dumps(e))
        return PREEMPTED_EXIT if rank == 0 else 0  # a non-zero exit of another rank would end rank 0 mid-checkpoint
    except BaseException as e:
        text = f"{one_line(e)}\n{''.join(traceback.format_exception(e))}"
        spec.with_name(f"{spec.name}.rank{rank}.err").write_text(text, encoding="utf-8")
        print(f"famlab: rank {rank}: {one_line(e)}", file=sys.stderr)
        return 1
    if rank == 0:
        _write_atomic(spec.with_name(spec.name + ".result"), pickle.dumps(value))
    return 0


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}.{time.time_ns()}")
    tmp.write_bytes(data)
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(_main(Path(sys.argv[1])))
