"""A comparison's budget plan: every arm's steps (or size) so that all arms spend the same training FLOPs, corpus
tokens or non-embedding parameters (``compare.match``), stated as a :class:`~famlab.experiments.analysis.results.Plan`
(``plan.json``). The cost models are :mod:`famlab.experiments.configuration.budget`'s.

The plan also says what it costs and how often it reads its data: the passes each arm makes over the prepared
corpus's training split (read from the prepared corpus's files when it is prepared: nothing is read or prepared to
find them), and, in ``--dry-run``, each pretraining job's time from its planned FLOPs on the device it will run on.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import torch
from famlab.datamodules.errors import DataError
from famlab.datamodules.prepare import MANIFEST, is_prepared_dir, prepared_location
from famlab.experiments.analysis.results import ArmBudget, Plan
from famlab.experiments.configuration.budget import (
    BudgetError,
    StepCost,
    count_params,
    match_steps,
    relative_spread,
    solve_params,
    step_cost,
)
from famlab.experiments.configuration.config import (
    CompareConfig,
    DataConfig,
    FinetuneConfig,
    TrainerConfig,
    with_values,
)
from famlab.experiments.configuration.placement import Placement
from famlab.experiments.configuration.plans import ComparePlan
from famlab.experiments.configuration.specs import arm_objective
from famlab.experiments.perf.hardware import peak_flops, precision_dtype
from famlab.experiments.plumbing.data_cache import cache_dir, prepare_settings
from famlab.experiments.plumbing.trainer import precision
from famlab.experiments.plumbing.workers import cores
from famlab.experiments.steps.finetune import grid_points
from famlab.families.config import ModelConfig
from famlab.objectives import TokenIds


def plan_budget(cmp: CompareConfig, reference: TrainerConfig, data: DataConfig, cfgs: dict[str, ComparePlan],
                ids: TokenIds) -> tuple[Plan, dict[str, ComparePlan]]:
    """Match the budget across arms (steps or sizes); returns the plan the report states and each arm's config with
    its budget (the configs given are left as they are).

    ``cmp`` is the comparison's ``compare.*``; ``reference`` its ``trainer.*`` (``max_steps`` of the median-cost arm
    and the validation checks the arms keep); ``data`` its ``data.*`` (the corpus whose passes the plan counts).

    ``cfgs`` maps arm names to configs (:func:`compose_all`); so do ``plan.arms`` and the configs returned, each
    entry naming its family and objective. FLOPs and corpus tokens per step come from each arm's own objective
    batch shape, so arms of one family with different objectives get different step counts.
    """
    match, tol = cmp.match.value, cmp.tolerance
    plan = Plan(match=match, tolerance=tol, arms={})
    if match == "params":
        ref_arm = next(iter(cfgs))
        cfgs, plan.target_non_embedding_params = match_sizes(cfgs, ref_arm)
        plan.reference = f"{ref_arm} at its preset size (non-embedding parameters)"
    # data.batch_size is the global batch of one optimizer step, whatever the devices and accumulation
    costs = {arm: step_cost(cfg.model, arm_objective(cfg, ids), cfg.data.batch_size) for arm, cfg in cfgs.items()}
    if match in ("flops", "tokens"):
        cfgs, plan.target = match_step_counts(cmp, reference, cfgs, costs)
        plan.reference_steps = reference.max_steps
        plan.reference = f"trainer.max_steps={reference.max_steps} steps of the median-cost " + (
            "arm" if cmp.objectives else "family")
    plan.arms = {arm: arm_budget(cfg.model, cfg.objective.name, cfg.trainer.max_steps, costs[arm])
                 for arm, cfg in cfgs.items()}
    plan.corpus_train_tokens, plan.corpus_size = corpus_train_tokens(data)
    if plan.corpus_train_tokens:
        for budget in plan.arms.values():
            budget.passes = budget.corpus_tokens / plan.corpus_train_tokens
    measure = {"flops": "flops", "tokens": "corpus_tokens", "params": "non_embedding_params"}[match]
    spread = relative_spread({arm: float(getattr(b, measure)) for arm, b in plan.arms.items()})
    plan.achieved_spread = spread
    if spread > tol:
        raise BudgetError(f"compare.match={match}: budgets differ by {spread:.2%} > compare.tolerance={tol}")
    return plan, cfgs


def match_sizes(cfgs: dict[str, ComparePlan], ref_arm: str) -> tuple[dict[str, ComparePlan], int]:
    """``compare.match=params``: every arm's config with its model resized to the reference arm's non-embedding
    parameter count, and that count."""
    target = count_params(cfgs[ref_arm].model)[1]
    sized = {arm: cfg if arm == ref_arm else with_values(cfg, {"model": solve_params(cfg.model, target)[0]})
             for arm, cfg in cfgs.items()}
    return sized, target


def match_step_counts(cmp: CompareConfig, reference: TrainerConfig, cfgs: dict[str, ComparePlan],
                      costs: dict[str, StepCost]) -> tuple[dict[str, ComparePlan], int]:
    """``compare.match=flops / tokens``: every arm's config with the steps that spend what ``trainer.max_steps``
    steps of the median-cost arm spend, its warmup and validation interval scaled to them; and that budget."""
    match, tol = cmp.match.value, cmp.tolerance
    per_step = {f: (c.flops if match == "flops" else c.corpus_tokens) for f, c in costs.items()}
    ordered = sorted(per_step.values())
    target = reference.max_steps * ordered[len(ordered) // 2]
    steps = match_steps(per_step, target, tol, match)
    checks = max(1, round(reference.max_steps / reference.val_check_interval))
    budgeted = {arm: with_values(cfg, {
        "trainer.max_steps": steps[arm],
        "optim.warmup_steps": min(cfg.optim.warmup_steps, max(1, steps[arm] // 5)),
        "trainer.val_check_interval": _divisor_near(steps[arm], steps[arm] / checks),
    }) for arm, cfg in cfgs.items()}
    return budgeted, target


def arm_budget(model: ModelConfig, objective: str | None, steps: int, cost: StepCost) -> ArmBudget:
    """What an arm trains (its model, objective name and ``trainer.max_steps``): steps, FLOPs and corpus tokens (per
    step and in all), sizes, batch shape."""
    total, non_emb = count_params(model)
    assert model.ffn_dim is not None  # ModelConfig derives it when unset
    return ArmBudget(
        family=model.family.value, objective=objective, steps=steps, flops_per_step=cost.flops,
        corpus_tokens_per_step=cost.corpus_tokens, flops=cost.flops * steps, corpus_tokens=cost.corpus_tokens * steps,
        params=total, non_embedding_params=non_emb, batch_shape=cost.shape, dim=model.dim,
        ffn_dim=model.ffn_dim, num_layers=model.num_layers,
    )


def _divisor_near(n: int, want: float) -> int:
    """The divisor of ``n`` closest to ``want`` (log scale): validating every that many steps ends on the last
    step, so each family's final validation loss is measured at the end of its budget."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: (abs(math.log(d / want)), -d))


