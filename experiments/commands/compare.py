"""``famlab compare``: every family pretrained under one matched budget, fine-tuned, and reported side by side.

Steps (each run is a run directory inside ``runs/compare-<name>-<ts>/``, all in one W&B group):
1. one tokenizer for every family, trained once on the corpus (cached), its path passed to each run;
2. budget plan (``compare.match``, :mod:`famlab.experiments.steps.compare_budget`): steps or sizes per arm;
3. optional ``compare.lr_grid``: the pretraining lr per arm with the lowest final validation loss;
4. per arm and ``compare.pretrain_seeds``: pretrain, then bits per byte on validation documents;
5. per pretrained model: fine-tune on ``data.task`` for ``compare.seeds``; per family the scratch baseline
   for ``compare.scratch_seeds`` (it does not depend on the pretraining objective). When ``data.task`` names a
   suite, step 5 (and the probe) runs once per task, in ``<task name>/``
   (:mod:`famlab.experiments.steps.compare_suite`);
6. :func:`famlab.experiments.analysis.report.build_report` writes ``report.md``, PNG plots and ``results.json``.

Steps 3-5 are jobs (:mod:`famlab.experiments.steps.compare_jobs`, run by
:func:`famlab.experiments.steps.schedule.run_jobs`) run ``compare.workers`` at a time: in this process, or side
by side in worker processes that share the cores (:mod:`famlab.experiments.plumbing.workers`), each on a visible
GPU of its own when there are GPUs (:func:`famlab.experiments.steps.schedule.place_worker`).

An *arm* is one (family, objective) pair. With ``compare.objectives=[]`` there is one arm per family, named
after the family, with its preset's objective. ``compare.objectives=[span,prefix_lm,gpt:ul2]`` crosses
objectives with families (the T5 paper's Table 2 layout): a bare objective is given to every family in
``compare.families`` that can train it, ``family:objective`` to that family only; arms are then named
``<family>-<objective>`` (run directories ``<arm>-pretrain-s0``, ``<arm>-ft-s0``).

With no size preset the bundled default is ``tiny`` plus :data:`TINY_DEFAULTS` (a budget that finishes in
minutes on 2 CPU cores; one worker per GPU on a machine with several:
:mod:`famlab.experiments.configuration.compare_defaults`); ``famlab compare small`` is the serious single-GPU
setting. ``famlab compare --dry-run`` prints the composed config, the budget plan and the jobs, and runs nothing
(:func:`dry_run`).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import time
from pathlib import Path

from famlab.experiments.configuration.compose import flatten, to_plain
from famlab.experiments.configuration.config import ConfigInputError, DataConfig, FinetuneConfig
from famlab.experiments.configuration.placement import Placement
from famlab.experiments.configuration.plans import ComparePlan
from famlab.experiments.configuration.specs import global_batch
from famlab.experiments.plumbing import failures, live, workers
from famlab.experiments.plumbing.console import heartbeat_seconds, quiet_libraries
from famlab.experiments.plumbing.exits import PREEMPTED_EXIT
from famlab.experiments.plumbing.launch_env import launched_world
from famlab.experiments.plumbing.rundir import CompareDir
from famlab.experiments.plumbing.signals import Preempted
from famlab.experiments.plumbing.world import per_device_batch
from famlab.experiments.steps import compare_suite
from famlab.experiments.steps.compare_budget import (
    assumed_ids,
    cost_lines,
    job_lines,
    plan_budget,
    plan_lines,
    training_rate,
)
from famlab.experiments.steps.compare_dir import log, open_dir, resume_command, write_settings
from famlab.experiments.steps.compare_jobs import finish
from famlab.experiments.steps.comparison import STATUS_DIR, Stopped, compose_all, compose_base, set_up
from famlab.experiments.steps.schedule import board_entries, run_jobs
from famlab.experiments.steps.suite import read_suite
from famlab.experiments.tracking.wandb_report import print_wandb_commands


def run_compare(presets: list[str], overrides: list[str]) -> Path:
    """Run the whole comparison (or resume it: ``run_dir=`` + ``resume=auto``); returns the comparison directory.

    Raises:
        ConfigInputError: bad settings or data, found before any job runs (a new directory is then removed).
        Stopped: a stop signal, or a required job's failure, once jobs ran.
    """
    started = time.time()
    base, cfgs = compose_all(presets, overrides)
    specs = read_suite(base.data.task)  # None: one task
    # a bad task, suite or task_limit subsample fails before anything runs
    compare_suite.check_tasks(base.data, base.compare, specs)
    comp_dir, resumed = open_dir(base.compare, cfgs, run_dir=base.run_dir, resume=base.resume, name=base.name,
                                 size=base.size)
    quiet_libraries(comp_dir / failures.LOG_NAME)  # until a run's own directory takes them: into compare.log
    if not resumed:
        write_settings(comp_dir, cfgs, presets, overrides)
    try:
        comparison = set_up(base, cfgs, specs, comp_dir, started, resumed)
    except ValueError:  # bad data, before any job: one line, and no half-made comparison left behind
        if not resumed:
            shutil.rmtree(comp_dir, ignore_errors=True)
        raise
    except Exception as e:
        failures.log_traceback(comp_dir, "the comparison's setup failed", e)
        raise Stopped(comp_dir, e, resume_command(comp_dir, presets, overrides)) from e
    try:
        live.clear_unfinished(comp_dir / STATUS_DIR)
        board = live.Board(comp_dir / STATUS_DIR, board_entries(comparison))
        with live.live_view(board, live=live.live_wanted(), every_s=heartbeat_seconds()):
            run_jobs(comparison)
        finish(comparison, presets, overrides)
    except (Exception, KeyboardInterrupt) as e:
        failures.log_traceback(comp_dir, "the comparison stopped", e)
        raise Stopped(comp_dir, e, resume_command(comp_dir, presets, overrides)) from e
    return comp_dir


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab compare [--dry-run] [presets...] [key=value...]``.

    Exit status: 0 done; 2 bad settings or data (one line); 3 stopped by a signal, checkpoints written; 1 a required
    job failed (one line here, the traceback in ``compare.log``). After a stop the last line is the resume command.
    ``--dry-run`` prints what would run (:func:`dry_run`) and exits 0, or 2 on bad settings, having run nothing.
    """
    if launched_world() > 1:  # every rank would make its own comparison directory
        raise ConfigInputError(
            f"famlab compare owns its comparison directory and runs once, but it was started as one of "
            f"{launched_world()} processes (WORLD_SIZE / SLURM_STEP_NUM_TASKS): start it once (srun --ntasks=1, no "
            "torchrun); its jobs get their devices from trainer.devices and compare.workers (docs/scale.md)")
    unknown = [f for f in flags if f != "--dry-run"]
    if unknown:
        raise ConfigInputError(f"famlab compare: unknown flag {unknown[0]} (valid flags: --dry-run)")
    if flags:
        return dry_run(presets, overrides)
    try:
        comp_dir = run_compare(presets, overrides)
    except Stopped as stop:
        return stopped(stop)
    print(verdict(comp_dir))
    print(f"The whole report (zero-shot, pretraining, fine-tuning, family tests, probe, protocol, plots): "
          f"{CompareDir(comp_dir).report_file}")
    print_wandb_commands(comp_dir)
    return 0


