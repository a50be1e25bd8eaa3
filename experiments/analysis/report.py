"""The side-by-side report: ``report.md``, PNG plots and ``results.json`` from stored run directories.

``famlab report <dir>...`` rebuilds it from what the runs left on disk (``config.yaml``, ``results.json``,
``metrics.csv``, ``eval.json``, and a comparison's ``plan.json``), so no W&B server is needed. A directory
is a comparison directory (its run directories are read) or a run directory itself.

Numbers per arm (one family x objective; the family itself when each family has its preset objective):
parameters, corpus tokens, FLOPs, final validation loss / perplexity, the unigram floor
(``val/unigram_loss``), bits per byte (GPT, T5) or BERT's pseudo-log-likelihood bits per byte in its own
column (not a likelihood), fine-tune test acc / F1 / MCC as mean +- std over seeds, the scratch baseline,
throughput; reference rows on the same test split: majority class and TF-IDF + logistic regression.
A suite comparison (``suite.json``) reports every task and the suite score instead of the one-task fine-tuning
table (:mod:`famlab.experiments.analysis.suite_table`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import yaml
from famlab.experiments.analysis import baselines, suite_table, transfer
from famlab.experiments.analysis.repetition import past_best_section
from famlab.experiments.analysis.results import (
    ArmBudget,
    ArmRow,
    EvalRecord,
    FinetuneResult,
    JsonDict,
    Plan,
    PretrainResult,
    PretrainRow,
    RunRecord,
    Stat,
    StepFailure,
    read_config,
    read_failures,
    read_result,
)
from famlab.experiments.analysis.stats import RUN_MEANS, SEED_VALUES
from famlab.experiments.analysis.suite_table import SuiteResults, read_tasks
from famlab.experiments.analysis.yardsticks import read_metrics
from famlab.experiments.analysis.zeroshot_table import Row, zero_shot_rows, zero_shot_section, zero_shot_summary
from famlab.experiments.configuration.compose import family_settings, to_plain
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.run_files import CONFIG, RESULTS, CompareFiles, RunFiles
from famlab.experiments.configuration.task import load_configured_task
from famlab.objectives.objective import NOT_SCORED
from famlab.objectives.registry import rules_of

if TYPE_CHECKING:
    from typing_extensions import NotRequired, Required  # typing's own from Python 3.11

METRICS = ("test/acc", "test/f1", "test/mcc")
TIME_COLUMNS = ("tokens/s", "wall s")  # the only columns a rerun with the same seeds may change
Reference = dict[str, Any]  # a reference row's test/acc, test/f1, test/mcc (and the majority class's label ...)


class Significance(TypedDict, total=False):
    """Two arms' fine-tune scores tested two-sided (:func:`pair_test`; ``results.json``'s ``significance``)."""

    pair: Required[str]  # "<arm> vs <arm>"
    diff: float
    ci: list[float]
    p: Required[float | None]  # None: too few seeds for a test
    test: Required[str | None]  # stats.RUN_MEANS or stats.SEED_VALUES
    variance: list[str]  # the seed variances the test covers
    pretrain_seeds: Required[list[int]]
    units: list[int]  # values per arm the test ran on
    df: float | None
    p_holm: float
    verdict: str  # set by :func:`significance` where tested


class ReportResults(TypedDict):
    """A comparison's ``results.json`` (:func:`build_report`)."""

    scale: str
    plan: JsonDict | None
    families: dict[str, JsonDict]  # arm -> ArmRow.to_json()
    reference: dict[str, Reference | None]
    significance: list[Significance]
    runs: list[str]
    tables: dict[str, str]
    gains: list[dict[str, object]]  # transfer.Gain as a dict
    probe_gains: list[dict[str, object]]
    protocol: list[str]
    wall: dict[str, object] | None  # transfer.WallSplit as a dict
    zero_shot: dict[str, Row]
    wandb_summary: dict[str, float]
    failed: list[JsonDict]
    suite: NotRequired[SuiteResults]


def _load(run_dir: Path) -> RunRecord | None:
    """The run directory's record; None unless it holds ``config.yaml`` and the ``results.json`` of a pretraining
    run, a fine-tune or a probe."""
    files = RunFiles(run_dir)
    if not files.results_file.is_file() or not files.config_file.is_file():
        return None
    data = json.loads(files.results_file.read_text(encoding="utf-8"))
    try:
        results = read_result(data)
    except TypeError as e:  # a required key missing
        path = files.results_file
        raise ConfigInputError(f"famlab report: {path}: not a {data['job']} run's results: {e}") from e
    if results is None:
        return None
    evaluation = None
    if files.eval_file.is_file():
        evaluation = EvalRecord.from_json(json.loads(files.eval_file.read_text(encoding="utf-8")))
    config = read_config(yaml.safe_load(files.config_file.read_text(encoding="utf-8")))
    return RunRecord(path=run_dir, config=config, results=results, eval=evaluation,
                     metrics=read_metrics(files.metrics_file))


def collect(dirs: list[Path]) -> tuple[list[RunRecord], Plan | None]:
    """Run records from comparison or run directories, plus the comparison's budget plan (if any)."""
    runs, plan = [], None
    for d in dirs:
        if not d.is_dir():
            raise ConfigInputError(f"famlab report: {d} is not a directory")
        comp = CompareFiles(d)
        if comp.plan_file.is_file():
            plan = Plan.from_json(json.loads(comp.plan_file.read_text(encoding="utf-8")))
        candidates = [d] if comp.results_file.is_file() and not comp.plan_file.is_file() else sorted(d.iterdir())
        for c in candidates:
            run = _load(c) if c.is_dir() else None
            if run is not None:
                runs.append(run)
    if not runs:
        raise ConfigInputError(f"famlab report: no run directories ({CONFIG} + {RESULTS}) in {dirs}")
    return runs, plan