# --- famlab compare --dry-run: the plan and the jobs, stated before anything runs -----------------------------------

def assumed_ids(data: DataConfig) -> TokenIds:
    """Token ids for a plan made before the comparison's tokenizer exists (``famlab compare --dry-run``): the
    requested ``data.tokenizer.vocab_size``, special tokens first and sentinels on top, as a trained tokenizer lays
    them out (one that stops short of the requested size on a small corpus plans slightly other steps)."""
    size, sentinels = data.tokenizer.vocab_size, data.tokenizer.num_sentinels
    names = ("pad", "unk", "cls", "sep", "mask", "bos", "eos", "r", "x", "s")
    return TokenIds(vocab_size=size, sentinel_ids=range(size - 1, size - 1 - sentinels, -1),
                    **{n: i for i, n in enumerate(names)})


def plan_lines(cmp: CompareConfig, data: DataConfig, cfgs: dict[str, ComparePlan], plan: Plan) -> list[str]:
    """The budget plan as ``--dry-run`` prints it: per arm the steps, warmup and validation interval the plan sets,
    training FLOPs, corpus tokens, parameters and batch shape; then the reference and the achieved spread."""
    head = ["arm", "steps", "warmup", "val every", "FLOPs", "corpus tokens", "params", "non-emb. params",
            "batch shape"]
    rows = [[arm, f"{p.steps}", f"{cfgs[arm].optim.warmup_steps}", f"{cfgs[arm].trainer.val_check_interval}",
             f"{p.flops:.3e}", f"{p.corpus_tokens:,}", f"{p.params:,}", f"{p.non_embedding_params:,}", p.batch_shape]
            for arm, p in plan.arms.items()]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    table = ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *rows]]
    return [f"budget plan (compare.match={plan.match}: {plan.reference}; planned with "
            f"data.tokenizer.vocab_size={data.tokenizer.vocab_size}, a start plans with the trained tokenizer's "
            "size):", *table,
            f"  spread on {plan.match}: {plan.achieved_spread:.2%} (compare.tolerance {cmp.tolerance:.0%})"]