def verdict(comp_dir: Path) -> str:
    """The report's "What pretraining bought" section (its gains table and verdict), for the console's last lines."""
    md = CompareDir(comp_dir).report_file.read_text(encoding="utf-8")
    head, found, rest = md.partition("## What pretraining bought")
    if not found:
        return ""
    return (found + re.split(r"\n#{2,3} ", rest, maxsplit=1)[0]).rstrip()


def dry_run(presets: list[str], overrides: list[str]) -> int:
    """``famlab compare --dry-run``: print what ``famlab compare`` with these arguments would run - the presets and
    defaults it composes, every key of the composed config, the budget plan and the jobs - and run nothing: no
    directory, tokenizer, corpus cache or W&B run. Settings and the task are checked as a real start checks them."""
    from famlab.experiments.plumbing.data_cache import with_vocab

    names, defaults, _, placement = compose_base(presets, overrides)
    base, cfgs = compose_all(presets, overrides)
    specs = read_suite(base.data.task)  # None: one task
    compare_suite.check_tasks(base.data, base.compare, specs)
    config = config_lines(cfgs, defaults, planned=base.compare.match.value != "params")
    cfgs = {arm: with_vocab(cfg, cfg.data.tokenizer.vocab_size) for arm, cfg in cfgs.items()}
    plan, cfgs = plan_budget(base.compare, base.trainer, base.data, cfgs, assumed_ids(base.data))
    cmp = base.compare
    tasks: list[str | None] = [None] if specs is None else [s.name for s in specs]
    rate = training_rate(base.trainer, placement)  # each job's time from its planned FLOPs on the device it will run on
    jobs = job_lines(base.compare, cfgs, plan, tasks, rate)
    task = (f"{base.data.task}" + (f", suite of {len(tasks)} tasks: {', '.join(map(str, tasks))}" if specs else "")
            + (f"; a seeded subsample of {cmp.task_limit} training examples (compare.task_limit) and "
               f"{cmp.task_eval_limit or cmp.task_limit // 5} each for validation and test" if cmp.task_limit else ""))
    out = ["famlab compare --dry-run: nothing runs; `famlab compare` with these arguments would run this",
           f"presets: {' '.join(names)}",
           "famlab compare's defaults" + (f" (a key you set wins): {' '.join(defaults)}" if defaults else ": none"),
           *placement_lines(base.data, base.finetune, base.trainer.accumulate_grad_batches, placement),
           f"fine-tuning task: data.task={task}",
           "runs go to: " + (f"run_dir={base.run_dir}" if base.run_dir
                             else f"runs/compare-{base.name or '<name>'}-<YYYYmmdd-HHMMSS>/")
           + (" (resume=auto: its finished jobs are read back, not rerun)" if base.resume == "auto" else ""),
           "", *config, "", *plan_lines(base.compare, base.data, cfgs, plan),
           *cost_lines(base.compare, base.data.corpus, plan, rate), "",
           f"jobs ({len(jobs)}, compare.workers={cmp.workers} at a time, in this order; a model's probe and fine-tunes"
           " start once it is pretrained):", *(f"  {i}. {line}" for i, line in enumerate(jobs, 1))]
    print("\n".join(out))
    return 0