def _mean_std(values: list[float]) -> Stat:
    if not values:
        return math.nan, math.nan, 0
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values)


def _ft_scores(runs: list[RunRecord]) -> dict[str, list[float]]:
    scores: dict[str, list[float]] = {m: [] for m in METRICS}
    for result in [r.results for r in runs if isinstance(r.results, FinetuneResult)]:
        for seed_scores in result.seeds.values():
            for m in METRICS:
                scores[m].append(float(seed_scores[m]))
    return scores


def _ft_nested(runs: list[RunRecord]) -> dict[str, list[list[float]]]:
    """Per metric: one group per pretraining run (a fine-tune's ``init``), holding its fine-tuning seeds' scores."""
    groups: dict[str, dict[str, list[float]]] = {m: {} for m in METRICS}
    for result in [r.results for r in runs if isinstance(r.results, FinetuneResult)]:
        for seed_scores in result.seeds.values():
            for m in METRICS:
                groups[m].setdefault(str(result.init), []).append(float(seed_scores[m]))
    return {m: list(g.values()) for m, g in groups.items()}


def _throughput(metrics: list[dict[str, float]]) -> float:
    values = [r["perf/tokens_per_sec"] for r in metrics if "perf/tokens_per_sec" in r]
    return statistics.median(values) if values else math.nan


def _objective(run: RunRecord) -> str | None:
    stated = run.results.objective if isinstance(run.results, PretrainResult) else None
    return run.config.objective.name or stated


def label_arms(runs: list[RunRecord], plan: Plan | None) -> None:
    """Set ``run.arm`` on every run: the comparison arm (family x objective) it belongs to.

    Arm names come from the plan (``plan.arms`` is keyed by arm, each entry naming its family and
    objective; older plans are keyed by family only). Runs outside a plan are ``<family>`` when their family
    was pretrained with one objective, else ``<family>-<objective>``. Scratch fine-tunes belong to no arm
    (``None``): the baseline is per family.
    """
    lookup: dict[tuple[str, str | None], str] = {}
    for name, p in (plan.arms if plan is not None else {}).items():
        lookup[p.family or name, p.objective] = name
    objectives: dict[str, set[str | None]] = {}
    for r in runs:
        if not r.is_scratch:
            objectives.setdefault(r.family, set()).add(_objective(r))
    for r in runs:
        fam, obj = r.family, _objective(r)
        if r.is_scratch:
            r.arm = None
        elif (fam, obj) in lookup or (fam, None) in lookup:
            r.arm = lookup.get((fam, obj)) or lookup[fam, None]
        else:
            r.arm = f"{fam}-{obj}" if len(objectives[fam]) > 1 else fam
        r.labelled = True


def pretrain_runs(runs: list[RunRecord], arm: str, plan: Plan | None) -> list[RunRecord]:
    """The arm's budgeted pretraining runs: lr-grid trials count only at the lr the grid chose."""
    if any(not r.labelled for r in runs):
        label_arms(runs, plan)
    planned = plan.arms.get(arm) if plan is not None else None
    chosen = planned.lr if planned is not None else None
    out = []
    for r in runs:
        if r.arm != arm or r.job != "pretrain":
            continue
        o = r.config.optim
        if "lr-tune" in r.config.wandb.tags and not (chosen and math.isclose(o.lr * o.lr_scale, chosen)):
            continue
        out.append(r)
    return out


def summarize(runs: list[RunRecord], plan: Plan | None) -> dict[str, ArmRow]:
    """Per-arm numbers (the report table) from run records, keyed by arm name (the family when each family was
    pretrained with one objective). Each family's scratch baseline is in every row of that family; a family
    with only scratch runs gets a row of its own."""
    label_arms(runs, plan)
    order = list(plan.arms) if plan is not None else []
    for r in runs:
        if r.arm is not None and r.arm not in order:
            order.append(r.arm)
    arms: dict[str, ArmRow] = {}
    for arm in order:
        mine = [r for r in runs if r.arm == arm]
        if not mine:
            continue
        pre = pretrain_runs(runs, arm, plan)
        tuned = [r for r in mine if r.job == "finetune"]
        row = ArmRow(family=mine[0].family, objective=_objective(mine[0]))
        if pre:
            row.pretrain = pretrain_row(pre, plan.arms.get(arm) if plan is not None else None)
            row.objective = next(r.results.objective for r in pre if isinstance(r.results, PretrainResult))
        if tuned:
            vals = _ft_scores(tuned)
            row.finetune = {m: _mean_std(vals[m]) for m in METRICS}
            row.finetune_values = vals
            row.finetune_nested_values = _ft_nested(tuned)  # per pretraining run: the tests' unit
        arms[arm] = row
    for fam in dict.fromkeys(r.family for r in runs if r.is_scratch):
        vals = _ft_scores([r for r in runs if r.is_scratch and r.family == fam])
        rows = [row for row in arms.values() if row.family == fam]
        if not rows:
            rows = [arms.setdefault(fam, ArmRow(family=fam))]
        for row in rows:
            row.scratch = {m: _mean_std(vals[m]) for m in METRICS}
            row.scratch_values = vals
    return arms


