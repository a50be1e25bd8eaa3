"""Task suites: several classification tasks scored together (as GLUE is), each named by a :class:`TaskSpec`.

``data.task`` names a suite in one of three ways (see :func:`suite_specs`):

- ``suite``: the bundled WordNet suite, :data:`BUNDLED_SUITE` (supersense, pairs, domain);
- a comma-separated list of task specs (``wordnet-pairs,wordnet-domain``), each with the default columns;
- a YAML file ``tasks: [...]`` whose entries are a task spec string or a mapping with the keys of
  :class:`TaskSpec`. ``experiments`` reads the file (the only package that reads YAML) and passes the parsed
  entries to :func:`parse_suite`, which validates them here.

A suite's tasks are checked again when loaded (:func:`load_suite_task`): ``load_task`` refuses a task with one
class, and a pair task must have its second texts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from famlab.datamodules.bundled import BUNDLED_TASKS
from famlab.datamodules.errors import DataError
from famlab.datamodules.tasks import Task, load_task

METRICS = ("acc", "f1", "mcc")  # headline metric of a task: test accuracy, macro-F1 or Matthews correlation


@dataclass(frozen=True)
class TaskSpec:
    """One task of a suite.

    Attributes:
        name: short unique name (a column of the suite table, a sub run directory).
        task: what ``load_task`` reads: a bundled name, a ``.csv`` / ``.jsonl`` path, ``hf:<name>[:<config>]``.
        text_column, text_pair_column, label_column, split_column: the task's columns (``load_task``).
        pair: a sentence-pair task; a file or ``hf:`` pair task must name ``text_pair_column``.
        metric: the headline metric the suite score averages: ``acc`` | ``f1`` (macro) | ``mcc``.
    """

    name: str
    task: str
    text_column: str = "text"
    text_pair_column: str | None = None
    label_column: str = "label"
    split_column: str = "split"
    pair: bool = False
    metric: str = "acc"

    @property
    def headline(self) -> str:
        """The metric key in fine-tuning results, e.g. ``test/acc``."""
        return f"test/{self.metric}"


BUNDLED_SUITE = (
    TaskSpec("supersense", "wordnet-supersense"),
    TaskSpec("pairs", "wordnet-pairs", pair=True),
    TaskSpec("domain", "wordnet-domain"),
)
FIELDS = tuple(f.name for f in dataclasses.fields(TaskSpec))


def is_suite(value: str) -> bool:
    """Whether ``data.task=value`` names a suite rather than one task."""
    return value == "suite" or "," in value or Path(value).suffix in (".yaml", ".yml")


def _short_name(task: str) -> str:
    if task in BUNDLED_TASKS:
        return task.removeprefix("wordnet-")
    return Path(task.split(":")[-1]).stem or task


def _check_task_exists(task: str, where: str, base_dir: Path | None) -> str:
    """The spec with a relative file path made relative to ``base_dir``; unknown names fail."""
    if task in BUNDLED_TASKS or task.startswith("hf:"):
        return task
    path = Path(task).expanduser()
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if path.suffix in (".csv", ".jsonl") and path.is_file():
        return str(path)
    if path.suffix in (".csv", ".jsonl"):
        raise DataError(f"{where}: task file {path} does not exist")
    raise DataError(f"{where}: unknown task '{task}' (bundled: {', '.join(BUNDLED_TASKS)}; or a .csv/.jsonl "
                    "file, hf:<name>)")


def parse_suite(entries: Any, source: str, *, base_dir: Path | None = None,
                lines: list[int] | None = None) -> list[TaskSpec]:
    """Validate a suite's parsed entries.

    Args:
        entries: a list; each item a task spec string or a mapping with :class:`TaskSpec`'s keys (``task``
            required; ``name`` defaults to the task's short name).
        source: where the entries come from, for messages (a file name or ``data.task``).
        base_dir: relative file paths are read from here (a suite file's folder).
        lines: the 1-based line of each entry in ``source``, for messages.

    Raises:
        DataError: one line naming ``source`` (and the entry's line): not a list, an unknown key, no ``task``,
            an unknown task, an unknown metric, a pair task without ``text_pair_column``, a repeated name.
    """
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{source}: expected a non-empty list of tasks under 'tasks:'")
    specs: list[TaskSpec] = []
    for i, entry in enumerate(entries):
        where = f"{source} line {lines[i]}" if lines else f"{source} task {i + 1}"
        raw = {"task": entry} if isinstance(entry, str) else entry
        if not isinstance(raw, dict):
            raise DataError(f"{where}: a task is a spec string or a mapping, not {type(entry).__name__}")
        unknown = sorted(set(raw) - set(FIELDS))
        if unknown:
            raise DataError(f"{where}: unknown key '{unknown[0]}' (keys: {', '.join(FIELDS)})")
        if not isinstance(raw.get("task"), str) or not raw["task"].strip():
            raise DataError(f"{where}: no 'task' (a bundled name, a .csv/.jsonl file or hf:<name>)")
        task = _check_task_exists(raw["task"].strip(), where, base_dir)
        if not isinstance(raw.get("pair", False), bool):
            raise DataError(f"{where}: pair={raw['pair']!r} must be true or false")
        values = {k: (v if v is None or k == "pair" else str(v)) for k, v in raw.items() if k != "task"}
        spec = TaskSpec(name=str(values.pop("name", None) or _short_name(raw["task"])), task=task, **values)
        if spec.metric not in METRICS:
            raise DataError(f"{where}: metric '{spec.metric}' is not one of {', '.join(METRICS)}")
        # hf: specs find GLUE's pair columns themselves; files must name theirs
        if spec.pair and spec.task.endswith((".csv", ".jsonl")) and not spec.text_pair_column:
            raise DataError(f"{where}: task '{spec.name}' is a pair task (pair: true) but names no text_pair_column")
        if any(s.name == spec.name for s in specs):
            raise DataError(f"{where}: task name '{spec.name}' is used twice; give one a different 'name'")
        specs.append(spec)
    return specs


def suite_specs(value: str) -> list[TaskSpec]:
    """The suite ``data.task=value`` names when it is ``suite`` or a comma-separated list (not a file)."""
    if value == "suite":
        return list(BUNDLED_SUITE)
    bundled = {s.task: s for s in BUNDLED_SUITE}
    names = [v.strip() for v in value.split(",") if v.strip()]
    specs = parse_suite(names, f"data.task={value}")
    return [bundled.get(s.task, s) for s in specs]  # bundled tasks keep their own settings (pair, metric)


def load_suite_task(spec: TaskSpec, *, seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.1) -> Task:
    """Load one task of a suite with its columns, and check that it can be scored.

    Raises:
        DataError: what ``load_task`` raises (e.g. a task with one class); a pair task without second texts.
    """
    task = load_task(spec.task, text_column=spec.text_column, text_pair_column=spec.text_pair_column,
                     label_column=spec.label_column, split_column=spec.split_column, val_fraction=val_fraction,
                     test_fraction=test_fraction, seed=seed)
    if spec.pair and any(e.text_pair is None for e in task.train):
        raise DataError(f"suite task '{spec.name}' ({spec.task}): a pair task, but its rows have no second text; "
                        "set text_pair_column")
    return task
