"""The suite section of a comparison's report: every task, every arm, and the suite score.

A suite comparison (:mod:`famlab.experiments.steps.compare_suite`) fine-tunes and probes every task under one
protocol. Per task and per arm this section reads the headline test metric (the task's ``metric``) of

- the pretrained arm's fine-tunes (one value per pretraining seed x fine-tuning seed),
- its family's scratch fine-tunes (one value per fine-tuning seed),
- the linear probe of the pretrained body (one per pretraining seed) and of the random-initialised bodies,

and renders them with :func:`famlab.experiments.analysis.suite_score.render_suite_table`: mean ± 95 % CI over seeds per
task, and the suite score (the per-seed macro average over tasks, as GLUE), with majority-class and TF-IDF rows.
The suite score of each pretrained arm is then set against its scratch baseline as the gain table of
:mod:`famlab.experiments.analysis.transfer` does for one task (one-sided Welch over per-seed suite scores, Holm
across arms).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from famlab.datamodules.suite import TaskSpec
from famlab.experiments.analysis import transfer
from famlab.experiments.analysis.results import ArmRow, FinetuneResult, ProbeResult, RunRecord
from famlab.experiments.analysis.suite_score import (
    TaskResult,
    render_suite_table,
    suite_score,
    suite_seeds,
    task_interval,
)

if TYPE_CHECKING:
    from typing_extensions import NotRequired  # typing's own from Python 3.11

CAPTION = ("Per task: test score (the task's headline metric) of each pretrained arm, its family's scratch baseline "
           "(same grid, seeds and validation selection) and the linear probe of the pretrained body and of "
           "random-initialised bodies of the same shape. The suite score averages the tasks' headline metrics per "
           "seed (GLUE's macro average) and gives the mean ± 95 % CI over seeds; reference rows are deterministic.")


@dataclass
class TaskRuns:
    """What one suite task left on disk, as :func:`famlab.experiments.analysis.report.collect` reads it.

    Attributes:
        spec: the task (name, headline metric).
        runs: its fine-tune and probe run records, each labelled with its ``arm`` (``None`` for scratch).
        references: reference name -> its test scores (``test/acc`` ...), or None where there is none.
    """

    spec: TaskSpec
    runs: list[RunRecord]
    references: dict[str, dict[str, float] | None]


def _pretrained_from(run: RunRecord) -> str:
    """The pretraining run a fine-tune or probe started from (its folder name), or ``scratch``."""
    return Path(run.init).name


def _finetune_seeds(runs: list[RunRecord], metric: str) -> dict[str, float]:
    """Seed -> test score; seeds of fine-tunes from a pretrained run are ``<pretraining run>/<seed>``."""
    out = {}
    for r in runs:
        if not isinstance(r.results, FinetuneResult):
            continue
        start = _pretrained_from(r)
        for seed, scores in r.results.seeds.items():
            out[seed if start == "scratch" else f"{start}/{seed}"] = float(scores[metric])
    return out


def _probe_seeds(runs: list[RunRecord], metric: str) -> tuple[dict[str, float], dict[str, float]]:
    """(pretrained body: pretraining run -> score, random-init bodies: ``<pretraining run>/<seed>`` -> score)."""
    body, rand = {}, {}
    for r in runs:
        if not isinstance(r.results, ProbeResult):
            continue
        start = _pretrained_from(r)
        body[start] = float(r.results.pretrained.test[metric])
        rand.update({f"{start}/{s}": float(v.test[metric]) for s, v in r.results.random.items()})
    return body, rand


def suite_rows(tasks: list[TaskRuns], arms: dict[str, str]) -> dict[str, list[TaskResult]]:
    """Table row -> one :class:`TaskResult` per task, for rows that every task has.

    Args:
        tasks: the suite's tasks in order.
        arms: arm -> family, in report order.

    Returns:
        Per arm ``<arm> pretrained``, ``<arm> probe``, ``<arm> probe, random-init body``, and each family's
        ``<family> scratch`` after its last arm.
    """
    rows: dict[str, list[TaskResult]] = {}

    def add(row: str, task: TaskRuns, seeds: dict[str, float]) -> None:
        if seeds:
            rows.setdefault(row, []).append(TaskResult(task.spec.name, task.spec.metric, seeds))

    order = list(arms.items())
    for i, (arm, family) in enumerate(order):
        for t in tasks:
            metric = t.spec.headline
            mine = [r for r in t.runs if r.arm == arm]
            add(f"{arm} pretrained", t, _finetune_seeds([r for r in mine if r.job == "finetune"], metric))
            body, rand = _probe_seeds([r for r in mine if r.job == "probe"], metric)
            add(f"{arm} probe", t, body)
            add(f"{arm} probe, random-init body", t, rand)
        if all(f != family for _, f in order[i + 1:]):
            for t in tasks:
                scratch = [r for r in t.runs if r.job == "finetune" and _pretrained_from(r) == "scratch"
                           and r.family == family]
                add(f"{family} scratch", t, _finetune_seeds(scratch, t.spec.headline))
    return {row: results for row, results in rows.items() if len(results) == len(tasks)}


def suite_gains(rows: dict[str, list[TaskResult]], arms: dict[str, str]) -> list[transfer.Gain]:
    """Per arm: its per-seed suite scores against its family's scratch suite scores (one-sided Welch, Holm); with
    several pretraining runs each run's mean suite score is one value (:func:`transfer.finetune_gains`)."""
    values: dict[str, ArmRow] = {}
    for arm, family in arms.items():
        pre, scratch = rows.get(f"{arm} pretrained"), rows.get(f"{family} scratch")
        if pre and scratch:
            per_seed = suite_seeds(pre)  # keyed <pretraining run>/<fine-tuning seed>
            runs: dict[str, list[float]] = {}
            for key, score in per_seed.items():
                runs.setdefault(key.rsplit("/", 1)[0], []).append(score)
            values[arm] = ArmRow(family=family, finetune_values={"suite": list(per_seed.values())},
                                 finetune_nested_values={"suite": list(runs.values())},
                                 scratch_values={"suite": list(suite_seeds(scratch).values())})
    return transfer.finetune_gains(values, metric="suite")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def summary_keys(rows: dict[str, list[TaskResult]], references: dict[str, dict[str, float | None]]) -> dict[str, float]:
    """Flat W&B summary keys: ``suite/<row>`` (+ ``/low``, ``/high``) and ``suite/<task>/<row>`` (task means)."""
    out: dict[str, float] = {}
    for row, results in rows.items():
        score = suite_score(results)
        out[f"suite/{_slug(row)}"] = score.mean
        out[f"suite/{_slug(row)}/low"], out[f"suite/{_slug(row)}/high"] = score.low, score.high
        for r in results:
            out[f"suite/{_slug(r.name)}/{_slug(row)}"] = task_interval(r).mean
    for name, per_task in references.items():
        values = [v for v in per_task.values() if v is not None]
        if len(values) == len(per_task):
            out[f"suite/{_slug(name)}"] = sum(values) / len(values)
        out.update({f"suite/{_slug(t)}/{_slug(name)}": v for t, v in per_task.items() if v is not None})
    return out