def pretrain_row(pre: list[RunRecord], planned: ArmBudget | None) -> PretrainRow:
    """An arm's pretraining numbers: sizes and budget (the plan's where the runs do not state them), validation
    loss, perplexity and unigram floor, lr, throughput and wall time (means over pretraining seeds), the loss at
    2x / 4x the training length and bits per byte."""
    res = [r.results for r in pre if isinstance(r.results, PretrainResult)]
    optim = pre[0].config.optim
    loss_at = {}
    for k in ("2x", "4x"):  # length extrapolation (None where the position scheme cannot reach it)
        losses = [((r.length_extrapolation or {}).get(k) or {}).get("loss") for r in res]
        known = [float(x) for x in losses if x is not None]
        loss_at[k] = statistics.fmean(known) if losses and len(known) == len(losses) else None
    row = PretrainRow(
        pretrain_seeds=len(pre),
        params=res[0].num_params,
        non_embedding_params=planned.non_embedding_params if planned else None,
        steps=res[0].steps,
        corpus_tokens=planned.corpus_tokens if planned else None,
        passes=planned.passes if planned else None,
        flops=(res[0].budget or {}).get("flops") or (planned.flops if planned else None),
        val_loss=statistics.fmean(r.final["val/loss"] for r in res),
        val_ppl=statistics.fmean(r.final["val/ppl"] for r in res),
        unigram_loss=statistics.fmean(r.final.get("val/unigram_loss", math.nan) for r in res),
        lr=optim.lr * optim.lr_scale,
        tokens_per_s=statistics.fmean(_throughput(r.metrics) for r in pre),
        wall_s=statistics.fmean(r.wall_s for r in res),
        loss_2x=loss_at["2x"],
        loss_4x=loss_at["4x"],
    )
    scores = [r.eval.byte_score for r in pre if r.eval is not None and r.eval.byte_score is not None]
    if scores:
        mean = statistics.fmean(s.value for s in scores)
        if scores[0].measure == "pll_bits_per_byte":
            row.pll_bits_per_byte = mean
        else:
            row.bits_per_byte = mean
    return row


def majority_reference(runs: list[RunRecord]) -> Reference | None:
    """The majority-class baseline the first fine-tune stored (every fine-tune of a task tests the same split)."""
    for r in runs:
        if isinstance(r.results, FinetuneResult):
            return r.results.majority
    return None


def tfidf_reference(runs: list[RunRecord], cache: Path | None, stored: Sequence[Path] = ()) -> Reference | None:
    """The TF-IDF + logistic regression reference (:func:`famlab.experiments.analysis.baselines.tfidf`, the rule
    the baselines and a suite's references use) on the fine-tuning task's train split, scored on its test split (the
    split the fine-tunes are tested on). Cached in ``cache`` keyed by the task, its split settings and the rule."""
    ft = next((r for r in runs if r.job == "finetune"), None)
    if ft is None:
        return None
    d = ft.config.data
    fields = ("task", "seed", "val_fraction", "test_fraction", "text_column", "text_pair_column", "label_column",
              "split_column")
    key = {**{k: getattr(d, k) for k in fields}, "rule": baselines.TFIDF_RULE}
    for path in [p for p in (cache, *stored) if p is not None and p.is_file()]:  # computed earlier: reuse
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            if cache is not None and path != cache:
                cache.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
            return saved["tfidf"]
    task = load_configured_task(d)
    result: Reference = {**baselines.tfidf(task), "num_test": len(task.test)}
    if cache is not None:
        cache.write_text(json.dumps({"key": key, "tfidf": result}, indent=2) + "\n", encoding="utf-8")
    return result


def suite_tasks(
    dirs: list[Path], runs: list[RunRecord], plan: Plan | None, out_dir: Path
) -> list[suite_table.TaskRuns] | None:
    """The runs of each task of a suite comparison (its ``suite.json``), labelled with arms; None for one task.

    Each task's TF-IDF reference is cached as ``reference-<task>.json`` in ``out_dir`` (reused from ``dirs``).
    """
    found = next((t for d in dirs if (t := read_tasks(d)) is not None), None)
    if found is None:
        return None
    out = []
    for spec, folder in found:
        task_runs, _ = collect([folder])
        label_arms([*runs, *task_runs], plan)
        ft = [r for r in task_runs if r.job == "finetune"]
        cached = f"reference-{spec.name}.json"
        references = {"majority class": majority_reference(ft),
                      "TF-IDF + LR": tfidf_reference(ft, out_dir / cached, [d / cached for d in dirs])}
        out.append(suite_table.TaskRuns(spec, task_runs, references))
    return out


def significance(families: dict[str, ArmRow], metric: str = "test/acc") -> list[Significance]:
    """A two-sided test of fine-tune scores for every pair of arms (:func:`pair_test`), Holm-corrected across pairs."""
    from famlab.experiments.analysis.stats import holm

    out = [pair_test(f"{a} vs {b}", _runs_of(families[a], metric), _runs_of(families[b], metric))
           for a, b in itertools.combinations(families, 2)]
    tested = [(s, p) for s in out if (p := s["p"]) is not None]
    for (s, _), p in zip(tested, holm([p for _, p in tested]), strict=True):
        s["p_holm"] = p
        s["verdict"] = ("exceeds seed variation (Holm p < 0.05)" if p < 0.05
                        else "within seed variation (Holm p >= 0.05)")
    return out