def finetune_note(ft: FinetuneConfig, seeds: list[int]) -> str:
    """What one fine-tuning job trains: its grid, seeds and the fine-tunes they make (``finetune.select_seeds``)."""
    points = grid_points(ft)
    k = len(seeds) if ft.select_seeds is None or len(points) == 1 else min(ft.select_seeds, len(seeds))
    runs = len(points) * k + len(seeds) - k
    grid = ", ".join(f"{p.lr:g}/{p.head_lr:g}" for p in points)
    select = f"; seeds {seeds[:k]} select, the others train at the selected point" if k < len(seeds) else ""
    steps = f"{ft.max_steps} steps" if ft.max_steps else f"{ft.epochs} epochs"
    return f"seeds {seeds} x grid (body/head lr) {grid}{select}: {runs} fine-tunes of {steps}"


def job_lines(cmp: CompareConfig, cfgs: dict[str, ComparePlan], plan: Plan, tasks: list[str | None],
              rate: Rate | None = None) -> list[str]:
    """The comparison's jobs in the order they are submitted (pretraining, most FLOPs first; the scratch baselines;
    each pretrained model's probe and fine-tunes as soon as it is trained), one line each, with what each writes.

    ``tasks``: ``[None]`` for one task (runs in the comparison directory), else the suite's task names (a folder
    each). ``rate``: each pretraining run's time from its planned FLOPs is stated at it (:func:`cost_lines`)."""
    order = sorted(cfgs, key=lambda arm: plan.arms[arm].flops, reverse=True)
    lines = []
    for arm in order:
        took = f", ~{duration(pretrain_seconds(plan.arms[arm], rate))}" if rate is not None else ""
        steps = f"{plan.arms[arm].steps} steps{took}"
        for i, seed in enumerate(cmp.pretrain_seeds):
            if cmp.lr_grid and i == 0:
                lines.append(f"pretrain {arm} seed {seed} at each lr of compare.lr_grid={list(cmp.lr_grid)}, {steps} "
                             f"each -> {arm}-pretrain-s{seed}-lr<lr>/ (the lowest final val/loss is kept)")
            else:
                lines.append(f"pretrain {arm} seed {seed}: {steps} -> {arm}-pretrain-s{seed}/, then bits per byte "
                             f"({cmp.bpb_docs} validation documents) and zero-shot ({cmp.zero_shot_items} items a "
                             "task)")
    firsts: dict[str, ComparePlan] = {}  # a family's scratch baseline is its first arm's network
    for cfg in cfgs.values():
        firsts.setdefault(cfg.model.family.value, cfg)
    lines += [f"fine-tune {family} from scratch{_on(task)}: {finetune_note(cfg.finetune, list(cmp.scratch_seeds))} -> "
              f"{_in(task)}{family}-scratch/" for family, cfg in firsts.items() if cmp.scratch_seeds for task in tasks]
    for arm in order:
        for seed in cmp.pretrain_seeds:
            for task in tasks:
                model = f"{arm}-pretrain-s{seed}{_on(task)}"
                if cmp.probe:
                    lines.append(f"probe {model}: frozen features vs {len(cfgs[arm].finetune.probe_seeds)} "
                                 f"random-init bodies -> {_in(task)}{arm}-probe-s{seed}/")
                if cmp.seeds:
                    lines.append(f"fine-tune {model}: {finetune_note(cfgs[arm].finetune, list(cmp.seeds))} -> "
                                 f"{_in(task)}{arm}-ft-s{seed}/")
    return lines


