"""A comparison's state and set-up: the arms' configs composed, the shared tokenizer, the tasks, the budget plan and
the clock every job writes its phase times to (:class:`Comparison`); the jobs are :mod:`.compare_jobs`, run by
:mod:`.schedule`."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import multiprocessing as mp
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from famlab.datamodules.prepare import PreparedDataset
from famlab.datamodules.suite import TaskSpec
from famlab.datamodules.tokenizer import TokenizerBundle
from famlab.experiments.analysis.results import Plan, PretrainResult
from famlab.experiments.configuration.compare_defaults import (
    WORKERS,
    comparison_presets,
    user_keys,
    visible_gpus,
)
from famlab.experiments.configuration.compose import compose, parse_overrides
from famlab.experiments.configuration.config import CompareConfig, ConfigInputError, DataConfig, with_values
from famlab.experiments.configuration.placement import Placement, devices_per_job, place
from famlab.experiments.configuration.plans import ComparePlan
from famlab.experiments.configuration.specs import arm_objective
from famlab.experiments.configuration.task import load_configured_task
from famlab.experiments.plumbing import failures
from famlab.experiments.plumbing.data_cache import get_bundle, prepared_corpus, token_ids, with_vocab
from famlab.experiments.plumbing.rundir import CompareDir, write_json
from famlab.experiments.steps import compare_suite
from famlab.experiments.steps.compare_budget import plan_budget
from famlab.experiments.steps.compare_dir import log
from famlab.experiments.steps.pretrain import data_module
from famlab.families.registry import family_names
from famlab.objectives.registry import REGISTRY, families_of, valid_pairs

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized

T = TypeVar("T")

PHASES = ("pretraining", "evaluation", "fine-tuning", "probes")  # compare.json's wall time split
STATUS_DIR = "jobs"  # each job's status file, for the live view

def compose_all(presets: list[str], overrides: list[str]) -> tuple[ComparePlan, dict[str, ComparePlan]]:
    """The comparison's own config (first family) and one composed config per arm, keyed by arm name.

    Arms come from ``compare.families`` x ``compare.objectives`` (:func:`expand_arms`), in family order. With no size
    preset the tiny comparison's defaults apply, one worker per GPU on a machine with several
    (:mod:`famlab.experiments.configuration.compare_defaults`).
    """
    presets, defaults, base, _ = compose_base(presets, overrides)
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
    if base.compare.scratch_seeds is None:
        base = with_values(base, {"compare.scratch_seeds": list(base.compare.seeds)})
    cfgs: dict[str, ComparePlan] = {}
    given_own: set[str] = set()  # objective.<key> settings of registered objectives' own (Entry.own)
    for family, objective in pairs:
        # objective.name follows each family's preset unless the user fixed it or compare.objectives names one
        chosen = [f"objective.name={objective}"] if objective else []
        composed = compose([family, *family_free], [*defaults, *overrides, *chosen], others_own=True)
        cfg = composed.cfg
        given_own |= {str(k) for k in composed.raw.objective.own}
        fixed: dict[str, Any] = {"compare.scratch_seeds": list(base.compare.scratch_seeds or [])}
        if "finetune.lr_grid" not in user_flat:  # the protocol's grid at every scale, around the preset's body lr
            lr = cfg.finetune.lr
            fixed["finetune.lr_grid"] = [lr / 3, lr, lr * 3] if base.compare.finetune_lr_points == 3 else [lr, lr * 3]
        cfg = with_values(cfg, fixed)
        cfgs[arm_name(family, str(cfg.objective.name), bool(base.compare.objectives))] = cfg
    _check_own_settings_used(given_own, cfgs)
    if not base.compare.seeds and not base.compare.scratch_seeds:
        raise ConfigInputError("compare.seeds and compare.scratch_seeds are both empty: nothing to fine-tune")
    if not base.compare.pretrain_seeds:
        raise ConfigInputError("compare.pretrain_seeds=[] must name at least one seed")
    return base, cfgs


def _check_own_settings_used(given: set[str], cfgs: dict[str, ComparePlan]) -> None:
    """An objective's own setting reaches the arms whose objective declares it; one that no arm's objective declares
    is refused in one line, naming it and each arm's objective with its own settings."""
    unused = sorted(given - {key for cfg in cfgs.values() for key in cfg.objective.own})
    if unused:
        arms = "; ".join(f"{arm}: {cfg.objective.name} ({', '.join(cfg.objective.own) or 'none'})"
                         for arm, cfg in cfgs.items())
        raise ConfigInputError(f"objective.{unused[0]} is a setting of no arm's objective (their own settings: {arms})")


