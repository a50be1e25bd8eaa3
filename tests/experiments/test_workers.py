"""compare.workers' executors: in this process, jobs run at submit and a failure stops the caller; in a pool, each
worker has the shared context and its share of the cores as torch threads."""

import concurrent.futures as cf
import os

import pytest
from famlab.experiments.plumbing import workers

_CONTEXT = None


def _remember(context):
    global _CONTEXT
    _CONTEXT = context


def _job(x):
    import torch

    return x, _CONTEXT, torch.get_num_threads(), os.getpid()


def test_inline_runs_each_job_at_submit_and_raises_there():
    ran = []
    pool = workers.executor(1, ran.append, "ctx")
    assert isinstance(pool, workers.Inline) and ran == ["ctx"]  # init runs in this process
    assert pool.submit(lambda: ran.append(1) or "done").result() == "done" and ran == ["ctx", 1]
    with pytest.raises(ZeroDivisionError):  # not kept in a future for later: no job after it starts
        pool.submit(lambda: 1 / 0)


def test_threads_share_out_the_cores():
    cores = workers.cores()
    assert workers.threads_per_worker(1) == cores
    assert workers.threads_per_worker(2) == max(1, cores // 2)
    assert workers.threads_per_worker(cores * 4) == 1


def test_a_pool_of_two_gives_each_worker_the_context_and_its_threads():
    pool = workers.executor(2, _remember, {"shared": [1, 2]})
    try:
        results = [f.result(timeout=120) for f in [pool.submit(_job, i) for i in range(4)]]
    finally:
        pool.shutdown(wait=True)
    assert [r[0] for r in results] == [0, 1, 2, 3]
    assert all(r[1] == {"shared": [1, 2]} and r[2] == workers.threads_per_worker(2) for r in results)
    assert os.getpid() not in {r[3] for r in results} and len({r[3] for r in results}) <= 2


def test_stop_cancels_waiting_jobs_and_ends_running_ones():
    import time

    pool = workers.executor(2, _remember, None)
    futures = [pool.submit(time.sleep, 60) for _ in range(4)]
    t0 = time.time()
    workers.stop(pool)
    assert time.time() - t0 < 30
    assert any(f.cancelled() for f in futures)
    with pytest.raises(cf.process.BrokenProcessPool):
        futures[0].result(timeout=30)