def _on(task: str | None) -> str:
    return "" if task is None else f" on {task}"


def _in(task: str | None) -> str:
    return "" if task is None else f"{task}/"


# --- what the plan costs and how often it reads its corpus (--dry-run) ---------------------------------------------

# Sustained fractions of a device's peak, stated with every estimate. GPU (no famlab measurement yet): nanoGPT and
# litgpt train GPT-2-124M at 40-50 % MFU with flash attention and torch.compile on A100 / H100; smaller models' shorter
# steps reach less. CPU: of the 1-thread fp32 matmul rate measured as the plan is made (best of 3, 1024^3): the
# default comparison's three FLOP-matched pretraining runs took 262-273 s each on 2 quiet cores, one thread each, for
# 1.05e13 planned FLOPs (38-40 GFLOP/s), where that matmul measures 42-45 GFLOP/s on the same machine (docs/results.md,
# "What pretraining bought"); 0.15, the figure before, priced the default comparison at 2.6 hours.
GPU_MFU = 0.40
CPU_MFU = 0.85
# Muennighoff et al. 2023, "Scaling Data-Constrained Language Models": up to about 4 epochs, repeated tokens are
# worth almost as much as fresh ones; beyond that their value decays quickly.
REPEATS_WORTH_LESS = 4.0
CORPUS_DOC = "docs/data.md, \"A corpus large enough for small and base\""


def corpus_train_tokens(data: DataConfig) -> tuple[int | None, str]:
    """The training split's tokens of ``data.corpus`` prepared with ``base``'s ``data.*`` settings, and how they were
    found; ``(None, why)`` when it is not prepared yet. Reads the prepared directory's small JSON files only: the
    stream file a pretraining run cuts blocks from (``streams-sep<id>.json``, separators included), else the
    manifest's tokens scaled by the training documents' share."""
    spec = data.corpus
    try:
        where = Path(spec).expanduser() if is_prepared_dir(spec) else prepared_location(
            spec, prepare_settings(data), cache_dir(data))
    except DataError as e:
        return None, f"unknown ({e})"
    if not (where / MANIFEST).is_file():
        return None, (f"unknown until prepared (`famlab prepare` with these presets and data.corpus={spec}, or the "
                      "comparison's start, prepares it; a dry run reads no corpus)")
    streams = sorted(where.glob("streams-sep*.json"))
    if streams:
        train = int(json.loads(streams[0].read_text(encoding="utf-8"))["tokens"]["train"])
        return train, f"the training stream of {where}"
    manifest = json.loads((where / MANIFEST).read_text(encoding="utf-8"))
    split = manifest["split"]
    share = split["train_documents"] / max(1, split["documents"])
    return round(manifest["tokens"]["total"] * share), f"{where}'s manifest (tokens x training documents' share)"


@dataclasses.dataclass(frozen=True)
class Rate:
    """Sustained training FLOP/s of one device (``per_device``; NaN where no peak is known) and how it was had."""

    per_device: float
    devices: int  # per job (a k-device job's own DDP world, assumed to scale linearly)
    how: str


