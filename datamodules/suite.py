"""Task suites: several classification tasks scored together (as GLUE is), each named by a :class:`TaskSpec`.

``data.task`` names a suite in one of three ways (see :func:`suite_specs`):

- ``suite``: the bundled WordNet suite, :data:`BUNDLED_SUITE` (supersense, pairs, domain);
- a comma-separated list of task specs (``wordnet-pairs,wordnet-domain``), each with the default columns;
- a YAML file ``tasks: [...]`` whose entries are a task spec string or a mapping with the keys of
  :class:`TaskSpec` (``spec`` may stand for ``task``), or ``tasks: {name: entry, ...}`` where each key names its
  entry. ``experiments`` reads the file (the only package that reads YAML) and passes the parsed
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


SUITE_FORM = ("tasks: a list of tasks, or a mapping of task name to task; a task is a spec string or a mapping "
              f"with task: (or spec:) and optional {', '.join(k for k in FIELDS if k not in ('name', 'task'))}")
COLUMNS = ("text_column", "text_pair_column", "label_column", "split_column")
SPEC_ALIAS = "spec"  # ``spec:`` names the task as ``task:`` does (the word data.task's docs use)


def parse_suite(entries: object, source: str, *, base_dir: Path | None = None,
                lines: list[int] | None = None) -> list[TaskSpec]:
    """Validate a suite's parsed entries.

    Args:
        entries: a list, each item a task spec string or a mapping with :class:`TaskSpec`'s keys (``task``, or
            its alias ``spec``, required; ``name`` defaults to the task's short name); or a mapping of task name
            to such an item (the key is the name).
        source: where the entries come from, for messages (a file name or ``data.task``).
        base_dir: relative file paths are read from here (a suite file's folder).
        lines: the 1-based line of each entry in ``source``, for messages.

    Raises:
        DataError: one line naming ``source`` (and the entry's line): not a list or mapping, an unknown key, no
            ``task``, a value of the wrong type, an unknown task, an unknown metric, a pair task without
            ``text_pair_column``, a name that is not a plain folder name or is repeated.
    """
    if isinstance(entries, dict) and entries:
        _check_not_one_task(entries, source)
        items = [_named_entry(name, entry, _where(source, lines, i)) for i, (name, entry) in enumerate(entries.items())]
    elif isinstance(entries, list) and entries:
        items = list(entries)
    else:
        got = "nothing" if entries is None or entries in ([], {}) else type(entries).__name__
        raise DataError(f"{source}: expected a non-empty list (or a mapping of name: task) under 'tasks:', got {got} "
                        f"({SUITE_FORM})")
    specs: list[TaskSpec] = []
    for i, entry in enumerate(items):
        where = _where(source, lines, i)
        spec = _parse_entry(entry, where, base_dir)
        if any(s.name == spec.name for s in specs):
            raise DataError(f"{where}: task name '{spec.name}' is used twice; give one a different 'name'")
        specs.append(spec)
    return specs


def _where(source: str, lines: list[int] | None, i: int) -> str:
    return f"{source} line {lines[i]}" if lines and i < len(lines) else f"{source} task {i + 1}"


def _check_not_one_task(entries: dict, source: str) -> None:
    """``tasks: {task: a.csv, text_column: x}`` is one task written without its list dash, not tasks named
    ``task`` and ``text_column``: refuse it rather than read each key as a name."""
    keys = [k for k, v in entries.items() if k in (*FIELDS, SPEC_ALIAS) and not isinstance(v, dict)]
    if keys:
        raise DataError(f"{source}: 'tasks:' maps '{keys[0]}' to {entries[keys[0]]!r}, which reads as one task's "
                        f"settings; write the task as a list item ('- {{task: ...}}') or under a name "
                        f"('mine: {{task: ...}}'), or rename a task called '{keys[0]}'")


def _named_entry(name: object, entry: object, where: str) -> dict[str, object]:
    """An entry of the mapping form (``name: task``) as a list entry with its ``name``."""
    # YAML reads unquoted yes/no/on/off as booleans and ~ as null: neither is the name the user meant
    if not _is_text(name, optional=False):
        raise DataError(f"{where}: task name {name!r} is not a string; quote it")
    if entry is None:
        raise DataError(f"{where}: task '{name}' has no task (a bundled name, a .csv/.jsonl file or hf:<name>)")
    if isinstance(entry, str):
        return {"name": str(name), "task": entry}
    if not isinstance(entry, dict):
        raise DataError(f"{where}: task '{name}' is a spec string or a mapping, not {type(entry).__name__} "
                        f"({SUITE_FORM})")
    if "name" in entry and str(entry["name"]) != str(name):
        raise DataError(f"{where}: task '{name}' sets name: {entry['name']!r}; in the mapping form the key is the "
                        "name, so drop one")
    return {**entry, "name": str(name)}


def _parse_entry(entry: object, where: str, base_dir: Path | None) -> TaskSpec:
    """One list entry (a spec string or a mapping) as a checked :class:`TaskSpec`."""
    raw = {"task": entry} if isinstance(entry, str) else entry
    if not isinstance(raw, dict):
        raise DataError(f"{where}: a task is a spec string or a mapping, not {type(entry).__name__} ({SUITE_FORM})")
    raw = dict(raw)
    if SPEC_ALIAS in raw:
        if "task" in raw:
            raise DataError(f"{where}: both 'task' and 'spec' name the task; keep one")
        raw["task"] = raw.pop(SPEC_ALIAS)
    unknown = sorted(str(k) for k in set(raw) - set(FIELDS))
    if unknown:
        raise DataError(f"{where}: unknown key '{unknown[0]}' (keys: {', '.join(FIELDS)}, or spec for task)")
    if not isinstance(raw.get("task"), str) or not raw["task"].strip():
        raise DataError(f"{where}: no 'task' (or 'spec'): a bundled name, a .csv/.jsonl file or hf:<name>")
    task = _check_task_exists(raw["task"].strip(), where, base_dir)
    if not isinstance(raw.get("pair", False), bool):
        raise DataError(f"{where}: pair={raw['pair']!r} must be true or false")
    for key in ("name", "metric", *COLUMNS):
        if key in raw and not _is_text(raw[key], optional=key in ("name", "text_pair_column")):
            raise DataError(f"{where}: {key}: {raw[key]!r} is not a {'column name' if key in COLUMNS else key}")
    # checked above: known field names; pair a bool, the rest strings or None
    values: dict[str, Any] = {k: (v if v is None or k == "pair" else str(v)) for k, v in raw.items() if k != "task"}
    spec = TaskSpec(name=str(values.pop("name", None) or _short_name(raw["task"])), task=task, **values)
    _check_name(spec.name, where)
    if spec.metric not in METRICS:
        raise DataError(f"{where}: metric '{spec.metric}' is not one of {', '.join(METRICS)}")
    # hf: specs find GLUE's pair columns themselves; files must name theirs
    if spec.pair and spec.task.endswith((".csv", ".jsonl")) and not spec.text_pair_column:
        raise DataError(f"{where}: task '{spec.name}' is a pair task (pair: true) but names no text_pair_column")
    return spec


def _is_text(value: object, *, optional: bool) -> bool:
    """Whether a YAML value can be a name: a string, or a number (a CSV header ``1`` reads back as 1); not a list,
    a mapping or a boolean (YAML's unquoted yes / no)."""
    if value is None:
        return optional
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _check_name(name: str, where: str) -> None:
    """A task name becomes a folder of the run directory: a plain name, not a path."""
    if not name.strip() or name.strip() in (".", "..") or any(c in name for c in "/\\\0"):
        raise DataError(f"{where}: task name {name!r} is not a plain folder name (no '/', '\\', '.' or '..')")


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