def _runs_of(row: ArmRow, metric: str) -> list[list[float]]:
    """An arm's scores, one list per pretraining run (a row without them: all its scores as one run)."""
    nested = row.finetune_nested_values.get(metric)
    if nested:
        return [list(g) for g in nested if g]
    flat = row.finetune_values.get(metric, [])
    return [list(flat)] if flat else []


def pair_test(pair: str, a: list[list[float]], b: list[list[float]]) -> Significance:
    """Two arms' scores (one list per pretraining run) tested two-sided, the test chosen by the pretraining runs.

    Both arms with 2 or more pretraining runs: Welch on the per-run means (:func:`stats.nested_welch`), whose unit
    is the pretraining run, so it covers pretraining- and fine-tuning-seed variance (pooling the runs' fine-tunes
    would count fine-tunes of one pretrained model as independent and understate the variance). Both with one:
    Welch over fine-tuning seeds, which covers fine-tuning-seed variance only. One run against several: no test,
    since the single run's pretraining-seed variance cannot be estimated.
    """
    from famlab.experiments.analysis.stats import nested_welch, welch

    runs, flat_a, flat_b = [len(a), len(b)], sum(a, []), sum(b, [])
    if min(len(flat_a), len(flat_b)) < 2:
        return {"pair": pair, "p": None, "test": None, "pretrain_seeds": runs,
                "verdict": "too few seeds for a test (need >= 2 each)"}
    if min(runs) >= 2:
        w, test, sources = nested_welch(a, b, alternative="two-sided"), RUN_MEANS, ["pretraining", "fine-tuning"]
    elif max(runs) >= 2:
        return {"pair": pair, "p": None, "test": None, "pretrain_seeds": runs,
                "verdict": f"too few pretraining seeds for a test that covers them ({runs[0]} and {runs[1]}; "
                           "need >= 2 each)"}
    else:
        w, test, sources = welch(flat_a, flat_b, alternative="two-sided"), SEED_VALUES, ["fine-tuning"]
    return {"pair": pair, "diff": w.diff, "ci": [w.ci_low, w.ci_high], "p": w.p, "test": test,
            "variance": [f"{v} seeds" for v in sources], "pretrain_seeds": runs, "units": [w.n_a, w.n_b],
            "df": w.df if math.isfinite(w.df) else None}


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 1e4):
        return f"{int(x):.3g}" if abs(x) >= 1e9 else f"{int(x):,}"
    return f"{x:.{digits}f}"


def _ms(t: Stat | None) -> str:
    return "-" if t is None or t[2] == 0 else f"{t[0]:.3f} ± {t[1]:.3f} (n={t[2]})"