def placement_lines(data: DataConfig, ft_section: FinetuneConfig, accumulate: int, placement: Placement) -> list[str]:
    """The two axes (jobs side by side, devices per job) and what each rank loads of the global batch (``--dry-run``):
    ``data.batch_size``, ``finetune.batch_size``, ``trainer.accumulate_grad_batches``."""
    k = placement.devices_per_job
    threads = f" (torch threads: {placement.threads_per_rank(workers.cores())} per rank)" if not placement.gpus else ""
    pretrain, (ft, ft_key) = data.batch_size, global_batch(ft_section, data.batch_size)
    each = [per_device_batch(b, k, accumulate, key) for b, key in ((pretrain, "data.batch_size"), (ft, ft_key))]
    return [*(line + threads for line in placement.lines()),
            f"global batch: {pretrain} pretraining, {ft} fine-tuning (data.batch_size, finetune.batch_size), the same "
            f"on any number of devices: each of a job's {k} rank(s) loads {each[0]} and {each[1]} per micro-batch, "
            f"{accumulate} micro-batch(es) a step (trainer.accumulate_grad_batches)"]


def config_lines(cfgs: dict[str, ComparePlan], defaults: list[str], planned: bool = True) -> list[str]:
    """Every key of the arms' composed config as ``key: value`` (schema order), the keys that differ between arms
    listed per arm; a comment marks a key one of ``defaults`` set and, with ``planned`` (a FLOP- or token-matched
    budget), the keys the budget plan sets per arm. A start sets the tokenizer, vocabulary, task file and W&B group."""
    flat = {arm: flatten(to_plain(cfg)) for arm, cfg in cfgs.items()}
    first = next(iter(flat.values()))
    shared = [k for k in first if all(f.get(k) == first[k] for f in flat.values())]
    default_keys = {d.split("=", 1)[0] for d in defaults}
    per_arm = {"trainer.max_steps", "trainer.val_check_interval", "optim.warmup_steps"} if planned else set()

    def note(key: str) -> str:
        notes = ["famlab compare default"] * (key in default_keys) + ["per arm: the budget plan"] * (key in per_arm)
        return f"  # {'; '.join(notes)}" if notes else ""

    lines = [f"config ({', '.join(flat)}: keys every arm shares; `famlab config` shows the same keys without "
             "famlab compare's defaults):"]
    lines += [f"  {k}: {_shown(first[k])}{note(k)}" for k in shared if k != "provenance"]
    lines.append("config that differs between arms:")
    lines += [f"  {arm}: " + " ".join(f"{k}={_shown(v)}" for k, v in f.items() if k not in shared)
              for arm, f in flat.items()]
    lines.append("set as the comparison starts: model.vocab_size and data.tokenizer.path (its one tokenizer), the "
                 "fine-tuning task's data.* (its task.csv subsample), wandb.group and wandb.dir; per run: seed, "
                 "run_dir, name")
    return lines


def _shown(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def stopped(stop: Stopped) -> int:
    """Say why the comparison stopped and how to resume it (the last line); return the exit status."""
    cause, kept = stop.cause, f"finished jobs are kept in {stop.comp_dir}"
    if isinstance(cause, (Preempted, KeyboardInterrupt)):
        name = getattr(cause, "signum", None)
        what = f"got {signal.Signals(name).name}" if name else "interrupted"
        log(f"{what}: running jobs stopped at a step boundary with a checkpoint; {kept}")
        status = PREEMPTED_EXIT
    else:
        log(f"stopped: a required job failed: {stop}; {kept}; traceback in {stop.comp_dir / failures.LOG_NAME}")
        status = 2 if isinstance(cause, ValueError) else 1
    sys.stdout.flush()
    print(f"famlab: resume with: {stop.command}", file=sys.stderr, flush=True)
    return status