def _protocol(tasks: list[TaskRuns]) -> list[str]:
    """Each task's sizes (and grid-edge selections); the grid and pooling lines once (the same for every task)."""
    lines: list[str] = []
    for i, t in enumerate(tasks):
        ft = [r for r in t.runs if r.job == "finetune"]
        for line in transfer.protocol_lines(ft, {}):
            if line.startswith(("Fine-tuning:", "Selected at an edge")):
                lines.append(f"{t.spec.name} ({t.spec.metric}): {line}")
            elif i == 0:
                lines.append(line)
    return lines


class SuiteTaskEntry(TypedDict):
    """A task of the suite in ``results.json``."""

    name: str
    task: str
    metric: str


class SuiteScoreEntry(TypedDict):
    """A row's suite score: mean and 95 % CI over its seeds."""

    mean: float
    low: float
    high: float
    seeds: int


class TaskScoreEntry(TypedDict):
    """A row's headline score on one task: per seed, and the mean and 95 % CI over them."""

    seeds: dict[str, float]
    mean: float
    low: float
    high: float


class SuiteRowEntry(TypedDict):
    """One row (an arm, pretrained or scratch, or a probe) of the suite."""

    suite: SuiteScoreEntry
    tasks: dict[str, TaskScoreEntry]


class SuiteGainEntry(TypedDict):
    """An arm's suite score minus its family's scratch baseline (a :class:`transfer.Gain`)."""

    arm: str
    diff: float
    ci: list[float]
    p: float
    p_holm: float
    test: str | None
    pretrain_seeds: int | None


