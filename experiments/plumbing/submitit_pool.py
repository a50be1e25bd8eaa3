"""A comparison's jobs through submitit: each job a SLURM job (``compare.launcher=slurm``) or, with submitit's local
executor (``submitit-local``), a process of its own on this machine - the same path, testable without a cluster.

:class:`SubmititPool` gives the scheduler the ``concurrent.futures`` interface its worker pool has: ``submit``
returns a future, at most ``max_running`` jobs are out at once (SLURM queues the rest anyway; on one machine this
keeps the cores shared), and a background thread turns finished jobs into results. The comparison directory on the
shared filesystem is the only state: each submitted job's id is written to ``<records>/<name>.json``, so a
comparison resumed after its own process was stopped waits for a SLURM job that is still queued or running instead
of starting it twice. A job's own exception comes back as itself (not as submitit's ``FailedJobError``), so a stop
(``Preempted``) and a failure are told apart as with worker processes.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import submitit

POLL_S = 0.5
WAITING = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED")  # SLURM states of a live job

# (what the scheduler submitted, its arguments) -> (what submitit runs, its arguments, the job's name)
Prepare = Callable[[Callable[..., Any], tuple[Any, ...]], tuple[Callable[..., Any], tuple[Any, ...], str]]


class Raised:
    """What a submitted job hands back when it raised: the exception itself (pickled by submitit as a result)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


class SubmititPool(cf.Executor):
    """At most ``max_running`` submitit jobs at a time; ``prepare`` turns a scheduler call into a submitit call."""

    def __init__(self, executor: submitit.Executor, max_running: int, records: Path, prepare: Prepare,
                 cluster: str) -> None:
        self._executor, self._max, self._records, self._prepare = executor, max_running, records, prepare
        self._cluster = cluster
        self._queued: deque[tuple[cf.Future, Callable[..., Any], tuple[Any, ...], str]] = deque()
        self._running: dict[cf.Future, submitit.Job] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._interrupted: set[str] = set()
        records.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="submitit-pool", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        future: cf.Future = cf.Future()
        call, call_args, name = self._prepare(fn, args)
        with self._lock:
            self._queued.append((future, call, call_args, name))
        return future

    def _loop(self) -> None:
        while not self._closed:
            self._pump()
            time.sleep(POLL_S)

    def _pump(self) -> None:
        with self._lock:
            for future, job in list(self._running.items()):
                if job.done():
                    del self._running[future]
                    _settle(future, job)
            while self._queued and len(self._running) < self._max:
                future, call, args, name = self._queued.popleft()
                if future.set_running_or_notify_cancel():
                    self._running[future] = self._reattach(name) or self._start(call, args, name)

    def _start(self, call: Callable[..., Any], args: tuple[Any, ...], name: str) -> submitit.Job:
        self._executor.update_parameters(name=name)
        job = self._executor.submit(call, *args)
        record = {"job_id": str(job.job_id), "cluster": self._cluster, "folder": str(job.paths.folder)}
        (self._records / f"{name}.json").write_text(json.dumps(record) + "\n", encoding="utf-8")
        return job

    def _reattach(self, name: str) -> submitit.Job | None:
        """A SLURM job this comparison submitted before it was stopped, still queued or running: wait for it."""
        path = self._records / f"{name}.json"
        if self._cluster != "slurm" or not path.is_file():
            return None
        import submitit

        record = json.loads(path.read_text(encoding="utf-8"))
        job: submitit.Job = submitit.SlurmJob(folder=record["folder"], job_id=record["job_id"])
        return job if job.state in WAITING else None

    def interrupt_running(self) -> None:
        """Ask the running jobs to stop (:func:`_stop`), each once."""
        with self._lock:
            for job in self._running.values():
                if job.job_id not in self._interrupted:  # once: a second signal interrupts a checkpoint half-written
                    self._interrupted.add(job.job_id)
                    _stop(job, self._cluster)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            with self._lock:
                for future, *_ in self._queued:
                    future.cancel()
                self._queued.clear()
            self.interrupt_running()
        while wait and (self._queued or self._running):
            time.sleep(POLL_S)
        self._closed = True


def _stop(job: submitit.Job, cluster: str) -> None:
    """SLURM: ``scancel`` (the job resumes from its last checkpoint when the comparison does). Local: SIGTERM through
    submitit's controller to the job, which checkpoints at its next step and hands back ``Preempted``."""
    if cluster == "slurm":
        job.cancel(check=False)
        return
    from famlab.experiments.libraries.internals import submitit_local_controller

    pid = submitit_local_controller(job)
    if pid is not None:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:  # finished meanwhile
            pass


def _settle(future: cf.Future, job: submitit.Job) -> None:
    try:
        outcome = job.result()
    except Exception as e:  # noqa: BLE001 - the job died outside its own handler (killed, out of memory)
        future.set_exception(RuntimeError(f"submitit job {job.job_id} failed: {str(e).strip().splitlines()[-1:]}"))
        return
    if isinstance(outcome, Raised):
        future.set_exception(outcome.error)
    else:
        future.set_result(outcome)
