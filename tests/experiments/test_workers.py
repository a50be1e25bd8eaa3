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


def test_inline_runs_each_job_at_submit_and_hands_its_failure_back_in_the_future():
    ran = []
    pool = workers.executor(1, ran.append, "ctx")
    assert isinstance(pool, workers.Inline) and ran == ["ctx"]  # init runs in this process
    assert pool.submit(lambda: ran.append(1) or "done").result() == "done" and ran == ["ctx", 1]
    failed = pool.submit(lambda: 1 / 0)  # done at submit, as a pool's future would be once the job ran
    assert failed.done() and isinstance(failed.exception(), ZeroDivisionError)


class _Latch:
    signum = None


def test_halt_keeps_the_first_real_failure_over_a_stop_and_raises_it():
    """A job's failure outranks another job's being preempted; a signal alone ends as Preempted naming the dir."""
    from famlab.experiments.plumbing.signals import Preempted

    halt = workers.Halt(_Latch())
    assert not halt.requested
    halt.fail(Preempted(3, None))
    halt.fail(ZeroDivisionError("first real failure"))
    halt.fail(KeyError("later"))
    assert halt.requested
    with pytest.raises(ZeroDivisionError, match="first real failure"):
        halt.outcome("comp")
    latch = _Latch()
    latch.signum = 15
    with pytest.raises(Preempted) as stopped:
        workers.Halt(latch).outcome("comp")
    assert stopped.value.signum == 15 and str(stopped.value.run_dir) == "comp"


def test_preempted_crosses_a_process_boundary_whole():
    """Pickled as a worker hands it back: step, checkpoint, signal and run directory survive."""
    import pickle
    from pathlib import Path

    from famlab.experiments.plumbing.signals import Preempted

    back = pickle.loads(pickle.dumps(Preempted(7, Path("r/checkpoints/last.ckpt"), signum=15)))
    assert (back.step, back.checkpoint, back.signum, back.run_dir) == (7, Path("r/checkpoints/last.ckpt"), 15,
                                                                        Path("r"))


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

    # A process pool marks a job running once it enters its call queue (workers + 1 slots) besides the ones the
    # two workers hold, so up to five of the eight can have left the queue by the stop; the rest must be cancelled.
    pool = workers.executor(2, _remember, None)
    futures = [pool.submit(time.sleep, 60) for _ in range(8)]
    t0 = time.time()
    workers.stop(pool, futures)
    assert time.time() - t0 < 30
    assert sum(f.cancelled() for f in futures) >= 3
    for f in futures:
        if not f.cancelled():
            with pytest.raises(cf.process.BrokenProcessPool):
                f.result(timeout=30)
