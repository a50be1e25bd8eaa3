"""A suite's score and table: the macro average of each task's headline metric, mean ± CI over seeds.

As GLUE scores a model (Wang et al., 2019, "GLUE: A Multi-Task Benchmark and Analysis Platform for Natural
Language Understanding"): every task counts once, whatever its size, through its own headline metric
(accuracy, macro-F1 or MCC). famlab fine-tunes every task with the same seeds, so seed ``s`` has a suite score
(the average over tasks of seed ``s``'s scores), and the interval is :func:`famlab.experiments.analysis.stats.mean_ci`
over those per-seed suite scores; pairing the tasks by seed keeps the interval from counting the spread
between tasks as noise.

Reference rows (majority class, TF-IDF + logistic regression) are deterministic, one value per task; their
suite value is the same macro average.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from famlab.experiments.analysis.stats import mean_ci


@dataclass(frozen=True)
class TaskResult:
    """One arm's scores on one suite task.

    Attributes:
        name: the task's name in the suite (a table column).
        metric: its headline metric: ``acc`` | ``f1`` | ``mcc``.
        seeds: fine-tuning seed -> headline test score.
    """

    name: str
    metric: str
    seeds: Mapping[str, float]


@dataclass(frozen=True)
class Interval:
    """``mean`` with its confidence interval ``[low, high]`` over ``n`` seeds (``low == high`` when n is 1)."""

    mean: float
    low: float
    high: float
    n: int

    def fmt(self, digits: int = 3) -> str:
        """``0.512 ± 0.020`` (half-width of the interval), or ``0.512`` for one seed."""
        if self.n < 2:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {(self.high - self.low) / 2:.{digits}f}"


def task_interval(result: TaskResult, level: float = 0.95) -> Interval:
    """Mean and t interval of one task's headline score over its seeds."""
    values = list(result.seeds.values())
    return Interval(*mean_ci(values, level), n=len(values))


def suite_seeds(results: Sequence[TaskResult]) -> dict[str, float]:
    """Seed -> macro average over tasks of that seed's headline scores.

    Raises:
        ValueError: no tasks, or the tasks were not fine-tuned with the same seeds.
    """
    if not results:
        raise ValueError("a suite score needs at least one task")
    seeds = set(results[0].seeds)
    for r in results[1:]:
        if set(r.seeds) != seeds:
            raise ValueError(f"suite tasks have different seeds: {results[0].name} {sorted(seeds)}, "
                             f"{r.name} {sorted(r.seeds)}")
    return {s: statistics.fmean(r.seeds[s] for r in results) for s in sorted(seeds)}


def suite_score(results: Sequence[TaskResult], level: float = 0.95) -> Interval:
    """The suite score: the mean over seeds of the per-seed macro average, with its t interval."""
    per_seed = list(suite_seeds(results).values())
    return Interval(*mean_ci(per_seed, level), n=len(per_seed))


def reference_suite(values: Mapping[str, float | None], tasks: Sequence[str]) -> float | None:
    """A reference's suite value: the macro average of its per-task values (None if a task has none)."""
    picked = [values.get(t) for t in tasks]
    if any(v is None for v in picked):
        return None
    return statistics.fmean(v for v in picked if v is not None)


def render_suite_table(
    arms: Mapping[str, Sequence[TaskResult]],
    references: Mapping[str, Mapping[str, float | None]] | None = None,
    level: float = 0.95,
) -> str:
    """A markdown table: one row per arm and per reference, one column per task, then the suite score.

    Args:
        arms: arm name (e.g. ``gpt pretrained``) -> its results, one per task, the same tasks for every arm.
        references: reference name (e.g. ``majority class``) -> task name -> its headline test score.
        level: coverage of the intervals.

    Raises:
        ValueError: arms with different tasks, or an arm whose tasks have different seeds.
    """
    if not arms:
        raise ValueError("a suite table needs at least one arm")
    first = next(iter(arms.values()))
    tasks = [r.name for r in first]
    for arm, results in arms.items():
        if [r.name for r in results] != tasks:
            raise ValueError(f"arm '{arm}' has tasks {[r.name for r in results]}, expected {tasks}")
    seeds = {len(r.seeds) for rs in arms.values() for r in rs}
    ci = f"mean ± {level:.0%} CI half-width over {'/'.join(map(str, sorted(seeds)))} seeds"
    header = ["", *(f"{r.name} ({r.metric})" for r in first), "suite (macro avg)"]
    lines = [f"| {' | '.join(header)} |", "|" + "---|" * len(header)]
    for arm, results in arms.items():
        cells = [task_interval(r, level).fmt() for r in results] + [f"**{suite_score(results, level).fmt()}**"]
        lines.append(f"| {arm} | {' | '.join(cells)} |")
    for name, values in (references or {}).items():
        cells = [_plain(values.get(t)) for t in tasks] + [_plain(reference_suite(values, tasks))]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return "\n".join(lines) + f"\n\nTest scores, {ci}; the suite score averages each task's headline metric.\n"


def _plain(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"