def training_rate(t: TrainerConfig, placement: Placement) -> Rate:
    """The rate a job of this comparison trains at on this machine: a GPU's datasheet peak at the run's precision x
    :data:`GPU_MFU`, or the CPU's fp32 matmul measured now on the threads each rank will have x :data:`CPU_MFU`."""
    k = placement.devices_per_job
    if placement.gpus and not torch.cuda.is_available():  # GPUs listed (CUDA_VISIBLE_DEVICES) that torch cannot use
        return Rate(math.nan, k, "no GPU peak: CUDA is not available to this process")
    if placement.gpus:
        peak, how = peak_flops(torch.device("cuda"), dtype=precision_dtype(precision(t)))
        return Rate(peak * GPU_MFU, k, f"{how} x an assumed {GPU_MFU:.0%} MFU (nanoGPT / litgpt, GPT-2-124M on A100 / "
                    "H100; a smaller model reaches less, so read the times as lower bounds)")
    threads = placement.threads_per_rank(cores())
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        peak, how = peak_flops(torch.device("cpu"), size=1024, repeats=3, dtype=torch.float32)
    finally:
        torch.set_num_threads(before)
    return Rate(peak * CPU_MFU, k, f"{how} on {threads} thread(s): {peak / 1e9:,.0f} GFLOP/s, x an assumed "
                f"{CPU_MFU:.0%} MFU")


def duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3.4 h``, ``2.1 days``, ``1.6 years``; ``unknown`` for NaN."""
    if not math.isfinite(seconds):
        return "unknown"
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 1.5 * size:
            return f"{seconds / size:,.1f} {unit}" if unit != "min" else f"{seconds / size:.0f} min"
    return f"{seconds:.0f} s"


def pretrain_seconds(budget: ArmBudget, rate: Rate) -> float:
    """One pretraining run's seconds: its planned FLOPs at ``rate`` on its devices."""
    return budget.flops / (rate.per_device * rate.devices) if rate.per_device > 0 else math.nan


def cost_lines(cmp: CompareConfig, corpus: str, plan: Plan, rate: Rate) -> list[str]:
    """What ``--dry-run`` says the plan costs and how often it reads its corpus: the rate it prices with, each arm's
    pretraining time and passes over the corpus (``data.corpus``), and a warning past :data:`REPEATS_WORTH_LESS`
    passes."""
    runs = {arm: len(cmp.pretrain_seeds) + max(0, len(cmp.lr_grid or ()) - 1) for arm in plan.arms}
    total = sum(pretrain_seconds(b, rate) * runs[arm] for arm, b in plan.arms.items())
    lines = [f"time, from each job's planned FLOPs: {rate.how}; {rate.devices} device(s) per job",
             f"  pretraining: ~{duration(total / max(1, cmp.workers))} of wall time, {cmp.workers} job(s) at a time "
             f"(compare.workers; {duration(total)} of jobs in all); fine-tunes, probes and evaluation come on top and "
             "are not priced"]
    if plan.corpus_train_tokens is None:
        return [*lines, f"passes over the corpus (data.corpus={corpus}): {plan.corpus_size}"]
    passes = {arm: b.passes or 0.0 for arm, b in plan.arms.items()}
    lines.append(f"passes over the corpus (data.corpus={corpus}: {plan.corpus_train_tokens:,} training tokens, from "
                 f"{plan.corpus_size}): " + ", ".join(f"{arm} {p:.2f}" for arm, p in passes.items()))
    many = [arm for arm, p in passes.items() if p > REPEATS_WORTH_LESS]
    if many:
        lines.append(f"WARNING: {', '.join(many)} read the corpus more than {REPEATS_WORTH_LESS:g} times: beyond about "
                     "4 epochs repeated tokens are worth markedly less than fresh ones (Muennighoff et al. 2023, "
                     "\"Scaling Data-Constrained Language Models\"); bring a larger corpus (" + CORPUS_DOC + ")")
    return lines
