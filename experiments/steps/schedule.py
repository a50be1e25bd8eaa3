"""The comparison's scheduler: its jobs (:class:`Job`), submitted ``compare.workers`` at a time to worker processes
(:mod:`famlab.experiments.plumbing.workers`), each on a GPU of its own when there are several, a finished job
letting the next ones start (:func:`follow_ups`), and the live view's list of them (:func:`board_entries`)."""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import os
import pickle
from concurrent.futures.process import BrokenProcessPool  # not loaded by `import concurrent.futures`
from pathlib import Path
from typing import TYPE_CHECKING

from famlab.experiments.analysis.results import ArmBudget
from famlab.experiments.configuration.config import with_values
from famlab.experiments.configuration.plans import ComparePlan
from famlab.experiments.plumbing import failures, live, plugins, workers
from famlab.experiments.plumbing.console import quiet_libraries
from famlab.experiments.plumbing.rundir import CompareDir, write_json
from famlab.experiments.plumbing.signals import Preempted, SignalLatch
from famlab.experiments.steps.compare_jobs import (
    arm_tags,
    evaluate_pretrained,
    pretrain_seed,
    scratch_baseline,
    transfer_to,
    tune_lr,
)
from famlab.experiments.steps.comparison import STATUS_DIR, Comparison, PretrainedRun, scratch_configs

if TYPE_CHECKING:
    import submitit


@dataclasses.dataclass(frozen=True)
class Job:
    """One unit of a comparison that a worker runs whole: ``pretrain`` (an arm's seed: the lr grid first for the
    first seed when ``compare.lr_grid`` is set, then pretraining and evaluation), ``transfer`` (probe and fine-tunes
    of one pretrained model on one task) or ``scratch`` (a family's baseline on one task)."""

    kind: str
    arm: str  # the family, for ``scratch``
    seed: int = 0
    task: int = 0  # index into ``Comparison.suite``
    run: PretrainedRun | None = None  # the pretrained model a ``transfer`` starts from
    tune: bool = False  # ``pretrain``: choose the lr on ``compare.lr_grid`` first
    cfg: ComparePlan | None = None  # ``pretrain``: the arm's config, when a tuned lr changed it after workers started


@dataclasses.dataclass
class Done:
    """What a job hands back: its phase times, and for ``pretrain`` the run (and, tuned, the chosen lr's config)."""

    phases: dict[str, float]
    run: PretrainedRun | None = None
    tuned: tuple[ComparePlan, ArmBudget] | None = None  # (the arm's config with its lr, its plan entry)


def run_jobs(c: Comparison) -> None:
    """Every job of the comparison, ``compare.workers`` at a time (:mod:`famlab.experiments.plumbing.workers`).

    Submitted in this order: pretraining, longest first (:func:`pretrain_order`); the scratch baselines; each
    pretrained model's transfers as soon as it is trained. With ``compare.lr_grid`` an arm's later seeds wait for
    its first, which chooses their lr. Results go to run directories; here only phase times and plans meet.

    A failed job, or a stop signal (SIGTERM, Ctrl-C, SLURM's SIGUSR1), starts no further job and stops the running
    ones at their next step with a checkpoint (:class:`~famlab.experiments.plumbing.workers.Halt`); then the
    failure, or ``Preempted``, is raised. Finished jobs stay on disk for ``resume=auto``.
    """
    tune = bool(c.base.compare.lr_grid)
    pool = make_pool(c)
    pending: dict[cf.Future, Job] = {}
    try:
        with SignalLatch() as latch:
            halt = workers.Halt(latch)

            def submit(job: Job) -> None:
                if not halt.requested:
                    pending[pool.submit(run_job, job)] = job

            for job in first_jobs(c, tune):
                submit(job)
            while pending:
                finished, _ = cf.wait(pending, timeout=1.0, return_when=cf.FIRST_COMPLETED)
                for future in [f for f in pending if f in finished]:  # submission order: one process prints in order
                    job = pending.pop(future)
                    if future.cancelled():
                        continue
                    try:
                        done = future.result()
                    except BrokenProcessPool:
                        raise
                    except Exception as e:  # noqa: BLE001 - the first failure stops the comparison, after the others
                        halt.fail(e)
                        continue
                    for phase, seconds in done.phases.items():
                        c.clock.phases[phase] += seconds
                    for follow in follow_ups(c, job, done):
                        submit(follow)
                if halt.requested:
                    halt.halt(pool, list(pending))
    except BrokenProcessPool as e:
        workers.stop(pool, pending)
        raise RuntimeError(f"a compare worker process died (killed by the system, perhaps out of memory; its jobs' "
                           f"run directories keep what they wrote): rerun with fewer compare.workers (now "
                           f"{c.base.compare.workers})") from e
    except BaseException:
        workers.stop(pool, pending)
        raise
    finally:
        _start_worker(None)
    pool.shutdown(wait=True)
    halt.outcome(c.comp_dir)


