"""``famlab compare``: every family pretrained under one matched budget, fine-tuned, and reported side by side.

Steps (each run is a run directory inside ``runs/compare-<name>-<ts>/``, all in one W&B group):
1. one tokenizer for every family, trained once on the corpus (cached), its path passed to each run;
2. budget plan (``compare.match``, :mod:`famlab.experiments.commands.compare_budget`): steps or sizes per arm;
3. optional ``compare.lr_grid``: the pretraining lr per arm with the lowest final validation loss;
4. per arm and ``compare.pretrain_seeds``: pretrain, then bits per byte on validation documents;
5. per pretrained model: fine-tune on ``data.task`` for ``compare.seeds``; per family the scratch baseline
   for ``compare.scratch_seeds`` (it does not depend on the pretraining objective). When ``data.task`` names a
   suite, step 5 (and the probe) runs once per task, in ``<task name>/``
   (:mod:`famlab.experiments.commands.compare_suite`);
6. :func:`famlab.experiments.analysis.report.build_report` writes ``report.md``, PNG plots and ``results.json``.

Steps 3-5 are jobs (:func:`run_jobs`) run ``compare.workers`` at a time: in this process, or side by side in worker
processes that share the cores (:mod:`famlab.experiments.plumbing.workers`), each on a visible GPU of its own when
there are GPUs (:func:`place_worker`).

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

import concurrent.futures as cf
import copy
import dataclasses
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from famlab.experiments.analysis.results import FinetuneResult, Plan, PretrainResult, StepFailure, read_failures
from famlab.experiments.commands import compare_suite
from famlab.experiments.commands.compare_budget import plan_budget
from famlab.experiments.commands.compare_dir import log, open_dir, resume_command, write_settings
from famlab.experiments.commands.evaluate import BUNDLED, evaluate_run, read_items
from famlab.experiments.commands.suite import read_suite
from famlab.experiments.configuration.compare_defaults import (
    SIZES,  # noqa: F401 - part of this module's interface
    TINY_DEFAULTS,  # noqa: F401 - part of this module's interface
    WORKERS,
    comparison_presets,
    visible_gpus,
    with_gpu_workers,
    worker_device,
)
from famlab.experiments.configuration.compose import compose, parse_overrides
from famlab.experiments.configuration.config import Config, ConfigInputError
from famlab.experiments.configuration.lightning_check import parse_devices
from famlab.experiments.configuration.task import load_configured_task
from famlab.experiments.plumbing import failures, live, workers
from famlab.experiments.plumbing.console import heartbeat_seconds, quiet_libraries
from famlab.experiments.plumbing.exits import PREEMPTED_EXIT
from famlab.experiments.plumbing.run import get_bundle, prepared_corpus, set_vocab, token_ids, write_json
from famlab.experiments.plumbing.signals import Preempted, SignalLatch
from famlab.experiments.tracking.wandb_report import log_report_run, pretraining_dirs, print_wandb_commands
from famlab.families.registry import family_names

PHASES = ("pretraining", "evaluation", "fine-tuning", "probes")  # compare.json's wall time split
STATUS_DIR = "jobs"  # each job's status file, for the live view

def compose_all(presets: list[str], overrides: list[str]) -> tuple[Config, dict[str, Config]]:
    """The comparison's own config (first family) and one composed config per arm, keyed by arm name.

    Arms come from ``compare.families`` x ``compare.objectives`` (:func:`expand_arms`), in family order. With no size
    preset the tiny comparison's defaults apply, one worker per GPU on a machine with several
    (:mod:`famlab.experiments.configuration.compare_defaults`).
    """
    presets, defaults, base, gpus = compose_base(presets, overrides)
    family_free = [p for p in presets if p not in family_names()]
    user_flat = {t.lstrip("-").split("=", 1)[0] for t in overrides}
    families = list(base.compare.families)
    if not families or len(set(families)) != len(families):
        raise ConfigInputError(f"compare.families={families} must name distinct families")
    for family in families:
        if family not in family_names():
            raise ConfigInputError(f"compare.families: {family!r} is not one of: {', '.join(family_names())}")
    pairs, kept = expand_arms(families, list(base.compare.objectives))
    if kept:
        log(f"compare.objectives gives no objective to {', '.join(kept)}: kept the preset objective")
    cfgs = {}
    for family, objective in pairs:
        # objective.name follows each family's preset unless the user fixed it or compare.objectives names one
        chosen = [f"objective.name={objective}"] if objective else []
        cfg = compose([family, *family_free], [*defaults, *overrides, *chosen]).cfg
        if "finetune.lr_grid" not in user_flat:  # the protocol's grid at every scale, around the preset's body lr
            lr = cfg.finetune.lr
            cfg.finetune.lr_grid = [lr / 3, lr, lr * 3] if base.compare.finetune_lr_points == 3 else [lr, lr * 3]
        cfgs[arm_name(family, cfg.objective.name, bool(base.compare.objectives))] = cfg
    if base.compare.scratch_seeds is None:
        base.compare.scratch_seeds = list(base.compare.seeds)
    for cfg in cfgs.values():
        cfg.compare.scratch_seeds = list(base.compare.scratch_seeds)
    if not base.compare.seeds and not base.compare.scratch_seeds:
        raise ConfigInputError("compare.seeds and compare.scratch_seeds are both empty: nothing to fine-tune")
    if not base.compare.pretrain_seeds:
        raise ConfigInputError("compare.pretrain_seeds=[] must name at least one seed")
    check_workers(base, gpus, defaulted=any(d.startswith(f"{WORKERS}=") for d in defaults))
    return base, cfgs


def compose_base(presets: list[str], overrides: list[str]) -> tuple[list[str], list[str], Config, list[str]]:
    """The presets the comparison composes, the tiny comparison's defaults that apply
    (:func:`~famlab.experiments.configuration.compare_defaults.comparison_presets`, ``compare.workers`` one per GPU
    on a machine with several), the comparison's own config (no family preset), and the visible GPUs its workers
    share."""
    parse_overrides(overrides)  # malformed tokens fail here, naming the token
    presets, defaults = comparison_presets(presets, overrides)
    family_free = [p for p in presets if p not in family_names()]
    base = compose(family_free, [*defaults, *overrides]).cfg
    gpus = visible_gpus(base.trainer.accelerator)
    if (per_gpu := with_gpu_workers(defaults, gpus)) != defaults:
        defaults, base = per_gpu, compose(family_free, [*per_gpu, *overrides]).cfg
    return presets, defaults, base, gpus


def check_workers(base: Config, gpus: list[str], defaulted: bool = False) -> None:
    """``compare.workers`` > 1 runs each job in a process of its own on one device: worker ``i`` on GPU
    ``gpus[i % len(gpus)]`` (:func:`~famlab.experiments.configuration.compare_defaults.worker_device`), or the CPU
    without ``gpus``. A job that would want several devices, named device ids or several nodes is refused.

    Args:
        base: the comparison's config (``compare.workers``, ``trainer.devices`` / ``num_nodes``).
        gpus: the visible GPUs (:func:`~famlab.experiments.configuration.compare_defaults.visible_gpus`).
        defaulted: ``compare.workers`` is the tiny comparison's default, not the user's (the message says so).
    """
    n, t = base.compare.workers, base.trainer
    if n == 1 or (t.num_nodes == 1 and parse_devices(t.devices) in ("auto", 1)):
        return
    what = (" (famlab compare's default" + (": one per visible GPU)" if len(gpus) > 1 else ")")) if defaulted else ""
    where = f"a GPU of its own among the {len(gpus)} visible" if gpus else "the CPU, its cores shared out"
    asked = f"trainer.num_nodes={t.num_nodes}" if t.num_nodes > 1 else f"trainer.devices={t.devices}"
    raise ConfigInputError(f"compare.workers={n}{what} runs every job in one process; it cannot run on {asked} (each "
                           f"worker process runs its jobs on one device, {where}): set trainer.devices=auto or 1, "
                           "or compare.workers=1 to run one job at a time on them")


def arm_name(family: str, objective: str, crossed: bool) -> str:
    """``<family>`` when the comparison has one preset arm per family, else ``<family>-<objective>``."""
    return f"{family}-{objective}" if crossed else family


def expand_arms(families: list[str], objectives: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """The (family, objective) arms of ``compare.objectives``, family-major in ``compare.families`` order.

    Args:
        families: ``compare.families`` (already checked: distinct, each bert / gpt / t5).
        objectives: ``compare.objectives`` entries: ``objective`` (every family that can train it) or
            ``family:objective`` (that family only); ``[]`` = one arm per family with its preset objective.

    Returns:
        (arms as (family, objective) with objective None = the family's preset, families that got no objective
        from the list and so keep their preset).

    Raises:
        ConfigInputError: one line naming ``compare.objectives`` and listing the valid pairs, for an
            unparsable entry, an unknown objective, one no family in ``compare.families`` can train, an
            invalid or foreign ``family:objective``, or a duplicate.
    """
    from famlab.objectives.registry import REGISTRY, families_of, valid_pairs

    if not objectives:
        return [(f, None) for f in families], []

    def fail(problem: str) -> ConfigInputError:
        return ConfigInputError(f"compare.objectives: {problem}; valid pairs: {valid_pairs()}")

    chosen: dict[str, list[str]] = {f: [] for f in families}
    seen: dict[tuple[str, str], str] = {}
    for entry in objectives:
        entry = str(entry).strip()
        family, sep, objective = entry.rpartition(":")
        if not objective or (sep and not family) or ":" in family:
            raise fail(f"cannot parse {entry!r} (expected objective or family:objective)")
        if not families_of(objective):
            raise fail(f"{objective!r} is not an objective")
        if sep and family not in families:
            raise fail(f"{entry!r} names {family!r}, which is not in compare.families={families}")
        if sep and objective not in REGISTRY[family]:
            raise fail(f"{entry!r} is not a valid pair")
        targets = [family] if sep else [f for f in families if objective in REGISTRY[f]]
        if not targets:
            raise fail(f"no family in compare.families={families} can train {objective!r}")
        for f in targets:
            if (f, objective) in seen:
                raise fail(f"{entry!r} repeats {f}:{objective} (already from {seen[f, objective]!r})")
            seen[f, objective] = entry
            chosen[f].append(objective)
    arms: list[tuple[str, str | None]] = []
    for f in families:
        arms += [(f, o) for o in chosen[f]] or [(f, None)]
    return arms, [f for f in families if not chosen[f]]


def subsample_task(cfg: Config, limit: int, path: Path, eval_limit: int | None = None) -> Path:
    """Write a seeded subsample of ``data.task`` as CSV: ``limit`` train examples, ``eval_limit`` (default
    ``limit // 5``) each val/test.

    Validation / test examples whose label the train subsample lacks are dropped (the task loader takes its
    label set from the training split). Every family fine-tunes and is tested on this same file.
    """
    import csv
    import random

    task = load_configured_task(cfg.data)
    rng = random.Random(cfg.data.seed)
    train = rng.sample(task.train, min(limit, len(task.train)))
    seen = {e.label for e in train}
    rows = [("train", e) for e in train]
    for split, examples in (("val", task.val), ("test", task.test)):
        keep = [e for e in examples if e.label in seen]
        want = eval_limit if eval_limit is not None else max(1, limit // 5)
        rows += [(split, e) for e in rng.sample(keep, min(want, len(keep)))]
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "text_pair", "label", "split"])
        for split, e in rows:
            w.writerow([e.text, e.text_pair or "", task.labels[e.label], split])
    return path


def _has_pairs(path: Path) -> bool:
    """Whether the subsample written by :func:`subsample_task` holds sentence pairs."""
    import csv

    with path.open(encoding="utf-8", newline="") as f:
        return any(row["text_pair"] for row in csv.DictReader(f))


def byte_scores(run_dir: Path, cfg: Config, texts: list[str], bundle: Any) -> dict[str, Any]:
    """Bits per byte (GPT, T5) or pseudo-log-likelihood bits per byte (BERT) on ``texts`` (validation documents)."""
    from famlab.experiments.commands.finetune import Init, load_network
    from famlab.objectives.evaluation import byte_score

    ckpt = run_dir / "checkpoints" / "last.ckpt"
    net, _ = load_network(cfg, Init("run", run_dir=run_dir, checkpoint=ckpt))
    net.eval()

    def encode(text: str) -> list[int]:
        return bundle.tokenizer.encode(text, add_special_tokens=False).ids

    score = byte_score(net, texts, encode, token_ids(bundle), objective=cfg.objective.name)
    if score.reason is not None:  # nothing scorable (every text empty or encoding to no tokens): say why
        raise ValueError(f"bits per byte: {score.reason}")
    scores = {"measure": score.measure, "value": score.value, "num_texts": score.num_texts,
              "num_bytes": score.num_bytes}
    return scores | ({"num_skipped": score.num_skipped} if score.num_skipped else {})


@dataclasses.dataclass
class PretrainedRun:
    """A comparison's pretraining run: its results and the config it ran with (fine-tunes start from both)."""

    result: PretrainResult
    cfg: Config

    @property
    def run_dir(self) -> Path:
        return Path(self.result.run_dir)


def _pretrain_one(
    cfg: Config, comp_dir: Path, group: str, tags: list[str], seed: int, suffix: str = "", arm: str | None = None,
    evaluate: Any = None,
) -> PretrainedRun:
    from famlab.experiments.commands.pretrain import pretrain

    run = copy.deepcopy(cfg)
    run.seed = seed
    run.run_dir = str(comp_dir / f"{arm or cfg.model.family.value}-pretrain-s{seed}{suffix}")
    run.name = Path(run.run_dir).name
    run.wandb.group = group
    run.wandb.tags = list(dict.fromkeys([*run.wandb.tags, *tags]))
    done = Path(run.run_dir) / "results.json"
    if run.resume == "auto" and done.is_file():  # finished before this comparison was stopped: read back
        return PretrainedRun(PretrainResult.from_json(json.loads(done.read_text(encoding="utf-8"))), run)
    return PretrainedRun(pretrain(run, evaluate=evaluate), run)


@dataclasses.dataclass
class Clock:
    """One job's wall time per phase, and the comparison's ``[done/total]`` progress lines.

    ``done`` is a counter shared by every worker process (a ``multiprocessing.Value``), so the lines count the whole
    comparison's jobs whichever process prints them.
    """

    started: float
    total_jobs: int
    done: Any
    phases: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def timed(self, phase: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn``, adding its wall time to ``phase`` (minus what nested timed calls already counted)."""
        t0, before = time.time(), sum(self.phases.values())
        try:
            return fn(*args, **kwargs)
        finally:
            self.phases[phase] += (time.time() - t0) - (sum(self.phases.values()) - before)

    def progress(self, what: str) -> None:
        with self.done.get_lock():
            self.done.value += 1
            done = self.done.value
        log(f"[{done}/{self.total_jobs}] {what} ({time.time() - self.started:.0f} s elapsed)")

    def fresh(self) -> Clock:
        """A clock for the next job: the same start and counter, no phase time yet."""
        return Clock(self.started, self.total_jobs, self.done)


@dataclasses.dataclass
class Comparison:
    """What every step of one comparison shares once its budget is planned."""

    base: Config
    cfgs: dict[str, Config]  # arm -> config
    comp_dir: Path
    bpb_texts: list[str]  # the validation documents scored for bits per byte
    bundle: Any  # the one tokenizer of every family
    suite: list[compare_suite.SuiteTask | None]  # [None]: one task, its runs in the compare directory itself
    plan: Plan
    clock: Clock
    gpus: tuple[str, ...] = ()  # the GPUs worker processes are spread over, one each (none: the CPU, or one process)
    started_workers: Any = None  # a shared counter: the index the next worker process to start takes

    @property
    def group(self) -> str:
        return self.comp_dir.name  # unique per invocation (name + timestamp): W&B groups never mix two comparisons

    @property
    def budget_tag(self) -> str:
        return f"budget-{self.base.compare.match.value}"


class Stopped(Exception):  # noqa: N818 - how a comparison ended, not an error of its own
    """A comparison that stopped after its directory was made: preempted, or a required job failed. Its finished jobs
    are on disk; ``famlab compare <same args> run_dir=<comp_dir> resume=auto`` continues it."""

    def __init__(self, comp_dir: Path, cause: BaseException, command: str) -> None:
        super().__init__(failures.one_line(cause))
        self.comp_dir, self.cause, self.command = comp_dir, cause, command


def run_compare(presets: list[str], overrides: list[str]) -> Path:
    """Run the whole comparison (or resume it: ``run_dir=`` + ``resume=auto``); returns the comparison directory.

    Raises:
        ConfigInputError: bad settings or data, found before any job runs (a new directory is then removed).
        Stopped: a stop signal, or a required job's failure, once jobs ran.
    """
    started = time.time()
    base, cfgs = compose_all(presets, overrides)
    specs = read_suite(base.data.task)  # None: one task
    compare_suite.check_tasks(base, specs)  # a bad task, suite or task_limit subsample fails before anything runs
    comp_dir, resumed = open_dir(base, cfgs)
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


def set_up(base: Config, cfgs: dict[str, Config], specs: list[Any] | None, comp_dir: Path, started: float,
           resumed: bool) -> Comparison:
    """The shared tokenizer, the tasks and the budget plan: what every job of the comparison reads."""
    corpus, bundle = share_tokenizer(base, cfgs, comp_dir, reuse=resumed)
    check_corpus_fits(cfgs, corpus, bundle)
    suite = prepare_tasks(base, cfgs, specs, comp_dir)
    plan = plan_budget(base, cfgs, token_ids(bundle))
    plan.tokenizer_hash = bundle.hash
    write_json(comp_dir / "plan.json", plan.to_json())
    log_plan(base, plan)
    clock = Clock(started, count_jobs(base, cfgs, suite), mp.get_context("spawn").Value("i", 0))
    gpus = tuple(visible_gpus(base.trainer.accelerator)) if base.compare.workers > 1 else ()
    if gpus:
        log(f"{base.compare.workers} workers side by side, one GPU each: "
            + ", ".join(f"worker {i} on GPU {worker_device(i, list(gpus))}" for i in range(base.compare.workers)))
    comparison = Comparison(base, cfgs, comp_dir, list(corpus.val[:base.compare.bpb_docs]), bundle, suite, plan, clock,
                            gpus, mp.get_context("spawn").Value("i", 0))
    del corpus  # each pretraining run loads its own; the parent of worker processes keeps only what they share
    return comparison


def check_corpus_fits(cfgs: dict[str, Config], corpus: Any, bundle: Any) -> None:
    """Each arm's token streams (written now, once, as its pretraining would) hold a batch of its blocks and a
    validation block: a corpus too small fails here in one line, before any baseline or pretraining runs."""
    from famlab.experiments.commands.pretrain import data_module

    for cfg in cfgs.values():
        data_module(copy.deepcopy(cfg), corpus, bundle)


def share_tokenizer(base: Config, cfgs: dict[str, Config], comp_dir: Path, reuse: bool = False) -> tuple[Any, Any]:
    """The corpus and one tokenizer for every arm (trained once, cached by corpus + settings), pointed at by each
    arm's config, with one W&B directory for the whole comparison; returns ``(corpus, bundle)``.

    ``reuse``: a resumed comparison keeps its own ``tokenizer.json`` (training is not bit-reproducible, and its
    models were trained with that one)."""
    shared = (comp_dir / "tokenizer.json").resolve()
    if reuse and shared.is_file():
        base.data.tokenizer.path = str(shared)
        corpus = prepared_corpus(base)  # the same streams, encoded with the comparison's own tokenizer
        bundle = get_bundle(base, corpus)
    else:
        corpus = prepared_corpus(base)  # streamed once into the cache (docs/data.md); a prepared directory as it is
        bundle = get_bundle(base, corpus, comp_dir)
    for cfg in cfgs.values():
        cfg.data.tokenizer.path = str(shared)
        cfg.wandb.dir = cfg.wandb.dir or str(comp_dir.resolve())
        set_vocab(cfg, bundle.vocab_size)
    return corpus, bundle


def prepare_tasks(
    base: Config, cfgs: dict[str, Config], specs: list[Any] | None, comp_dir: Path
) -> list[compare_suite.SuiteTask | None]:
    """The fine-tuning tasks: ``[None]`` for one task (subsampled to ``compare.task_limit`` into the compare
    directory, every arm's ``data.*`` pointed at it), else one prepared folder per suite task."""
    cmp = base.compare
    if specs is None:
        if cmp.task_limit:
            use_subsample(base, cfgs, comp_dir)
        return [None]
    suite = list(compare_suite.prepare_tasks(base, specs, comp_dir, _subsampler(cmp) if cmp.task_limit else None))
    log(f"suite of {len(specs)} tasks: {', '.join(s.name for s in specs)} (each in its own folder)")
    return suite


def use_subsample(base: Config, cfgs: dict[str, Config], comp_dir: Path) -> None:
    """Write ``task.csv`` (:func:`subsample_task`) and point every arm's ``data.*`` at it."""
    cmp = base.compare
    task_path = subsample_task(base, cmp.task_limit, comp_dir / "task.csv", cmp.task_eval_limit).resolve()
    log(f"fine-tuning task: {task_path} (seeded subsample of {base.data.task}, "
        f"compare.task_limit={cmp.task_limit}, compare.task_eval_limit={cmp.task_eval_limit})")
    for cfg in cfgs.values():
        d = cfg.data
        d.task, d.text_column, d.label_column, d.split_column = str(task_path), "text", "label", "split"
        d.text_pair_column = "text_pair" if _has_pairs(task_path) else None  # bundled pair tasks have no column key


def log_plan(base: Config, plan: Plan) -> None:
    for arm, p in plan.arms.items():
        log(
            f"budget {arm}: {p.steps} steps x {p.batch_shape}, {p.flops:.3e} FLOPs, "
            f"{p.corpus_tokens} corpus tokens, {p.non_embedding_params} non-embedding params"
        )
    cmp = base.compare
    log(f"budget spread on {cmp.match.value}: {plan.achieved_spread:.3%} (tolerance {cmp.tolerance:.0%})")


def scratch_configs(cfgs: dict[str, Config]) -> dict[str, Config]:
    """Family -> the config of its first arm: its scratch baseline (model size as budgeted; objective irrelevant)."""
    first: dict[str, Config] = {}
    for cfg in cfgs.values():
        first.setdefault(cfg.model.family.value, cfg)
    return first


def count_jobs(base: Config, cfgs: dict[str, Config], suite: list[Any]) -> int:
    """The progress lines the comparison will print: pretraining runs, probes, fine-tunes, scratch baselines."""
    cmp = base.compare
    per_seed = 1 + (bool(cmp.seeds) + cmp.probe) * len(suite)
    total = len(cfgs) * (len(cmp.pretrain_seeds) * per_seed + max(0, len(cmp.lr_grid) - 1))
    return total + len(scratch_configs(cfgs)) * bool(cmp.scratch_seeds) * len(suite)


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
    cfg: Config | None = None  # ``pretrain``: the arm's config when it changed after the workers started (lr tuned)


@dataclasses.dataclass
class Done:
    """What a job hands back: its phase times, and for ``pretrain`` the run (and, tuned, the chosen lr's config)."""

    phases: dict[str, float]
    run: PretrainedRun | None = None
    tuned: tuple[Config, Any] | None = None  # (the arm's config with its lr, its plan entry)


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
    pool = workers.executor(c.base.compare.workers, _start_worker, c)
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
                    except cf.process.BrokenProcessPool:
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
    except cf.process.BrokenProcessPool as e:
        workers.stop(pool)
        raise RuntimeError(f"a compare worker process died (killed by the system, perhaps out of memory; its jobs' "
                           f"run directories keep what they wrote): rerun with fewer compare.workers (now "
                           f"{c.base.compare.workers})") from e
    except BaseException:
        workers.stop(pool)
        raise
    finally:
        _start_worker(None)
    pool.shutdown(wait=True)
    halt.outcome(c.comp_dir)


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
    budget they tie, and keep the arms' order: on 2 cores the three tiny families took 262-273 s each)."""
    return sorted(c.cfgs, key=lambda arm: c.plan.arms[arm].flops, reverse=True)


def follow_ups(c: Comparison, job: Job, done: Done) -> list[Job]:
    """The jobs a finished one lets start: after pretraining, its transfers (and, once an arm's lr is tuned, the
    arm's other seeds with that lr, in this process's configs and ``plan.json``)."""
    if job.kind != "pretrain":
        return []
    jobs = []
    if done.tuned is not None:
        c.cfgs[job.arm], c.plan.arms[job.arm] = done.tuned
        write_json(c.comp_dir / "plan.json", c.plan.to_json())
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


def place_worker(c: Comparison) -> str | None:
    """In a worker process (``compare.workers`` > 1) on a machine with GPUs: take the next worker index and see only
    that worker's GPU (``CUDA_VISIBLE_DEVICES``, before CUDA starts; ``trainer.devices=auto`` then means it alone).
    Returns the GPU, or None (the CPU, or the comparison's own process)."""
    if not c.gpus or c.base.compare.workers == 1 or c.started_workers is None:
        return None
    with c.started_workers.get_lock():
        index = c.started_workers.value
        c.started_workers.value += 1
    gpu = worker_device(index, list(c.gpus))
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return gpu


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
        scratch_baseline(c, scratch_configs(c.cfgs)[job.arm], c.suite[job.task])
        return Done(c.clock.phases)
    cfg = job.cfg or c.cfgs[job.arm]  # a worker's copy of the configs is the one it started with
    if job.kind == "transfer":
        assert job.run is not None
        transfer_to(c, c.suite[job.task], job.arm, job.seed, job.run, arm_tags(c, cfg))
        return Done(c.clock.phases)
    tuned = None
    if job.tune:
        cfg = copy.deepcopy(cfg)
        run = tune_lr(c, job.arm, cfg, arm_tags(c, cfg))
        tuned = (cfg, c.plan.arms[job.arm])
    else:
        run = pretrain_seed(c, job.arm, cfg, arm_tags(c, cfg), job.seed)
    evaluate_pretrained(c, job.arm, job.seed, run)
    return Done(c.clock.phases, run, tuned)


def arm_tags(c: Comparison, cfg: Config) -> list[str]:
    return [cfg.model.family.value, str(cfg.objective.name), c.budget_tag, "compare"]


def tune_lr(c: Comparison, arm: str, cfg: Config, tags: list[str]) -> PretrainedRun:
    """``compare.lr_grid``: pretrain the first seed at each lr and keep the lr with the lowest final validation
    loss (in ``cfg`` and ``plan.json``); returns the run at that lr, which stands for the first seed."""
    cmp = c.base.compare
    tried = []
    for lr in cmp.lr_grid:
        trial = copy.deepcopy(cfg)
        trial.optim.lr, trial.optim.lr_scale = lr, 1.0
        r = c.clock.timed("pretraining", _pretrain_one,
                          trial, c.comp_dir, c.group, [*tags, "lr-tune"], cmp.pretrain_seeds[0], f"-lr{lr:g}", arm)
        tried.append((r.result.final.get("val/loss", float("inf")), lr, r))
        c.clock.progress(f"lr {lr:g} {arm}: val/loss {r.result.final.get('val/loss')}")
    best_loss, best_lr, _ = min(tried, key=lambda t: t[0])
    cfg.optim.lr, cfg.optim.lr_scale = best_lr, 1.0
    c.plan.arms[arm].lr_grid = {f"{lr:g}": loss for loss, lr, _ in tried}
    c.plan.arms[arm].lr = best_lr
    log(f"{arm}: pretraining lr {best_lr:g} (val/loss {best_loss:.4f})")
    return next(r for _, lr, r in tried if lr == best_lr)


def pretrain_seed(c: Comparison, arm: str, cfg: Config, tags: list[str], seed: int) -> PretrainedRun:
    """Pretrain the arm with ``seed``, scoring bits per byte while its W&B run is open (an optional step)."""

    def evaluate(run_dir: Path, run_cfg: Config) -> dict[str, Any] | None:
        return failures.optional(c.comp_dir, StepFailure(step="evaluation", arm=arm, seed=seed), c.clock.timed,
                                 "evaluation", byte_scores, run_dir, run_cfg, c.bpb_texts, c.bundle, say=log)

    run = c.clock.timed("pretraining", _pretrain_one, cfg, c.comp_dir, c.group, tags, seed, arm=arm,
                        evaluate=evaluate)
    c.clock.progress(f"pretrain {arm} seed {seed}: val/loss {run.result.final.get('val/loss')}")
    return run


def evaluate_pretrained(c: Comparison, arm: str, seed: int, run: PretrainedRun) -> None:
    """Bits per byte and the bundled zero-shot tasks of a pretrained model, into its ``eval.json`` (both optional:
    a failure is recorded and the comparison goes on; a resumed comparison retries only failed evaluations)."""
    steps = {"evaluation": "byte_score", "zero-shot": "zero_shot"}
    path = run.run_dir / "eval.json"
    failed = {f.step for f in read_failures(c.comp_dir) if f.arm == arm and f.seed == seed and f.step in steps}
    evaluated = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if path.is_file() and not failed:
        return  # evaluated before this comparison was stopped
    if "byte_score" not in evaluated and not ("evaluation" in failed and not path.is_file()):  # not just failed
        evaluated["byte_score"] = run.result.byte_score or failures.optional(
            c.comp_dir, StepFailure(step="evaluation", arm=arm, seed=seed), c.clock.timed, "evaluation",
            byte_scores, run.run_dir, run.cfg, c.bpb_texts, c.bundle, say=log)
    if "zero_shot" not in evaluated:
        evaluated["zero_shot"] = failures.optional(
            c.comp_dir, StepFailure(step="zero-shot", arm=arm, seed=seed), c.clock.timed, "evaluation",
            zero_shot_scores, run.run_dir, limit=c.base.compare.zero_shot_items, say=log)
    evaluated = {k: v for k, v in evaluated.items() if v is not None}
    write_json(path, evaluated)
    if "byte_score" in evaluated:
        log(f"{arm} seed {seed}: {evaluated['byte_score']['measure']} {evaluated['byte_score']['value']:.4f}")


def transfer_to(
    c: Comparison, task: compare_suite.SuiteTask | None, arm: str, seed: int, run: PretrainedRun, tags: list[str]
) -> None:
    """Probe (``compare.probe``, optional) and fine-tune (``compare.seeds``) one pretrained model on one task."""
    cmp = c.base.compare
    where, on = _task_place(c.comp_dir, task), _task_tag(task)
    task_cfg = compare_suite.task_config(run.cfg, task)
    if cmp.probe:
        probe_dir = where / f"{arm}-probe-s{seed}"
        r = read_done(probe_dir) or failures.optional(
            c.comp_dir, StepFailure(step="probe", arm=arm, seed=seed, task=task.spec.name if task else None),
            c.clock.timed, "probes", _probe, task_cfg, str(run.run_dir), probe_dir, c.group, [*tags, *on], say=log)
        result = (f"test/acc {r['pretrained']['test']['test/acc']:.3f} vs random-init "
                  f"{r['random_mean']['test/acc']:.3f}" if r is not None else "failed")
        c.clock.progress(f"probe {arm}{_task_note(task)} (pretrained seed {seed}): {result}")
    if cmp.seeds:
        ft = c.clock.timed("fine-tuning", _finetune, task_cfg, str(run.run_dir), where / f"{arm}-ft-s{seed}",
                           list(cmp.seeds), c.group, [*tags, *on])
        c.clock.progress(f"fine-tune {arm}{_task_note(task)} (pretrained seed {seed}) seeds {list(cmp.seeds)}: "
                         f"test/acc {ft.mean['test/acc']:.3f}")


def read_done(run_dir: Path) -> dict[str, Any] | None:
    """A finished run's ``results.json`` (a resumed comparison reads it back instead of running it again)."""
    path = run_dir / "results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def scratch_baseline(c: Comparison, cfg: Config, task: compare_suite.SuiteTask | None) -> None:
    """Fine-tune the family's network from scratch on ``task`` (``compare.scratch_seeds``)."""
    cmp = c.base.compare
    family = cfg.model.family.value
    # the objective tag only where it is the family's single (preset) objective, as before arms existed
    objective_tag = [] if cmp.objectives else [str(cfg.objective.name)]
    ft = c.clock.timed("fine-tuning", _finetune, compare_suite.task_config(cfg, task), "scratch",
                       _task_place(c.comp_dir, task) / f"{family}-scratch", list(cmp.scratch_seeds), c.group,
                       [family, *objective_tag, c.budget_tag, "compare", "scratch", *_task_tag(task)])
    c.clock.progress(f"fine-tune {family} from scratch{_task_note(task)} seeds {list(cmp.scratch_seeds)}: "
                     f"test/acc {ft.mean['test/acc']:.3f}")


def finish(c: Comparison, presets: list[str], overrides: list[str]) -> None:
    """``compare.json`` (wall time, and the jobs' time per phase summed over workers), the report and its W&B run."""
    from famlab.experiments.analysis.report import build_report

    wall = time.time() - c.clock.started
    n = c.base.compare.workers
    (c.comp_dir / "compare.json").write_text(
        json.dumps({"wall_s": round(wall, 1), "phases": {k: round(v, 1) for k, v in c.clock.phases.items()},
                    "workers": n, "threads": workers.threads_per_worker(n) if n > 1 else None,
                    "presets": presets, "overrides": overrides}, indent=2) + "\n"
    )
    build_report([c.comp_dir], c.comp_dir)
    failures.optional(c.comp_dir, StepFailure(step="W&B report"), log_report_run, c.base, c.comp_dir, group=c.group,
                      name=f"{c.comp_dir.name}-report", sources=pretraining_dirs(c.comp_dir), say=log)
    log(f"done in {time.time() - c.clock.started:.0f} s: {c.comp_dir / 'report.md'}")


def _subsampler(cmp: Any) -> compare_suite.Subsample:
    """Writes one suite task's subsample as :func:`subsample_task` does the single task's; returns its ``data.*``."""

    def subsample(cfg: Config, path: Path) -> dict[str, str | None]:
        path = subsample_task(cfg, cmp.task_limit, path, cmp.task_eval_limit).resolve()
        return {"task": str(path), "text_column": "text", "label_column": "label", "split_column": "split",
                "text_pair_column": "text_pair" if _has_pairs(path) else None}

    return subsample


def _task_place(comp_dir: Path, task: compare_suite.SuiteTask | None) -> Path:
    """Where a task's fine-tunes and probes go: the compare directory (one task) or the task's folder."""
    return comp_dir if task is None else task.dir


def _task_tag(task: compare_suite.SuiteTask | None) -> list[str]:
    return [] if task is None else [f"task-{task.spec.name}"]


def _task_note(task: compare_suite.SuiteTask | None) -> str:
    return "" if task is None else f" on {task.spec.name}"


def _finetune(cfg: Config, init: str, run_dir: Path, seeds: list[int], group: str, tags: list[str]) -> FinetuneResult:
    from famlab.experiments.commands.finetune import finetune, parse_init

    ft = copy.deepcopy(cfg)
    ft.init = init
    ft.run_dir = str(run_dir)
    ft.name = run_dir.name
    ft.finetune.seeds = seeds
    ft.wandb.group = group
    ft.wandb.tags = list(dict.fromkeys([*ft.wandb.tags, *tags]))
    return finetune(ft, parse_init(init))


def _probe(cfg: Config, init: str, run_dir: Path, group: str, tags: list[str]) -> dict:
    from famlab.experiments.commands.finetune import parse_init
    from famlab.experiments.commands.probe import probe

    pr = copy.deepcopy(cfg)
    pr.init, pr.run_dir, pr.name = init, str(run_dir), run_dir.name
    pr.wandb.group = group
    pr.wandb.tags = list(dict.fromkeys([*pr.wandb.tags, *tags, "probe"]))
    return probe(pr, parse_init(init))


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab compare [--dry-run] [presets...] [key=value...]``.

    Exit status: 0 done; 2 bad settings or data (one line); 3 stopped by a signal, checkpoints written; 1 a required
    job failed (one line here, the traceback in ``compare.log``). After a stop the last line is the resume command.
    ``--dry-run`` prints what would run (:func:`dry_run`) and exits 0, or 2 on bad settings, having run nothing.
    """
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
          f"{comp_dir / 'report.md'}")
    print_wandb_commands(comp_dir)
    return 0


def verdict(comp_dir: Path) -> str:
    """The report's "What pretraining bought" section (its gains table and verdict), for the console's last lines."""
    md = (comp_dir / "report.md").read_text(encoding="utf-8")
    head, found, rest = md.partition("## What pretraining bought")
    if not found:
        return ""
    return (found + re.split(r"\n#{2,3} ", rest, maxsplit=1)[0]).rstrip()


def dry_run(presets: list[str], overrides: list[str]) -> int:
    """``famlab compare --dry-run``: print what ``famlab compare`` with these arguments would run - the presets and
    defaults it composes, every key of the composed config, the budget plan and the jobs - and run nothing: no
    directory, tokenizer, corpus cache or W&B run. Settings and the task are checked as a real start checks them."""
    from famlab.experiments.commands.compare_budget import assumed_ids, job_lines, plan_lines
    from famlab.experiments.plumbing.run import set_vocab

    names, defaults, _, gpus = compose_base(presets, overrides)
    base, cfgs = compose_all(presets, overrides)
    specs = read_suite(base.data.task)  # None: one task
    compare_suite.check_tasks(base, specs)
    config = config_lines(cfgs, defaults, planned=base.compare.match.value != "params")
    for cfg in cfgs.values():
        set_vocab(cfg, cfg.data.tokenizer.vocab_size)
    plan = plan_budget(base, cfgs, assumed_ids(base))
    cmp = base.compare
    tasks: list[str | None] = [None] if specs is None else [s.name for s in specs]
    jobs = job_lines(base, cfgs, plan, tasks)
    task = (f"{base.data.task}" + (f", suite of {len(tasks)} tasks: {', '.join(map(str, tasks))}" if specs else "")
            + (f"; a seeded subsample of {cmp.task_limit} training examples (compare.task_limit) and "
               f"{cmp.task_eval_limit or cmp.task_limit // 5} each for validation and test" if cmp.task_limit else ""))
    out = ["famlab compare --dry-run: nothing runs; `famlab compare` with these arguments would run this",
           f"presets: {' '.join(names)}",
           "famlab compare's defaults" + (f" (a key you set wins): {' '.join(defaults)}" if defaults else ": none"),
           f"workers: {workers_note(cmp.workers, gpus)}",
           f"fine-tuning task: data.task={task}",
           "runs go to: " + (f"run_dir={base.run_dir}" if base.run_dir else "runs/compare-<name>-<YYYYmmdd-HHMMSS>/")
           + (" (resume=auto: its finished jobs are read back, not rerun)" if base.resume == "auto" else ""),
           "", *config, "", *plan_lines(base, cfgs, plan), "",
           f"jobs ({len(jobs)}, compare.workers={cmp.workers} at a time, in this order; a model's probe and fine-tunes"
           " start once it is pretrained):", *(f"  {i}. {line}" for i, line in enumerate(jobs, 1))]
    print("\n".join(out))
    return 0


def workers_note(n: int, gpus: list[str]) -> str:
    """How ``compare.workers`` jobs run side by side on this machine (``--dry-run``)."""
    if n == 1:
        return "1: one job at a time, in this process"
    if gpus:
        return f"{n} side by side, one GPU each: " + ", ".join(
            f"worker {i} on GPU {worker_device(i, gpus)}" for i in range(n))
    return f"{n} side by side on the CPU (torch threads: {workers.threads_per_worker(n)} each)"


def config_lines(cfgs: dict[str, Config], defaults: list[str], planned: bool = True) -> list[str]:
    """Every key of the arms' composed config as ``key: value`` (schema order), the keys that differ between arms
    listed per arm; a comment marks a key one of ``defaults`` set and, with ``planned`` (a FLOP- or token-matched
    budget), the keys the budget plan sets per arm. A start sets the tokenizer, vocabulary, task file and W&B group."""
    from famlab.experiments.configuration.compose import flatten, to_plain

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


def _shown(value: Any) -> str:
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


def zero_shot_scores(run_dir: Path, limit: int | None = None) -> dict[str, Any]:
    """Both bundled tasks for one pretraining run: {task: results} (as ``famlab eval`` writes them)."""
    tasks = {name: read_items(path)[:limit] for name, path in BUNDLED.items()}
    return evaluate_run(run_dir, tasks)
