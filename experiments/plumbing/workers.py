"""Jobs side by side in worker processes (``famlab compare``'s ``compare.workers``).

Small models use a CPU's cores poorly: a tiny pretraining run is only about 1.3x faster on two threads than on
one, so two one-thread runs side by side finish about 1.5x sooner than the same runs one after the other on two
threads (``benchmarks/workers_bench.py`` measures it). :func:`executor` gives the scheduler one interface for both
ways: ``workers=1`` runs each job in this process the moment it is submitted; more start that many spawned
processes, each with ``cores // workers`` torch threads, that run the submitted jobs in order as they free up.

A worker gets the context its jobs share once, when it starts (``init`` with ``context``), not with every job.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
from collections.abc import Callable
from typing import Any


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

    def __init__(self, init: Callable[[Any], None], context: Any) -> None:
        init(context)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        future: cf.Future = cf.Future()
        future.set_result(fn(*args, **kwargs))
        return future


def _start_worker(threads: int, init: Callable[[Any], None], context: Any) -> None:
    import torch

    torch.set_num_threads(threads)
    init(context)


def executor(workers: int, init: Callable[[Any], None], context: Any) -> cf.Executor:
    """:class:`Inline` for one worker (``init(context)`` called in this process), else a pool of
    ``workers`` spawned processes (spawn: a forked copy of a process that already ran torch's thread pool can hang),
    each started with ``init(context)`` after setting its torch threads (:func:`threads_per_worker`)."""
    if workers == 1:
        return Inline(init, context)
    return cf.ProcessPoolExecutor(
        max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_start_worker,
        initargs=(threads_per_worker(workers), init, context),
    )


def stop(pool: cf.Executor) -> None:
    """After a job failed: cancel the jobs not started and end the running ones now rather than when they finish
    (their run directories keep what they wrote). The pool's processes are this process's only children."""
    pool.shutdown(wait=False, cancel_futures=True)
    if isinstance(pool, cf.ProcessPoolExecutor):
        for child in mp.active_children():
            child.terminate()
        for child in mp.active_children():
            child.join(timeout=10)