def make_pool(c: Comparison) -> cf.Executor:
    """Where the jobs run (``compare.launcher``): worker processes of this machine (``local``), or each job a submitit
    job (``slurm``; ``submitit-local`` runs the same path as local processes), at most ``compare.workers`` at once."""
    cmp = c.base.compare
    if cmp.launcher == "local":
        return workers.executor(cmp.workers, _start_worker, c)
    from famlab.experiments.plumbing.submitit_pool import SubmititPool

    # what a job process needs of the comparison, picklable (no shared counters between machines)
    context = pickle.dumps(dataclasses.replace(c, clock=c.clock.detached(), started_workers=None))
    cluster = "slurm" if cmp.launcher == "slurm" else "local"

    def prepare(fn: object, args: tuple) -> tuple[SubmittedJob, tuple, str]:
        (job,) = args  # its process imports the plugins before it reads the job (which names their choices)
        return SubmittedJob(), (plugins.Carried((context, job), plugins.loaded()),), job_name(c, job)

    folder = c.comp_dir / STATUS_DIR / "submitit"
    return SubmititPool(submitit_executor(c, folder, cluster), cmp.workers, folder / "submitted", prepare, cluster)


def submitit_executor(c: Comparison, folder: Path, cluster: str) -> submitit.Executor:
    """submitit's executor for ``compare.launcher``: one task per job, ``trainer.devices`` GPUs on SLURM (the job's
    own ranks are its process group, :func:`~famlab.experiments.steps.compare_jobs.in_job_world`)."""
    import submitit  # compose_base checked it is installed

    cmp = c.base.compare
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    executor.update_parameters(timeout_min=cmp.slurm_time_min, tasks_per_node=1, nodes=1)
    if cluster == "slurm":
        executor.update_parameters(slurm_partition=cmp.slurm_partition, gpus_per_node=c.placement.devices_per_job,
                                   cpus_per_task=cmp.slurm_cpus_per_task)
    return executor


class SubmittedJob:
    """One job as a submitit job: the comparison's context set up in the job's process, the job run, its exception
    handed back as itself. Requeued after a timeout or preemption (submitit's ``checkpoint``), it runs again with
    ``resume=auto``: finished runs are read back, an interrupted one continues from its ``last.ckpt``."""

    def __call__(self, carried: plugins.Carried[tuple[bytes, Job]], resumed: bool = False) -> object:
        from famlab.experiments.plumbing.submitit_pool import Raised

        context, job = carried.value
        c: Comparison = pickle.loads(context)
        if resumed:
            c, job = resume_everywhere(c, job)
        _start_worker(c)
        try:
            return run_job(job)
        except BaseException as e:  # noqa: BLE001 - the scheduler tells a stop from a failure by the exception
            return Raised(e)

    def checkpoint(self, carried: plugins.Carried[tuple[bytes, Job]], resumed: bool = False) -> object:
        import submitit

        return submitit.helpers.DelayedSubmission(self, carried, True)


def resume_everywhere(c: Comparison, job: Job) -> tuple[Comparison, Job]:
    """The comparison and job with ``resume=auto`` in every config a requeued job reads."""
    auto = {"resume": "auto"}
    c = dataclasses.replace(c, base=with_values(c.base, auto),
                            cfgs={arm: with_values(cfg, auto) for arm, cfg in c.cfgs.items()})
    run = dataclasses.replace(job.run, cfg=with_values(job.run.cfg, auto)) if job.run else None
    return c, dataclasses.replace(job, cfg=with_values(job.cfg, auto) if job.cfg else None, run=run)


def first_jobs(c: Comparison, tune: bool) -> list[Job]:
    """The jobs that need no other: every arm's pretraining seeds (only the first when it tunes the lr), then the
    scratch baselines."""
    jobs = [Job("pretrain", arm, seed, tune=tune and i == 0) for arm in pretrain_order(c)
            for i, seed in enumerate(c.base.compare.pretrain_seeds) if i == 0 or not tune]
    if c.base.compare.scratch_seeds:
        jobs += [Job("scratch", family, task=t) for family in scratch_configs(c.cfgs) for t in range(len(c.suite))]
    return jobs


def pretrain_order(c: Comparison) -> list[str]:
    """Arms by planned pretraining FLOPs, most first, so the longest run does not start last (under a FLOP-matched
    budget they take about equally long, and keep the arms' order; docs/results.md, The default's row)."""
    return sorted(c.cfgs, key=lambda arm: c.plan.arms[arm].flops, reverse=True)


