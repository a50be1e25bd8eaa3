"""``famlab compare``: every family pretrained under one matched budget, fine-tuned, and reported side by side.

Steps (each run is a run directory inside ``runs/compare-<name>-<ts>/``, all in one W&B group):
1. one tokenizer for every family, trained once on the corpus (cached), its path passed to each run;
2. budget plan (``compare.match``, :mod:`experiments.budget`): steps or sizes per family;
3. optional ``compare.lr_grid``: the pretraining lr per family with the lowest final validation loss;
4. per family and ``compare.pretrain_seeds``: pretrain, then bits per byte on validation documents;
5. per pretrained model: fine-tune on ``data.task`` for ``compare.seeds``; per family the scratch baseline
   for ``compare.scratch_seeds``;
6. :func:`experiments.report.build_report` writes ``report.md``, PNG plots and ``results.json``.

With no size preset the bundled default is ``tiny`` plus :data:`TINY_DEFAULTS` (a budget that finishes in
minutes on 2 CPU cores); ``famlab compare small`` is the serious single-GPU setting.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

from experiments.budget import (
    BudgetError,
    count_params,
    match_steps,
    relative_spread,
    solve_params,
    step_cost,
)
from experiments.compose import compose, parse_overrides
from experiments.config import Config, ConfigInputError
from experiments.run import get_bundle, set_vocab, token_ids, write_json

SIZES = ("tiny", "small", "base")
# The tiny comparison's budget (applied before the user's overrides): 3 pretraining runs, 9 fine-tunes and
# 3 scratch fine-tunes in ~6 min of CPU time (measured: 5m56s user, 10m47s wall at load average ~20 on
# 2 cores, one torch thread). The median-cost family trains trainer.max_steps steps; the others match its FLOPs.
TINY_DEFAULTS = [
    "compare.task_limit=4000",
    "trainer.max_steps=300",
    "trainer.val_check_interval=100",
    "trainer.limit_val_batches=4",
    "finetune.max_steps=200",
    "finetune.val_every=100",
    "trainer.progress_bar=false",
]
BPB_DOCS = 100  # validation documents scored for bits per byte (BERT: pseudo-log-likelihood, one mask at a time)


def log(message: str) -> None:
    print(f"[famlab compare {time.strftime('%H:%M:%S')}] {message}", flush=True)


def compose_all(presets: list[str], overrides: list[str]) -> tuple[Config, dict[str, Config]]:
    """The comparison's own config (first family) and one composed config per ``compare.families``."""
    presets = list(presets)
    if not any(p in SIZES for p in presets):
        presets = ["tiny", *presets]
    parse_overrides(overrides)  # malformed tokens fail here, naming the token
    user_flat = {t.lstrip("-").split("=", 1)[0] for t in overrides}
    defaults = [d for d in TINY_DEFAULTS if d.split("=", 1)[0] not in user_flat] if "tiny" in presets else []
    family_free = [p for p in presets if p not in ("bert", "gpt", "t5")]
    base = compose(family_free, [*defaults, *overrides]).cfg
    families = list(base.compare.families)
    if not families or len(set(families)) != len(families):
        raise ConfigInputError(f"compare.families={families} must name distinct families")
    cfgs = {}
    for family in families:
        if family not in ("bert", "gpt", "t5"):
            raise ConfigInputError(f"compare.families: {family!r} is not one of: bert, gpt, t5")
        # objective.name follows each family's preset unless the user fixed it
        cfgs[family] = compose([family, *family_free], [*defaults, *overrides]).cfg
    if not base.compare.seeds and not base.compare.scratch_seeds:
        raise ConfigInputError("compare.seeds and compare.scratch_seeds are both empty: nothing to fine-tune")
    if not base.compare.pretrain_seeds:
        raise ConfigInputError("compare.pretrain_seeds=[] must name at least one seed")
    return base, cfgs


def make_objective_for(cfg: Config, ids: Any) -> Any:
    """The family's objective with ``objective.*`` settings (as ``famlab pretrain`` builds it)."""
    from objectives import make_objective

    o = cfg.objective
    return make_objective(
        o.name, ids, seq_len=cfg.data.seq_len, mask_rate=o.mask_rate, noise_density=o.noise_density,
        mean_span=o.mean_span, family=cfg.model.family.value, prefix_fraction=o.prefix_fraction,
        ul2_rates=tuple(o.ul2_rates), ul2_x_density=o.ul2_x_density, ul2_x_mean_span=o.ul2_x_mean_span,
        span_p=o.span_p, max_span=o.max_span,
    )