class SuiteResults(TypedDict):
    """``results.json``'s ``suite``: the tasks, each row's scores, the references' and the gains."""

    tasks: list[SuiteTaskEntry]
    rows: dict[str, SuiteRowEntry]
    references: dict[str, dict[str, float | None]]  # reference -> task -> headline test score
    gains: NotRequired[list[SuiteGainEntry]]  # set last


@dataclass
class SuiteSection:
    """The report's suite section.

    Attributes:
        markdown: its lines.
        gains_markdown: lines for the "what pretraining bought" section.
        tables: ``suite``, and ``suite_gains`` where arms have 2 seeds a side.
        results: per task and row: seeds, mean, interval; the suite score per row; references (``results.json``'s
            ``suite``).
        summary: W&B summary keys (:func:`summary_keys`).
    """

    markdown: list[str]
    gains_markdown: list[str]
    tables: dict[str, str]
    results: SuiteResults
    summary: dict[str, float]


def section(tasks: list[TaskRuns], arms: dict[str, str], smoke: bool = False) -> SuiteSection:
    """The report's suite section.

    Args:
        tasks: the suite's tasks in order, their runs labelled with arms.
        arms: arm -> family, in report order.
        smoke: a smoke-scale comparison (:func:`transfer.smoke_scale`): the verdict says so first.
    """
    rows = suite_rows(tasks, arms)
    names = [t.spec.name for t in tasks]
    references = {name: {t.spec.name: (t.references.get(name) or {}).get(t.spec.headline) for t in tasks}
                  for name in ("majority class", "TF-IDF + LR")}
    md = ["## Task suite (test split)", "", f"Tasks: {', '.join(f'{t.spec.name} ({t.spec.task})' for t in tasks)}.", ""]
    tables: dict[str, str] = {}
    results: SuiteResults = {"tasks": [{"name": t.spec.name, "task": t.spec.task, "metric": t.spec.metric}
                                       for t in tasks], "rows": {}, "references": references}
    if rows:
        tables["suite"] = render_suite_table(rows, references).split("\n\n")[0]
        md += [tables["suite"], "", CAPTION, ""]
        for row, per_task in rows.items():
            score = suite_score(per_task)
            results["rows"][row] = {
                "suite": {"mean": score.mean, "low": score.low, "high": score.high, "seeds": score.n},
                "tasks": {r.name: {"seeds": dict(r.seeds), "mean": (iv := task_interval(r)).mean, "low": iv.low,
                                   "high": iv.high} for r in per_task},
            }
    else:
        md += [f"No arm has results on every task ({', '.join(names)}).", ""]
    gains = suite_gains(rows, arms)
    gains_md: list[str] = []
    if gains:
        tables["suite_gains"] = transfer.gain_table(gains)
        gains_md = ["### Suite score", "",
                    "Suite score of each pretrained arm minus its family's scratch baseline (per-seed suite scores; "
                    "one-sided Welch test, Holm-corrected across arms). " + transfer.unit_note(gains), "",
                    tables["suite_gains"], "",
                    transfer.verdict(gains, smoke), ""]
    protocol = _protocol(tasks)
    if protocol:
        md += ["### Suite protocol", "", *[f"- {line}" for line in protocol], ""]
    results["gains"] = [{"arm": g.arm, "diff": g.diff, "ci": [g.ci_low, g.ci_high], "p": g.p, "p_holm": g.p_holm,
                         "test": g.test, "pretrain_seeds": g.pretrain_seeds} for g in gains]
    return SuiteSection(markdown=md, gains_markdown=gains_md, tables=tables, results=results,
                        summary=summary_keys(rows, references))


SUITE_FILE = "suite.json"  # a suite comparison's record of its tasks (written by compare_suite)


def read_tasks(comp_dir: Path) -> list[tuple[TaskSpec, Path]] | None:
    """The (spec, folder) of each task of a suite comparison, from its ``suite.json``; None for one task."""
    path = comp_dir / SUITE_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    fields = {f.name for f in dataclasses.fields(TaskSpec)}
    return [(TaskSpec(**{k: v for k, v in t.items() if k in fields}), comp_dir / t["dir"]) for t in record["tasks"]]