def follow_ups(c: Comparison, job: Job, done: Done) -> list[Job]:
    """The jobs a finished one lets start: after pretraining, its transfers (and, once an arm's lr is tuned, the
    arm's other seeds with that lr, in this process's configs and ``plan.json``)."""
    if job.kind != "pretrain":
        return []
    jobs = []
    if done.tuned is not None:
        c.cfgs[job.arm], c.plan.arms[job.arm] = done.tuned
        write_json(CompareDir(c.comp_dir).plan_file, c.plan.to_json())
        jobs += [Job("pretrain", job.arm, seed, cfg=c.cfgs[job.arm]) for seed in c.base.compare.pretrain_seeds[1:]]
    if c.base.compare.seeds or c.base.compare.probe:
        jobs += [Job("transfer", job.arm, job.seed, t, run=done.run) for t in range(len(c.suite))]
    return jobs


_SHARED: Comparison | None = None  # the comparison this process runs jobs for (a worker's copy, or the parent's own)


def _start_worker(c: Comparison | None) -> None:
    global _SHARED
    _SHARED = c
    if c is not None:  # a spawned worker starts with the libraries' defaults: quiet them as the parent did
        place_worker(c)
        quiet_libraries(c.comp_dir / failures.LOG_NAME)
        live.worker_console(c.comp_dir / failures.LOG_NAME)


def place_worker(c: Comparison) -> tuple[str, ...] | None:
    """In a worker process (``compare.workers`` > 1) on a machine with GPUs: take the next worker index and see only
    that worker's GPUs (``CUDA_VISIBLE_DEVICES``, before CUDA starts; its jobs' ``trainer.devices`` count them).
    Returns the GPUs, or None (the CPU, or the comparison's own process)."""
    if not c.placement.gpus or c.base.compare.workers == 1 or c.started_workers is None:
        return None
    with c.started_workers.get_lock():
        index = c.started_workers.value
        c.started_workers.value += 1
    gpus = c.placement.worker_gpus(index)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    return gpus


def run_job(job: Job) -> Done:
    """Run ``job`` (in a worker, or in the comparison's own process with one worker) on a fresh clock, its state and
    its fits' progress in its status file for the live view (:mod:`famlab.experiments.plumbing.live`)."""
    assert _SHARED is not None, "run_job outside a comparison"
    if workers.signalled() is not None:  # this worker was asked to stop: start nothing
        raise Preempted(0, None, signum=workers.signalled(), run_dir=_SHARED.comp_dir)
    with live.job_status(_SHARED.comp_dir / STATUS_DIR / f"{job_name(_SHARED, job)}.json") as outcome:
        done = _run_job(dataclasses.replace(_SHARED, clock=_SHARED.clock.fresh()), job)
        if done.run is not None:
            loss = done.run.result.final.get("val/loss")
            outcome["result"] = f"val/loss {loss:.4f}" if isinstance(loss, float) else ""
    return done


def job_name(c: Comparison, job: Job) -> str:
    """The job's name on the live view: ``<arm>-pretrain-s<seed>``, ``<arm>-transfer-s<seed>``, ``<family>-scratch``
    (and ``@<task>`` in a suite)."""
    task = c.suite[job.task] if job.kind != "pretrain" else None
    where = f"@{task.spec.name}" if task is not None else ""
    seed = f"-s{job.seed}" if job.kind != "scratch" else ""
    return f"{job.arm}-{job.kind}{seed}{where}"


def board_entries(c: Comparison) -> list[live.Entry]:
    """Every job the comparison will run, in the order it starts them, pretraining with its planned FLOPs."""
    cmp, tasks = c.base.compare, range(len(c.suite))
    jobs = [Job("pretrain", arm, seed) for arm in pretrain_order(c) for seed in cmp.pretrain_seeds]
    if cmp.scratch_seeds:
        jobs += [Job("scratch", family, task=t) for family in scratch_configs(c.cfgs) for t in tasks]
    if cmp.seeds or cmp.probe:
        jobs += [Job("transfer", arm, seed, t)
                 for arm in pretrain_order(c) for seed in cmp.pretrain_seeds for t in tasks]
    return [live.Entry(job_name(c, j), j.kind, c.plan.arms[j.arm].flops if j.kind == "pretrain" else None)
            for j in jobs]


def _run_job(c: Comparison, job: Job) -> Done:
    if job.kind == "scratch":
        scratch_baseline(c, job.arm, c.suite[job.task])
        return Done(c.clock.phases)
    if job.cfg is not None:  # the arm's config changed after this worker's copy of the configs was made (lr tuned)
        c = dataclasses.replace(c, cfgs={**c.cfgs, job.arm: job.cfg})
    if job.kind == "transfer":
        assert job.run is not None
        transfer_to(c, c.suite[job.task], job.arm, job.seed, job.run, arm_tags(c, job.arm))
        return Done(c.clock.phases)
    tuned = None
    if job.tune:
        run, tuned_cfg = tune_lr(c, job.arm)
        tuned = (tuned_cfg, c.plan.arms[job.arm])
    else:
        run = pretrain_seed(c, job.arm, job.seed)
    evaluate_pretrained(c, job.arm, job.seed, run)
    return Done(c.clock.phases, run, tuned)
