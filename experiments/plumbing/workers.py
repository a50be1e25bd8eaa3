"""Jobs side by side in worker processes (``famlab compare``'s ``compare.workers``).

Small models use a CPU's cores poorly, so two one-thread runs side by side finish sooner than the same runs one
after the other on two threads (``benchmarks/workers_bench.py`` measures it; docs/results.md, Speed).
:func:`executor` gives the scheduler one interface for both ways: ``workers=1`` runs each job in this process
the moment it is submitted; more start that many spawned
processes, each with ``cores // workers`` torch threads, that run the submitted jobs in order as they free up.

A worker gets the context its jobs share once, when it starts (``init`` with ``context``), not with every job.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, ParamSpec, TypeVar

from famlab.experiments.plumbing import plugins
from famlab.experiments.plumbing.signals import STOP_SIGNALS, Preempted, SignalLatch

ContextT = TypeVar("ContextT")  # what every job of a pool shares, handed to its workers' ``init`` once
T = TypeVar("T")
P = ParamSpec("P")


def cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def threads_per_worker(workers: int) -> int:
    """Torch threads for each of ``workers`` processes: the cores shared out, at least one each."""
    return max(1, cores() // workers)


class Inline(cf.Executor):
    """Runs each job in this process when it is submitted: its exception stops the caller at once, as a plain call's
    would, so no later job starts after a failure."""

    def __init__(self, init: Callable[[ContextT], None], context: ContextT) -> None:
        init(context)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> cf.Future[T]:
        future: cf.Future[T] = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001 - handed to the caller through the future, as a pool's would be
            future.set_exception(e)
        return future


_SIGNALLED: list[int] = []  # in a worker process: the stop signals it got outside a fit


def _note(signum: int, frame: FrameType | None) -> None:
    _SIGNALLED.append(signum)


def signalled() -> int | None:
    """The first stop signal this worker process got outside a fit (None if none): its next job does not start."""
    return _SIGNALLED[0] if _SIGNALLED else None


_HALTS: list[Halt] = []  # in the comparison's own process: its scheduler's stop, while one runs


def stop_requested() -> bool:
    """Whether this process was asked to stop: a worker's signal (:func:`signalled`), or, in the comparison's own
    process running jobs inline, its scheduler's. A job running as its own process group polls it to pass the stop on.
    """
    return signalled() is not None or any(h.requested for h in _HALTS)


def _start_worker(threads: int, init: Callable[[ContextT], None], carried: plugins.Carried[ContextT]) -> None:
    import torch

    # a stop signal between fits is noted, not fatal: the worker ends its job at the next boundary (inside a fit the
    # run's own PreemptionCallback checkpoints first), so a stopped comparison keeps every finished job
    for sig in STOP_SIGNALS:
        signal.signal(sig, _note)
    torch.set_num_threads(threads)
    init(carried.value)  # unpickled after its plugins were imported (plugins.Carried)


def executor(workers: int, init: Callable[[ContextT], None], context: ContextT,
             plugin_names: Sequence[str] | None = None) -> cf.Executor:
    """:class:`Inline` for one worker (``init(context)`` called in this process), else a pool of
    ``workers`` spawned processes (spawn: a forked copy of a process that already ran torch's thread pool can hang),
    each started with ``init(context)`` after setting its torch threads (:func:`threads_per_worker`).

    ``plugin_names`` (:mod:`famlab.experiments.plumbing.plugins`; None: those this process imported) are imported
    here and in each worker before its context is unpickled: the context's configs name a plugin's family,
    objective or position scheme, which the worker's jobs look up in registries that only the plugin fills."""
    plugin_names = plugins.loaded() if plugin_names is None else list(plugin_names)
    plugins.load(plugin_names)
    if workers == 1:
        return Inline(init, context)
    return cf.ProcessPoolExecutor(
        max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_start_worker,
        initargs=(threads_per_worker(workers), init, plugins.Carried(context, plugin_names)),
    )


def stop(pool: cf.Executor, futures: Iterable[cf.Future[Any]] = ()) -> None:
    """After a job failed: cancel the jobs not started and end the running ones now rather than when they finish
    (their run directories keep what they wrote). The pool's processes are this process's only children.

    ``futures`` (the jobs submitted) are cancelled here, before any process ends: ``shutdown(cancel_futures=True)``
    cancels in the pool's own thread, which may first see the ended processes and fail the waiting jobs as a broken
    pool instead."""
    for future in futures:
        future.cancel()  # a job not started yet; a running one is ended below
    pool.shutdown(wait=False, cancel_futures=True)
    if isinstance(pool, cf.ProcessPoolExecutor):
        for child in mp.active_children():
            child.terminate()
        for child in mp.active_children():
            child.join(timeout=10)
        for child in mp.active_children():  # a worker that did not stop at a step boundary in time
            child.kill()


class Halt:
    """A scheduler's stop: the first failure of a job, or a stop signal (SIGTERM / SIGINT / SIGUSR1) to this process.

    Once requested, no job starts (:meth:`halt` cancels the queued ones) and the running ones are asked to stop at
    their next step with SIGTERM, which their runs' own preemption handling turns into a checkpoint; the scheduler
    waits for them, then :meth:`outcome` raises the failure, or ``Preempted`` for a signal.
    """

    RESEND_S = 5.0  # a worker between two fits may miss one signal: repeat it until the worker is done

    def __init__(self, latch: SignalLatch) -> None:
        self.latch = latch  # installed in this process
        self.error: BaseException | None = None
        self._sent = 0.0
        _HALTS[:] = [self]  # the scheduler running now (one per process at a time)

    @property
    def requested(self) -> bool:
        return self.error is not None or self.latch.signum is not None

    def fail(self, e: BaseException) -> None:
        """Keep the first failure; a job's real failure outranks its being stopped."""
        if self.error is None or (isinstance(self.error, Preempted) and not isinstance(e, Preempted)):
            self.error = e

    def halt(self, pool: cf.Executor, running: list[cf.Future]) -> None:
        """Cancel the jobs not started; signal the workers still running one (again every ``RESEND_S``)."""
        for future in running:
            future.cancel()
        if time.time() - self._sent <= self.RESEND_S:
            return
        self._sent = time.time()
        if isinstance(pool, cf.ProcessPoolExecutor):
            for child in mp.active_children():
                if child.pid is not None:  # started children have one
                    os.kill(child.pid, signal.SIGTERM)
        elif hasattr(pool, "interrupt_running"):  # submitit jobs: each stops at its next step
            pool.interrupt_running()

    def outcome(self, run_dir: Path) -> None:
        """Raise what stopped the scheduler: the failure, else ``Preempted`` naming ``run_dir``; nothing if neither."""
        if self.error is not None and not isinstance(self.error, Preempted):
            raise self.error
        if self.latch.signum is not None or self.error is not None:
            signum = self.latch.signum if self.latch.signum is not None else getattr(self.error, "signum", None)
            raise Preempted(0, None, signum=signum, run_dir=run_dir)