def compose_base(presets: list[str], overrides: list[str]) -> tuple[list[str], list[str], ComparePlan, Placement]:
    """The presets the comparison composes, the tiny comparison's defaults that apply
    (:func:`~famlab.experiments.configuration.compare_defaults.comparison_presets`), the comparison's own config (no
    family preset), and where its jobs run (:mod:`famlab.experiments.configuration.placement`): on a node of N >= 2
    visible GPUs, when the user set no ``compare.workers``, ``N // k`` workers of ``k`` devices per job, whatever the
    preset (a ``compare.workers`` default of ``N // k`` joins the defaults, so ``--dry-run`` marks it)."""
    parse_overrides(overrides)  # malformed tokens fail here, naming the token
    presets, defaults = comparison_presets(presets, overrides)
    family_free = [p for p in presets if p not in family_names()]
    base = compose(family_free, [*defaults, *overrides], others_own=True).cfg
    gpus = visible_gpus(base.trainer.accelerator)
    workers_set = WORKERS in user_keys(presets, overrides)
    if len(gpus) >= 2 and not workers_set:
        per_gpu = max(1, len(gpus) // devices_per_job(base.trainer, tuple(gpus)))
        defaults = [d for d in defaults if not d.startswith(f"{WORKERS}=")] + [f"{WORKERS}={per_gpu}"]
        base = compose(family_free, [*defaults, *overrides], others_own=True).cfg
    placement = place(base.trainer, base.compare.workers, gpus)
    if base.compare.launcher != "local" and importlib.util.find_spec("submitit") is None:
        raise ConfigInputError(f"compare.launcher={base.compare.launcher} needs submitit: pip install 'famlab[slurm]'")
    return presets, defaults, base, placement


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


def subsample_task(data: DataConfig, limit: int, path: Path, eval_limit: int | None = None) -> Path:
    """Write a seeded subsample of ``data.task`` as CSV: ``limit`` train examples, ``eval_limit`` (default
    ``limit // 5``) each val/test.

    Validation / test examples whose label the train subsample lacks are dropped (the task loader takes its
    label set from the training split). Every family fine-tunes and is tested on this same file.
    """
    import csv
    import random

    task = load_configured_task(data)
    rng = random.Random(data.seed)
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


@dataclasses.dataclass
class PretrainedRun:
    """A comparison's pretraining run: its results and the config it ran with (fine-tunes start from both)."""

    result: PretrainResult
    cfg: ComparePlan

    @property
    def run_dir(self) -> Path:
        """Where the run is now: its place in this comparison's directory. The ``run_dir`` its ``results.json``
        recorded may be relative to the directory the comparison started in, which a resume need not share."""
        return Path(self.cfg.run_dir).expanduser() if self.cfg.run_dir else Path(self.result.run_dir)


@dataclasses.dataclass
class Clock:
    """One job's wall time per phase, and the comparison's ``[done/total]`` progress lines.

    ``done`` is a counter shared by every worker process (a ``multiprocessing.Value``), so the lines count the whole
    comparison's jobs whichever process prints them.
    """

    started: float
    total_jobs: int
    done: Synchronized[int] | _Count
    phases: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    def timed(self, phase: str, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
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

    def detached(self) -> Clock:
        """A clock for a job on another machine (a submitit job): the same start, its own count from the jobs done so
        far (a shared counter does not cross machines)."""
        return Clock(self.started, self.total_jobs, _Count(self.done.value))


class _Count:
    """A counter with ``multiprocessing.Value``'s interface, for one process."""

    def __init__(self, value: int) -> None:
        self.value = value

    def get_lock(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


@dataclasses.dataclass
class Comparison:
    """What every step of one comparison shares once its budget is planned."""

    base: ComparePlan
    cfgs: dict[str, ComparePlan]  # arm -> config
    comp_dir: Path
    bpb_texts: list[str]  # the validation documents scored for bits per byte
    bundle: TokenizerBundle  # the one tokenizer of every family
    suite: list[compare_suite.SuiteTask | None]  # [None]: one task, its runs in the compare directory itself
    plan: Plan
    clock: Clock
    placement: Placement = Placement(1, 1)  # workers side by side and each job's devices
    # a shared counter: the index the next worker process to start takes
    started_workers: Synchronized[int] | None = None

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


def set_up(base: ComparePlan, cfgs: dict[str, ComparePlan], specs: list[TaskSpec] | None, comp_dir: Path,
           started: float, resumed: bool) -> Comparison:
    """The shared tokenizer, the tasks and the budget plan: what every job of the comparison reads."""
    data, cfgs, corpus, bundle = share_tokenizer(base.data, cfgs, comp_dir, reuse=resumed)
    base = with_values(base, {"data": data})
    check_corpus_fits(cfgs, corpus, bundle)
    cfgs, suite = prepare_tasks(base.compare, base.data, cfgs, specs, comp_dir)
    plan, cfgs = plan_budget(base.compare, base.trainer, base.data, cfgs, token_ids(bundle))
    plan.tokenizer_hash = bundle.hash
    write_json(CompareDir(comp_dir).plan_file, plan.to_json())
    log_plan(base.compare, plan)
    clock = Clock(started, count_jobs(base.compare, cfgs, suite), mp.get_context("spawn").Value("i", 0))
    placement = place(base.trainer, base.compare.workers, visible_gpus(base.trainer.accelerator))
    for line in placement.lines():
        log(line)
    comparison = Comparison(base, cfgs, comp_dir, list(corpus.val[:base.compare.bpb_docs]), bundle, suite, plan, clock,
                            placement, mp.get_context("spawn").Value("i", 0))
    del corpus  # each pretraining run loads its own; the parent of worker processes keeps only what they share
    return comparison


def check_corpus_fits(cfgs: dict[str, ComparePlan], corpus: PreparedDataset, bundle: TokenizerBundle) -> None:
    """Each arm's token streams (written now, once, as its pretraining would) hold a batch of its blocks and a
    validation block: a corpus too small fails here in one line, before any baseline or pretraining runs."""
    for cfg in cfgs.values():
        data_module(cfg.data, cfg.trainer, arm_objective(cfg, token_ids(bundle)), corpus, bundle)


def share_tokenizer(data: DataConfig, cfgs: dict[str, ComparePlan], comp_dir: Path, reuse: bool = False
                    ) -> tuple[DataConfig, dict[str, ComparePlan], PreparedDataset, TokenizerBundle]:
    """The corpus and one tokenizer for every arm (trained once, cached by corpus + settings), from the comparison's
    ``data.*``; returns the settings and configs pointed at it (each arm's with the tokenizer's vocabulary and one W&B
    directory for the whole comparison), the corpus and the tokenizer: ``(data, cfgs, corpus, bundle)``.

    ``reuse``: a resumed comparison keeps its own ``tokenizer.json`` (training is not bit-reproducible, and its
    models were trained with that one)."""
    shared = CompareDir(comp_dir).tokenizer_file.resolve()
    if reuse and shared.is_file():
        data = with_values(data, {"tokenizer.path": str(shared)})
        corpus = prepared_corpus(data)  # the same streams, encoded with the comparison's own tokenizer
        bundle = get_bundle(data, corpus)
    else:
        corpus = prepared_corpus(data)  # once into the cache (docs/data.md); a prepared dir as it is
        bundle = get_bundle(data, corpus, comp_dir)
    shared_cfgs = {arm: with_vocab(with_values(cfg, {
        "data.tokenizer.path": str(shared), "wandb.dir": cfg.wandb.dir or str(comp_dir.resolve())}), bundle.vocab_size)
        for arm, cfg in cfgs.items()}
    return data, shared_cfgs, corpus, bundle


def prepare_tasks(
    cmp: CompareConfig, data: DataConfig, cfgs: dict[str, ComparePlan], specs: list[TaskSpec] | None, comp_dir: Path
) -> tuple[dict[str, ComparePlan], list[compare_suite.SuiteTask | None]]:
    """The arms' configs and the fine-tuning tasks: ``[None]`` for one task (subsampled to ``compare.task_limit``
    into the compare directory, every arm's ``data.*`` pointed at it), else one prepared folder per suite task.
    ``cmp`` and ``data`` are the comparison's ``compare.*`` and ``data.*``."""
    if specs is None:
        return (use_subsample(cmp, data, cfgs, comp_dir) if cmp.task_limit else cfgs), [None]
    subsample = _subsampler(cmp) if cmp.task_limit else None
    suite: list[compare_suite.SuiteTask | None] = list(compare_suite.prepare_tasks(data, specs, comp_dir, subsample))
    log(f"suite of {len(specs)} tasks: {', '.join(s.name for s in specs)} (each in its own folder)")
    return cfgs, suite


def use_subsample(cmp: CompareConfig, data: DataConfig, cfgs: dict[str, ComparePlan], comp_dir: Path
                  ) -> dict[str, ComparePlan]:
    """Write ``task.csv`` (:func:`subsample_task` of ``data.task``); returns every arm's config with its ``data.*``
    pointed at it."""
    assert cmp.task_limit is not None, "use_subsample without compare.task_limit"
    task_path = subsample_task(data, cmp.task_limit, comp_dir / "task.csv", cmp.task_eval_limit).resolve()
    log(f"fine-tuning task: {task_path} (seeded subsample of {data.task}, "
        f"compare.task_limit={cmp.task_limit}, compare.task_eval_limit={cmp.task_eval_limit})")
    columns = {"data.task": str(task_path), "data.text_column": "text", "data.label_column": "label",
               "data.split_column": "split",
               "data.text_pair_column": "text_pair" if _has_pairs(task_path) else None}  # bundled pairs: no column key
    return {arm: with_values(cfg, columns) for arm, cfg in cfgs.items()}


def log_plan(cmp: CompareConfig, plan: Plan) -> None:
    for arm, p in plan.arms.items():
        log(
            f"budget {arm}: {p.steps} steps x {p.batch_shape}, {p.flops:.3e} FLOPs, "
            f"{p.corpus_tokens} corpus tokens, {p.non_embedding_params} non-embedding params"
        )
    log(f"budget spread on {cmp.match.value}: {plan.achieved_spread:.3%} (tolerance {cmp.tolerance:.0%})")


def scratch_configs(cfgs: dict[str, ComparePlan]) -> dict[str, ComparePlan]:
    """Family -> the config of its first arm: its scratch baseline (model size as budgeted; objective irrelevant)."""
    first: dict[str, ComparePlan] = {}
    for cfg in cfgs.values():
        first.setdefault(cfg.model.family.value, cfg)
    return first


def count_jobs(cmp: CompareConfig, cfgs: dict[str, ComparePlan], suite: list[compare_suite.SuiteTask | None]) -> int:
    """The progress lines the comparison will print: pretraining runs, probes, fine-tunes, scratch baselines."""
    per_seed = 1 + (bool(cmp.seeds) + cmp.probe) * len(suite)
    total = len(cfgs) * (len(cmp.pretrain_seeds) * per_seed + max(0, len(cmp.lr_grid) - 1))
    return total + len(scratch_configs(cfgs)) * bool(cmp.scratch_seeds) * len(suite)


def _subsampler(cmp: CompareConfig) -> compare_suite.Subsample:
    """Writes one suite task's subsample as :func:`subsample_task` does the single task's; returns its ``data.*``."""
    limit = cmp.task_limit
    assert limit is not None, "_subsampler without compare.task_limit"

    def subsample(data: DataConfig, path: Path) -> dict[str, str | None]:
        path = subsample_task(data, limit, path, cmp.task_eval_limit).resolve()
        return {"task": str(path), "text_column": "text", "label_column": "label", "split_column": "split",
                "text_pair_column": "text_pair" if _has_pairs(path) else None}

    return subsample