def tables(families: dict[str, ArmRow], majority: Reference | None, tfidf: Reference | None) -> tuple[str, str]:
    """(pretraining table, fine-tuning table) in Markdown: one row per arm (``families`` from :func:`summarize`),
    each family's scratch baseline once, after its last arm."""
    head = ("| family | objective | params | non-emb params | steps | corpus tokens | passes | FLOPs | val loss | "
            "val ppl | unigram floor | val loss 2x / 4x length | causal bits/byte | one-span bits/byte | "
            "PLL bits/byte | lr | tokens/s | wall s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in families.values():
        if (r := row.pretrain) is None:
            continue
        label = bpb_rule(row.family, str(row.objective))
        bpb = ([NOT_SCORED] * 3 if label == NOT_SCORED else  # the objective declares no text rule
               [*(_fmt(r.bits_per_byte) if label == rule else "-" for rule in ("causal", "one span")),
                _fmt(r.pll_bits_per_byte)])
        lines.append("| " + " | ".join([
            row.family, str(row.objective), _fmt(r.params), _fmt(r.non_embedding_params), str(r.steps),
            _fmt(r.corpus_tokens), _fmt(r.passes, 2), f"{r.flops:.3e}" if r.flops else "-", _fmt(r.val_loss),
            _fmt(r.val_ppl, 1), _fmt(r.unigram_loss), f"{_fmt(r.loss_2x)} / {_fmt(r.loss_4x)}",
            *bpb, f"{r.lr:.2g}", _fmt(r.tokens_per_s, 0), _fmt(r.wall_s, 1),
        ]) + " |")
    pre = "\n".join(lines)
    head2 = "| model | test acc | test F1 (macro) | test MCC |"
    lines = [head2, "|---|---|---|---|"]
    rows = list(families.items())
    for i, (arm, a) in enumerate(rows):
        if a.finetune is not None:
            lines.append(f"| {arm} pretrained | " + " | ".join(_ms(a.finetune[m]) for m in METRICS) + " |")
        last_of_family = all(other.family != a.family for _, other in rows[i + 1:])
        if a.scratch is not None and last_of_family:
            lines.append(f"| {a.family} scratch | " + " | ".join(_ms(a.scratch[m]) for m in METRICS) + " |")
    for name, ref in (("majority class", majority), ("TF-IDF + logistic regression", tfidf)):
        if ref:
            lines.append(f"| {name} (reference) | " + " | ".join(_fmt(ref[m]) for m in METRICS) + " |")
    return pre, "\n".join(lines)


def _family_colors(families: list[str]) -> dict[str, str]:
    palette = {"bert": "tab:blue", "gpt": "tab:orange", "t5": "tab:green"}
    return {f: palette.get(f, f"C{i}") for i, f in enumerate(families)}


def _curve(run: RunRecord, key: str) -> tuple[list[float], list[float], list[float], list[float]]:
    """(train x, train loss, val x, val loss) with x = ``key`` (budget/tokens or budget/flops) per step.

    Validation rows carry no budget column, so x comes from the budget per step of the training rows
    (constant per step: same batch shape every step); the step-0 validation (before training) is at x = 0.
    """
    train = [r for r in run.metrics if "train/loss" in r and key in r]
    per_step = statistics.median(r[key] / (r["step"] + 1) for r in train) if train else math.nan
    tx = [r[key] for r in train]
    ty = [r["train/loss"] for r in train]
    val = [r for r in run.metrics if "val/loss" in r]
    vx = [0.0 if r["step"] == 0 and i == 0 else r["step"] * per_step for i, r in enumerate(val)]
    return tx, ty, vx, [r["val/loss"] for r in val]


def plot_pretraining(
    runs: list[RunRecord], families: dict[str, ArmRow], path: Path, plan: Plan | None = None
) -> Path:
    """One panel pair per arm: loss vs tokens read and vs training FLOPs, with the arm's unigram floor.

    Up to four arms are columns (tokens on top, FLOPs below); more arms are rows, so the figure grows in
    height instead of becoming too wide to read.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pre = {a: rs for a in families if (rs := pretrain_runs(runs, a, plan))}
    colors = _family_colors(list(dict.fromkeys(r.family for r in families.values())))
    n = max(1, len(pre))
    tall = n > 4
    shape, size = ((n, 2), (9.6, 3.4 * n)) if tall else ((2, n), (4.6 * n, 7.2))
    fig, axes = plt.subplots(*shape, figsize=size, squeeze=False)
    crossed = _crossed(families)
    for col, (arm, rs) in enumerate(pre.items()):
        fam = families[arm].family
        for row, (key, unit, short) in enumerate((("budget/tokens", "tokens read by the network", "tokens"),
                                                  ("budget/flops", "training FLOPs", "FLOPs"))):
            ax = axes[col][row] if tall else axes[row][col]
            for i, r in enumerate(rs):
                tx, ty, vx, vy = _curve(r, key)
                seed = r.config.seed
                ax.plot(tx, ty, color=colors[fam], alpha=0.35, lw=1, label="train loss" if i == 0 else None)
                ax.plot(vx, vy, "o-", color=colors[fam], ms=3, label=f"val loss (seed {seed})")
            pre_row = families[arm].pretrain
            floor = pre_row.unigram_loss if pre_row is not None else None
            if floor is not None and not math.isnan(floor):
                ax.axhline(floor, color="gray", ls="--", lw=1, label=f"unigram floor {floor:.2f}")
            ax.set_xlabel(unit)
            ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))  # 1e5 tokens / 1e11 FLOPs: no overlap
            ax.set_ylabel("loss (nats per label token)")
            ax.set_title(f"{fam} ({families[arm].objective}): loss vs {short}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    per = "arm (family, objective)" if crossed else "family"
    fig.suptitle(f"Pretraining loss per {per} (objectives differ: compare each with its own floor)")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / size[1]))  # keep the suptitle clear of the first row's titles
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_finetune(families: dict[str, ArmRow], majority: Reference | None, tfidf: Reference | None, path: Path
                  ) -> Path:
    """Fine-tune test scores per arm (mean +- std over seeds), pretrained and (once per family) scratch, with
    reference lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(families)
    many = len(names) > 4  # many arms: one metric per row, so the figure does not become too wide to read
    width = max(5.0, 1.1 * len(names) + 2)
    wide = ((1, len(METRICS)), (5 * len(METRICS), 4.2))
    shape, size = ((len(METRICS), 1), (width, 4.2 * len(METRICS))) if many else wide
    fig, axes = plt.subplots(*shape, figsize=size, squeeze=False)
    colors = _family_colors(list(dict.fromkeys(r.family for r in families.values())))
    for ax, metric in zip(axes.flat, METRICS, strict=True):
        scratch_shown: set[str] = set()
        for i, arm in enumerate(names):
            fam = families[arm].family
            for j, (label, hatch) in enumerate((("finetune", None), ("scratch", "//"))):
                stat = (getattr(families[arm], label) or {}).get(metric)
                if stat is None or stat[2] == 0 or (label == "scratch" and fam in scratch_shown):
                    continue
                scratch_shown.update([fam] if label == "scratch" else [])
                x = i + (j - 0.5) * 0.38
                ax.bar(x, stat[0], width=0.36, yerr=stat[1], capsize=4, color=colors[fam],
                       alpha=1.0 if label == "finetune" else 0.45, hatch=hatch, edgecolor="black", lw=0.5,
                       label=("pretrained" if label == "finetune" else "scratch") if i == 0 else None)
        for ref, name, style in ((majority, "majority class", ":"), (tfidf, "TF-IDF + LR", "--")):
            if ref:
                ax.axhline(ref[metric], color="black", ls=style, lw=1, label=f"{name} {ref[metric]:.3f}")
        ax.set_xticks(range(len(names)), names, rotation=30 if many else 0, ha="right" if many else "center")
        ax.set_xlabel("left bar: pretrained, right: scratch (once per family)")
        ax.set_ylabel(f"{metric} (fraction)" if metric != "test/mcc" else "test/mcc (-1 to 1)")
        ax.set_title(f"Fine-tuning {metric}, mean ± std over seeds")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def build_report(dirs: list[Path], out_dir: Path) -> ReportResults:
    """Write ``report.md``, ``pretrain_curves.png``, ``finetune_scores.png`` and ``results.json`` to ``out_dir``."""
    runs, plan = collect(dirs)
    probes = [r for r in runs if r.job == "probe"]
    runs = [r for r in runs if r.job != "probe"]
    if not runs:
        raise ConfigInputError(f"famlab report: no pretraining or fine-tuning runs in {[str(d) for d in dirs]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    families = summarize(runs, plan)
    majority = majority_reference(runs)
    tfidf = tfidf_reference(runs, out_dir / "reference.json", [d / "reference.json" for d in dirs])
    sig = significance(families)
    pre_table, ft_table = tables(families, majority, tfidf)
    tasks = suite_tasks(dirs, runs, plan, out_dir)
    scale = runs[0].config.size or "custom"
    smoke = transfer.smoke_scale(scale, plan)
    suite = suite_table.section(tasks, {a: r.family for a, r in families.items()}, smoke) if tasks else None
    failed = [f for d in dirs for f in read_failures(d)]
    curves = _plot(failed, out_dir, plot_pretraining, runs, families, out_dir / "pretrain_curves.png", plan)
    scores = _plot(failed, out_dir, plot_finetune, families, majority, tfidf,
                   out_dir / "finetune_scores.png") if suite is None else None
    zero_shot_runs = {arm: pretrain_runs(runs, arm, plan) for arm in families}
    md = [*report_header(runs, families, plan, scale), *failed_section(failed)]
    md += ["", *with_failed_rows(zero_shot_section(zero_shot_runs), failed, "zero-shot")]  # headline table
    zero_shot = zero_shot_rows(zero_shot_runs)
    md += ["", *pretraining_section(pre_table, _crossed(families)), *past_best_section(zero_shot_runs, families)]
    if suite is not None:  # a suite: every task and the suite score stand where the one task's table would
        md += suite.markdown
        sig = []
    else:
        md += finetune_section(ft_table, _between(families), sig)
    md += [significance_line(s) for s in sig]
    bought = transfer.section(runs, probes, families, out_dir, dirs, smoke)
    if suite is None:  # one task: a reference that beats every arm opens the verdict
        bought.markdown = with_reference_verdict(bought.markdown, families, majority, tfidf)
    md += ["", *with_failed_rows(bought.markdown, failed, "probe")]
    if suite is not None:  # the suite score's gains open "What pretraining bought"
        at = md.index("## What pretraining bought") + 2
        md[at:at] = suite.gains_markdown
    md += ["", "## Plots", ""] + ([f"![pretraining curves]({curves.name})", ""] if curves is not None else [])
    md += [f"![fine-tune scores]({scores.name})", ""] if scores is not None else []
    CompareFiles(out_dir).report_file.write_text("\n".join(md), encoding="utf-8")
    results: ReportResults = {
        "scale": scale, "plan": plan.to_json() if plan is not None else None,
        "families": {f: r.to_json() for f, r in families.items()}, "reference": {"majority": majority, "tfidf": tfidf},
        "significance": sig, "runs": [str(r.path) for r in [*runs, *probes]],
        "tables": {"pretrain": pre_table, **({"finetune": ft_table} if suite is None else suite.tables),
                   **bought.tables},
        "gains": [dataclasses.asdict(g) for g in bought.gains],
        "probe_gains": [dataclasses.asdict(g) for g in bought.probe_gains], "protocol": bought.protocol,
        "wall": dataclasses.asdict(bought.wall) if bought.wall is not None else None,
        "zero_shot": zero_shot, "wandb_summary": zero_shot_summary(zero_shot),  # scalars for the W&B report run
        "failed": [f.to_json() for f in failed],
    }
    if suite is not None:
        results["suite"] = suite.results
        # scalars for the W&B report run's summary (wandb_report.report_summary)
        results["wandb_summary"] = {**results.get("wandb_summary", {}), **suite.summary}
    CompareFiles(out_dir).results_file.write_text(json.dumps(results, indent=2, default=str) + "\n", "utf-8")
    return results


# what a reference that beats every arm means, and what to change to measure what pretraining teaches
REFERENCE_MEANING = {
    "majority class": (
        "every arm scores below always answering the most frequent label, so fine-tuning did not learn the task at "
        "this budget",
        "give fine-tuning more (`finetune.max_steps`, a bigger budget or preset) before reading any family's gain"),
    "TF-IDF + logistic regression": (
        "at this scale the task is solved better by word identity (which words a text holds) than by any family's "
        "pretraining",
        "to measure what pretraining teaches, give it more (a bigger budget or preset: `famlab compare cpu` on a CPU, "
        "`famlab compare small` on a GPU) or use a task that needs more than word identity (word order, negation, "
        "sentence pairs)"),
}


def reference_verdict(families: dict[str, ArmRow], references: dict[str, Reference | None],
                      metric: str = "test/acc") -> str | None:
    """The verdict's reference line when a reference (``references``: name -> its row, named as in
    :data:`REFERENCE_MEANING`) beats every pretrained arm's mean ``metric``: the reference, its score against the best
    arm's, what that means and what to change. The majority class is named first (the stronger statement). None when
    an arm reaches every reference, or no arm was fine-tuned."""
    arms = {arm: row.finetune[metric][0] for arm, row in families.items()
            if row.finetune is not None and row.finetune[metric][2] > 0}
    if not arms:
        return None
    best = max(arms, key=lambda arm: arms[arm])
    for name, (meaning, change) in REFERENCE_MEANING.items():
        ref = references.get(name)
        if ref and ref.get(metric) is not None and ref[metric] > arms[best]:
            label = metric.removeprefix("test/")
            return (f"**The {name} reference beats every arm**: test {label} {ref[metric]:.3f} against the best arm's "
                    f"mean {arms[best]:.3f} ({best}): {meaning}; {change}.")
    return None


def with_reference_verdict(bought: list[str], families: dict[str, ArmRow], majority: Reference | None,
                           tfidf: Reference | None) -> list[str]:
    """The "What pretraining bought" section (``bought``, markdown lines) opening with :func:`reference_verdict`'s
    line where a reference beats every arm (``famlab compare`` prints this section as its verdict)."""
    line = reference_verdict(families, {"majority class": majority, "TF-IDF + logistic regression": tfidf})
    if line is None:
        return bought
    at = bought.index("## What pretraining bought") + 2
    return [*bought[:at], line, "", *bought[at:]]


def failed_section(failed: list[StepFailure]) -> list[str]:
    """The optional steps that failed, one line each with its reason (the comparison completed without them)."""
    if not failed:
        return []
    lines = ["", "## Steps that failed", "",
             "These optional steps failed; the comparison completed without them (tracebacks in `compare.log`, "
             "a plot's in `report.log`; `famlab compare ... run_dir=<this directory> resume=auto` retries them):", ""]
    return lines + [f"- **{f.where}**: {f.reason}" for f in failed]


def with_failed_rows(section: list[str], failed: list[StepFailure], step: str) -> list[str]:
    """``section`` (markdown lines) with one row per failed ``step`` appended to its first table, the failed cells
    reading ``failed: <reason>``; a section of its own when the step failed for every arm (no table)."""
    rows = [f for f in failed if f.step == step and f.arm]
    if not rows:
        return section
    section = "\n".join(section).split("\n")  # a table may be one element of several lines
    table = [i for i, line in enumerate(section) if line.startswith("|")]
    if not table:
        head = {"zero-shot": "## Zero-shot multiple choice (family-agnostic)", "probe": "### Linear probe"}[step]
        return [*section, head, "", "| arm | result |", "|---|---|",
                *(f"| {f.arm}{_seed_task(f)} | failed: {f.reason} |" for f in rows), ""]
    first = section[table[0]]
    end = table[0]
    while end + 1 < len(section) and section[end + 1].startswith("|"):
        end += 1
    columns = first.count("|") - 1
    added = [f"| {f.arm}{_seed_task(f)} | failed: {f.reason} |" + " - |" * (columns - 2) for f in rows]
    return [*section[: end + 1], *added, *section[end + 1:]]


def _seed_task(f: StepFailure) -> str:
    return f" (seed {f.seed}{f', {f.task}' if f.task else ''})"


def _plot(failed: list[StepFailure], out_dir: Path, fn: Callable[..., Path], *args: object) -> Path | None:
    """A plot, or None with its failure recorded in ``failed`` (a plot is optional: the tables are the report)."""
    import traceback

    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - a plot that fails leaves the report without it, nothing more
        failed.append(StepFailure(step="plots", reason=f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"))
        with (out_dir / "report.log").open("a", encoding="utf-8") as f:
            f.write("".join(traceback.format_exception(e)))
        return None


def _crossed(families: dict[str, ArmRow]) -> bool:
    """Whether the rows are arms of families x ``compare.objectives`` rather than one per family."""
    return any(a != r.family for a, r in families.items())


def _between(families: dict[str, ArmRow]) -> str:
    return "arms (family x objective)" if _crossed(families) else "families"


def report_header(
    runs: list[RunRecord], families: dict[str, ArmRow], plan: Plan | None, scale: str
) -> list[str]:
    """The title, the scale line and the budget line."""
    first_cfg = runs[0].config
    md = [f"# famlab comparison: {', '.join(families)}", ""]
    m = first_cfg.model
    per_family = {r.family: r.config.data.batch_size for r in runs}
    batches = " / ".join(f"{f} {b}" for f, b in per_family.items())  # size presets may set it per family
    md.append(f"Scale: `{scale}` (dim {m.dim}, {m.num_layers} layers, {m.num_heads} heads, "
              f"seq_len {first_cfg.data.seq_len}, pretraining batch {batches}, "
              f"corpus `{first_cfg.data.corpus}`, task `{first_cfg.data.task}`).")
    departures = architecture_departures(runs)
    if departures:
        md.append(f"Settings that differ from each family's reference architecture (`famlab config <family>`): "
                  f"{departures}.")
    if plan is not None:
        what = {"flops": "training FLOPs (families.flops)", "tokens": "corpus tokens",
                "params": "non-embedding parameters (all but nn.Embedding tables)"}[plan.match]
        md.append(f"Budget matched on **{what}**: largest relative difference between {_between(families)} "
                  f"{plan.achieved_spread:.2%} (tolerance {plan.tolerance:.0%}); reference: {plan.reference}.")
    return md


def architecture_departures(runs: list[RunRecord]) -> str:
    """Each pretrained family's ``model`` settings that differ from its faithful ones, such as a size preset's
    ``pos=rope`` for BERT: ``bert pos=rope (reference learned); gpt dropout=0.0 (reference 0.1)``; ``""`` if none."""
    parts, seen = [], set()
    for run in runs:
        if run.job != "pretrain" or run.family in seen:
            continue
        seen.add(run.family)
        model = to_plain(run.config)["model"]  # as config.yaml writes it (enums as their values)
        differ = [f"{key}={model[key]} (reference {ref})" for key, ref in family_settings(run.family).items()
                  if key in model and str(model[key]).lower() != str(ref).lower()]
        if differ:
            parts.append(f"{run.family} " + ", ".join(differ))
    return "; ".join(parts)


def bpb_rule(family: str, objective: str) -> str:
    """How bits per byte scored an arm's validation text (objectives/evaluation.py), as the arm's objective declares
    it (``ObjectiveRules.bpb_label``, looked up by family x objective): ``PLL`` (a masked LM, one mask at a time),
    ``one span`` (a span-corruption model: the whole text as the one masked span of an empty input), ``causal`` (the
    text token by token from its start: GPT, and T5 trained as a prefix LM or UL2) or ``not scored`` (an objective
    that declares no text rule)."""
    return rules_of(family, objective).bpb_label


def pretraining_section(pre_table: str, crossed: bool) -> list[str]:
    return ["## Pretraining", "", pre_table, "",
            "Validation losses of different objectives are not comparable with each other (different targets); "
            "each family's loss is shown against its own unigram floor. Bits per byte is scored by three rules, "
            "one column each, and only figures in one column compare: **causal** (the text token by token from "
            "its start, as a causal LM is trained), **one-span** (a span-corruption model asked for the whole text "
            "as the one masked span of an empty input: far from the ~15 % short spans it trained on, so it "
            "overstates its bits) and **PLL** (BERT's pseudo-log-likelihood, one mask at a time: not a "
            "likelihood). The 2x / 4x length columns are each objective's own validation loss on longer blocks; "
            "a span-corruption model's longer blocks keep a training block's number of noise spans and tokens "
            "(a lower noise density), so it meets only the sentinels, span lengths and target length it trained "
            "on, and its column measures how far its input positions extrapolate, as the others' do for their "
            "positions." + (" Each arm's bits per byte conditions on its own objective's input format." if crossed
                            else ""), ""]


def finetune_section(ft_table: str, between: str, sig: list[Significance] | None = None) -> list[str]:
    return ["## Fine-tuning (test split)", "", ft_table, "",
            f"## Do {between} differ by more than seed variation?", "", significance_note(sig or []), ""]


def significance_note(sig: list[Significance]) -> str:
    """Which test the family-vs-family lines ran and which seed variance it covers (from each line's ``test``)."""
    tests = {s.get("test") for s in sig}
    flat = ("Welch's t-test (unequal variances) on fine-tuned test accuracy over the fine-tuning seeds of one "
            "pretraining run per arm: it covers fine-tuning-seed variance only, not pretraining-seed variance "
            "(`compare.pretrain_seeds` with 2 or more seeds adds it).")
    nested = ("Welch's t-test (unequal variances) on each pretraining run's mean fine-tuned test accuracy (the mean "
              "over its fine-tuning seeds): the pretraining run is the unit, so the test covers both pretraining-seed "
              "and fine-tuning-seed variance (fine-tunes of one pretrained model share it and are not independent, "
              "so pooling them would understate the variance). With k pretraining seeds an arm contributes k values "
              "(df at most 2k - 2): with 2 seeds only a large, consistent difference can reach significance, and "
              "'within seed variation' is weak evidence of no difference. A two-level bootstrap (pretraining seeds, "
              "then fine-tuning seeds within each) is not used: with 2 pretraining seeds it draws only 3 distinct "
              "sets of runs per arm, a coarse null distribution that understates the between-run variance.")
    parts = [nested] if RUN_MEANS in tests else []
    if SEED_VALUES in tests or not parts:
        parts.append(f"Pairs whose arms have one pretraining run each: {flat}" if parts else flat)
    return " ".join(parts) + " Holm-corrected across pairs; Holm p < 0.05 counts as exceeding seed variation."


def significance_line(s: Significance) -> str:
    p = "-" if s["p"] is None else f"{s['p']:.3g}" + (f", Holm {s['p_holm']:.3g}" if "p_holm" in s else "")
    diff = f", mean difference {s['diff']:+.3f}" if "diff" in s else ""
    if s.get("test") == RUN_MEANS:
        diff += f" ({s['units'][0]} vs {s['units'][1]} pretraining-run means)"
    return f"- {s['pair']}: p = {p}{diff}: {s['verdict']}"


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab report <dir>... [--out=<dir>]`` (default: the first directory)."""
    out = next((o.split("=", 1)[1] for o in overrides if o.lstrip("-").startswith("out=")), None)
    if not presets or any(not o.lstrip("-").startswith("out=") for o in overrides) or flags:
        raise ConfigInputError("usage: famlab report <comparison, sweep or run dir>... [--out=<dir>]")
    dirs = [Path(p) for p in presets]
    out_dir = Path(out) if out else dirs[0]
    if len(dirs) == 1 and (dirs[0] / "sweep.yaml").is_file():  # a `famlab sweep` directory: its own summary
        from famlab.experiments.analysis.sweep_report import rebuild

        print(rebuild(dirs[0], out_dir), end="")
        return 0
    build_report(dirs, out_dir)
    print(CompareFiles(out_dir).report_file.read_text(encoding="utf-8"))
    return 0