def plan_budget(base: Config, cfgs: dict[str, Config], ids: Any) -> dict[str, Any]:
    """Match the budget across families in place (steps or sizes); returns what the report states."""
    match, tol = base.compare.match.value, base.compare.tolerance
    plan: dict[str, Any] = {"match": match, "tolerance": tol, "families": {}}
    if match == "params":
        ref_family = next(iter(cfgs))
        target = count_params(cfgs[ref_family].model)[1]
        for family, cfg in cfgs.items():
            if family != ref_family:
                cfg.model, _ = solve_params(cfg.model, target)
        plan["target_non_embedding_params"] = target
        plan["reference"] = f"{ref_family} at its preset size (non-embedding parameters)"
    costs = {}
    for family, cfg in cfgs.items():
        acc = cfg.trainer.accumulate_grad_batches
        costs[family] = step_cost(cfg.model, make_objective_for(cfg, ids), cfg.data.batch_size, acc)
    if match in ("flops", "tokens"):
        per_step = {f: (c.flops if match == "flops" else c.corpus_tokens) for f, c in costs.items()}
        ordered = sorted(per_step.values())
        median = ordered[len(ordered) // 2]
        target = base.trainer.max_steps * median
        steps = match_steps(per_step, target, tol, match)
        checks = max(1, round(base.trainer.max_steps / base.trainer.val_check_interval))
        for family, cfg in cfgs.items():
            cfg.trainer.max_steps = steps[family]
            cfg.optim.warmup_steps = min(cfg.optim.warmup_steps, max(1, steps[family] // 5))
            cfg.trainer.val_check_interval = _divisor_near(steps[family], steps[family] / checks)
        plan["target"] = target
        plan["reference"] = f"trainer.max_steps={base.trainer.max_steps} steps of the median-cost family"
    for family, cfg in cfgs.items():
        total, non_emb = count_params(cfg.model)
        c = costs[family]
        plan["families"][family] = {
            "steps": cfg.trainer.max_steps,
            "flops_per_step": c.flops,
            "corpus_tokens_per_step": c.corpus_tokens,
            "flops": c.flops * cfg.trainer.max_steps,
            "corpus_tokens": c.corpus_tokens * cfg.trainer.max_steps,
            "params": total,
            "non_embedding_params": non_emb,
            "batch_shape": c.shape,
            "dim": cfg.model.dim,
            "ffn_dim": cfg.model.ffn_dim,
            "num_layers": cfg.model.num_layers,
        }
    measure = {"flops": "flops", "tokens": "corpus_tokens", "params": "non_embedding_params"}[match]
    spread = relative_spread({f: float(v[measure]) for f, v in plan["families"].items()})
    plan["achieved_spread"] = spread
    if spread > tol:
        raise BudgetError(f"compare.match={match}: budgets differ by {spread:.2%} > compare.tolerance={tol}")
    return plan


def subsample_task(cfg: Config, limit: int, path: Path) -> Path:
    """Write a seeded subsample of ``data.task`` as CSV: ``limit`` train examples, ``limit // 5`` each val/test.

    Validation / test examples whose label the train subsample lacks are dropped (the task loader takes its
    label set from the training split). Every family fine-tunes and is tested on this same file.
    """
    import csv
    import random

    from datamodules import load_task

    d = cfg.data
    task = load_task(
        d.task, text_column=d.text_column, text_pair_column=d.text_pair_column, label_column=d.label_column,
        split_column=d.split_column, val_fraction=d.val_fraction if d.val_fraction is not None else 0.1,
        test_fraction=d.test_fraction, seed=d.seed,
    )
    rng = random.Random(d.seed)
    train = rng.sample(task.train, min(limit, len(task.train)))
    seen = {e.label for e in train}
    rows = [("train", e) for e in train]
    for split, examples in (("val", task.val), ("test", task.test)):
        keep = [e for e in examples if e.label in seen]
        rows += [(split, e) for e in rng.sample(keep, min(max(1, limit // 5), len(keep)))]
    with path.open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "text_pair", "label", "split"])
        for split, e in rows:
            w.writerow([e.text, e.text_pair or "", task.labels[e.label], split])
    return path


def _divisor_near(n: int, want: float) -> int:
    """The divisor of ``n`` closest to ``want`` (log scale): validating every that many steps ends on the last
    step, so each family's final validation loss is measured at the end of its budget."""
    import math

    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return min(divisors, key=lambda d: (abs(math.log(d / want)), -d))


def byte_scores(run_dir: Path, cfg: Config, corpus: Any, bundle: Any) -> dict[str, Any]:
    """Bits per byte (GPT, T5) or pseudo-log-likelihood bits per byte (BERT) on validation documents."""
    from experiments.finetune import Init, load_network
    from objectives.evaluation import byte_score

    ckpt = run_dir / "checkpoints" / "last.ckpt"
    net, _ = load_network(cfg, Init("run", run_dir=run_dir, checkpoint=ckpt))
    net.eval()
    texts = corpus.val[:BPB_DOCS]

    def encode(text: str) -> list[int]:
        return bundle.tokenizer.encode(text, add_special_tokens=False).ids

    score = byte_score(net, texts, encode, token_ids(bundle), objective=cfg.objective.name)
    return {"measure": score.measure, "value": score.value, "num_texts": score.num_texts, "num_bytes": score.num_bytes}


def _pretrain_one(cfg: Config, comp_dir: Path, group: str, tags: list[str], seed: int, suffix: str = "") -> dict:
    from experiments.pretrain import pretrain

    run = copy.deepcopy(cfg)
    run.seed = seed
    run.run_dir = str(comp_dir / f"{cfg.model.family.value}-pretrain-s{seed}{suffix}")
    run.name = Path(run.run_dir).name
    run.wandb.group = group
    run.wandb.tags = list(dict.fromkeys([*run.wandb.tags, *tags]))
    results = pretrain(run)
    results["cfg"] = run
    return results


def run_compare(presets: list[str], overrides: list[str]) -> Path:
    """Run the whole comparison; returns the comparison directory."""
    from datamodules import load_corpus

    started = time.time()
    base, cfgs = compose_all(presets, overrides)
    cmp = base.compare
    size = base.size or "custom"
    name = base.name or f"{'-'.join(cfgs)}-{size}"
    comp_dir = Path("runs") / f"compare-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    while comp_dir.exists():
        comp_dir = comp_dir.with_name(comp_dir.name + "x")
    comp_dir.mkdir(parents=True)
    group = f"compare-{name}"
    log(f"{comp_dir}: families {', '.join(cfgs)}, budget matched on {cmp.match.value}, scale {size}")

    val_fraction = base.data.val_fraction if base.data.val_fraction is not None else 0.05
    corpus = load_corpus(base.data.corpus, val_fraction=val_fraction, seed=base.data.seed)
    bundle = get_bundle(base, corpus, comp_dir)  # trained once (cached by corpus + settings), shared by all
    shared = str((comp_dir / "tokenizer.json").resolve())
    for cfg in cfgs.values():
        cfg.data.tokenizer.path = shared
        set_vocab(cfg, bundle.vocab_size)
    if cmp.task_limit:
        task_path = subsample_task(base, cmp.task_limit, comp_dir / "task.csv").resolve()  # report from any cwd
        log(f"fine-tuning task: {task_path} (seeded subsample of {base.data.task}, "
            f"compare.task_limit={cmp.task_limit})")
        for cfg in cfgs.values():
            d = cfg.data
            d.task, d.text_column, d.label_column, d.split_column = str(task_path), "text", "label", "split"
            d.text_pair_column = "text_pair" if d.text_pair_column else None
    plan = plan_budget(base, cfgs, token_ids(bundle))
    plan["tokenizer_hash"] = bundle.hash
    write_json(comp_dir / "plan.json", plan)
    for family, p in plan["families"].items():
        log(
            f"budget {family}: {p['steps']} steps x {p['batch_shape']}, {p['flops']:.3e} FLOPs, "
            f"{p['corpus_tokens']} corpus tokens, {p['non_embedding_params']} non-embedding params"
        )
    log(f"budget spread on {cmp.match.value}: {plan['achieved_spread']:.3%} (tolerance {cmp.tolerance:.0%})")

    total_jobs = len(cfgs) * (len(cmp.pretrain_seeds) * (1 + bool(cmp.seeds)) + bool(cmp.scratch_seeds))
    total_jobs += len(cfgs) * max(0, len(cmp.lr_grid) - 1)
    done = 0

    def progress(what: str) -> None:
        nonlocal done
        done += 1
        log(f"[{done}/{total_jobs}] {what} ({time.time() - started:.0f} s elapsed)")

    for family, cfg in cfgs.items():
        tags = [family, str(cfg.objective.name), f"budget-{cmp.match.value}", "compare"]
        if cmp.lr_grid:
            tried = []
            for lr in cmp.lr_grid:
                trial = copy.deepcopy(cfg)
                trial.optim.lr, trial.optim.lr_scale = lr, 1.0
                r = _pretrain_one(trial, comp_dir, group, [*tags, "lr-tune"], cmp.pretrain_seeds[0], f"-lr{lr:g}")
                tried.append((r["final"].get("val/loss", float("inf")), lr, r))
                progress(f"lr {lr:g} {family}: val/loss {r['final'].get('val/loss')}")
            best_loss, best_lr, _ = min(tried, key=lambda t: t[0])
            cfg.optim.lr, cfg.optim.lr_scale = best_lr, 1.0
            plan["families"][family]["lr_grid"] = {f"{lr:g}": loss for loss, lr, _ in tried}
            plan["families"][family]["lr"] = best_lr
            write_json(comp_dir / "plan.json", plan)
            log(f"{family}: pretraining lr {best_lr:g} (val/loss {best_loss:.4f})")
        for i, seed in enumerate(cmp.pretrain_seeds):
            if cmp.lr_grid and i == 0:
                run = next(r for loss, lr, r in tried if lr == best_lr)
            else:
                run = _pretrain_one(cfg, comp_dir, group, tags, seed)
                progress(f"pretrain {family} seed {seed}: val/loss {run['final'].get('val/loss')}")
            run_dir, run_cfg = Path(run["run_dir"]), run["cfg"]
            scores = byte_scores(run_dir, run_cfg, corpus, bundle)
            write_json(run_dir / "eval.json", {"byte_score": scores})
            log(f"{family} seed {seed}: {scores['measure']} {scores['value']:.4f}")
            if cmp.seeds:
                _finetune(run_cfg, str(run_dir), comp_dir / f"{family}-ft-s{seed}", list(cmp.seeds), group, tags)
                progress(f"fine-tune {family} (pretrained seed {seed}) seeds {list(cmp.seeds)}")
        if cmp.scratch_seeds:
            _finetune(cfg, "scratch", comp_dir / f"{family}-scratch", list(cmp.scratch_seeds), group,
                      [*tags, "scratch"])
            progress(f"fine-tune {family} from scratch seeds {list(cmp.scratch_seeds)}")

    from experiments.report import build_report

    wall = time.time() - started
    (comp_dir / "compare.json").write_text(
        json.dumps({"wall_s": round(wall, 1), "presets": presets, "overrides": overrides}, indent=2) + "\n"
    )
    build_report([comp_dir], comp_dir)
    log(f"done in {time.time() - started:.0f} s: {comp_dir / 'report.md'}")
    return comp_dir


def _finetune(cfg: Config, init: str, run_dir: Path, seeds: list[int], group: str, tags: list[str]) -> dict:
    from experiments.finetune import finetune, parse_init

    ft = copy.deepcopy(cfg)
    ft.init = init
    ft.run_dir = str(run_dir)
    ft.name = run_dir.name
    ft.finetune.seeds = seeds
    ft.wandb.group = group
    ft.wandb.tags = list(dict.fromkeys([*ft.wandb.tags, *tags]))
    return finetune(ft, parse_init(init))


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab compare [presets...] [key=value...]``."""
    if flags:
        raise ConfigInputError(f"famlab compare takes no flags (got {' '.join(flags)})")
    comp_dir = run_compare(presets, overrides)
    print((comp_dir / "report.md").read_text(encoding="utf-8"))
    return 0
