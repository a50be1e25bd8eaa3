"""``famlab compare data.task=suite``: every task of a suite fine-tuned and probed under the compare's protocol.

A suite (``suite``, a comma-separated list, or a YAML suite file; :func:`famlab.experiments.steps.suite.read_suite`)
is checked and, with ``compare.task_limit``, subsampled task by task before anything trains. Each task gets a
folder ``<compare dir>/<task name>/`` holding its subsample (``task.csv``) and, per arm, the same runs a
single-task comparison puts in the compare directory itself (``<arm>-ft-s<seed>``, ``<arm>-probe-s<seed>``,
``<family>-scratch``). ``suite.json`` in the compare directory lists the tasks, so ``famlab report`` finds them
(:mod:`famlab.experiments.analysis.suite_table`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from famlab.datamodules.suite import TaskSpec, load_suite_task
from famlab.experiments.analysis.suite_table import SUITE_FILE
from famlab.experiments.configuration.config import CompareConfig, DataConfig
from famlab.experiments.configuration.task import (
    check_compare_task,
    check_subsample,
    task_columns,
    task_data,
    task_split,
)

Subsample = Callable[[DataConfig, Path], dict[str, str | None]]


@dataclass(frozen=True)
class SuiteTask:
    """One task of a suite comparison.

    Attributes:
        spec: the task as the suite names it (columns, headline metric).
        dir: the folder of its runs, ``<compare dir>/<spec.name>``.
        data: the ``data.*`` settings its fine-tunes and probes read (the subsample's columns, or the spec's).
    """

    spec: TaskSpec
    dir: Path
    data: dict[str, str | None]


def check_tasks(data: DataConfig, compare: CompareConfig, specs: list[TaskSpec] | None) -> None:
    """Load every task once, and check its ``compare.task_limit`` subsample, so a bad task fails before the
    comparison starts.

    Args:
        data, compare: the comparison's ``data.*`` and its ``compare.task_limit`` / ``compare.task_eval_limit``.
        specs: the suite's tasks; None: the single task ``data.task``.

    Raises:
        DataError: one line naming the task (``datamodules.suite.load_suite_task``): a task with one class, a
            pair task without second texts, a missing column.
        ConfigInputError: a subsample with one class or an empty split
            (:func:`famlab.experiments.configuration.task.check_subsample`).
    """
    if specs is None:
        check_compare_task(data, compare)
        return
    for spec in specs:
        task = load_suite_task(spec, **task_split(data))
        check_subsample(task, compare.task_limit, compare.task_eval_limit, seed=data.seed,
                        source=f"data.task={data.task}: task '{spec.name}' ({spec.task})")


def prepare_tasks(
    data: DataConfig, specs: list[TaskSpec], comp_dir: Path, subsample: Subsample | None
) -> list[SuiteTask]:
    """Make each task's folder (with its subsample when ``subsample`` is given) and write ``suite.json``.

    Args:
        data: the comparison's ``data.*`` (``data.seed`` and the split fractions).
        specs: the suite's tasks.
        comp_dir: the comparison directory.
        subsample: writes a task's seeded subsample (``compare.task_limit``) to a CSV path and returns the
            ``data.*`` settings that read it; None: each task as it is.
    """
    tasks = []
    for spec in specs:
        folder = comp_dir / spec.name
        folder.mkdir(parents=True, exist_ok=True)
        if subsample is not None:
            columns = subsample(task_data(data, spec), folder / "task.csv")
        else:
            columns = task_columns(spec)
        tasks.append(SuiteTask(spec, folder, columns))
    record = {"tasks": [{**dataclasses.asdict(t.spec), "dir": t.spec.name} for t in tasks]}
    (comp_dir / SUITE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return tasks


def task_values(task: SuiteTask | None) -> dict[str, object]:
    """The ``data.*`` settings with which the fine-tunes and probes of ``task`` read it (none without a suite)."""
    return {} if task is None else {f"data.{key}": value for key, value in task.data.items()}
