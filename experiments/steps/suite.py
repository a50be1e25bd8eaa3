"""``famlab finetune ... data.task=suite``: fine-tune on every task of a suite, then score the suite.

``data.task`` names a suite as ``suite`` (the bundled WordNet suite), a comma-separated list of tasks, or a
YAML file (``datamodules.suite`` describes the entries)::

    tasks:
      - wordnet-pairs                       # a bundled task, with its own settings
      - {name: sst2, task: "hf:glue:sst2"}  # GLUE, for a user with the hub
      - {name: mrpc, task: "hf:glue:mrpc", pair: true, metric: f1}
      - {name: mine, task: data/mine.csv, text_column: premise, text_pair_column: hypothesis, pair: true}

or, naming each task by its key (``spec:`` may stand for ``task:``)::

    tasks:
      topics: {spec: topics.csv, text_column: text, label_column: label}
      sentiment: {spec: sent.csv, text_column: t, label_column: y, metric: f1}
      pairs: wordnet-pairs

Every task is fine-tuned in turn by :func:`famlab.experiments.steps.finetune.finetune`, under the same config and
seeds, in ``<run_dir>/<task name>/``. The suite directory gets ``results.json`` (per task: seeds, mean and
interval, majority and TF-IDF references; the suite score) and ``suite_table.md``. Every task is loaded and
checked before the first one trains, so a bad suite fails at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from pathlib import Path
from typing import TypedDict

import yaml
from famlab.datamodules.suite import SUITE_FORM, TaskSpec, is_suite, load_suite_task, parse_suite, suite_specs
from famlab.datamodules.tasks import Task
from famlab.experiments.analysis.baselines import TFIDF_RULE, tfidf
from famlab.experiments.analysis.suite_score import (
    TaskResult,
    reference_suite,
    render_suite_table,
    suite_score,
    task_interval,
)
from famlab.experiments.analysis.suite_table import SuiteScoreEntry
from famlab.experiments.configuration.config import ConfigInputError, with_values
from famlab.experiments.configuration.plans import FinetunePlan, TaskData
from famlab.experiments.configuration.task import task_data, task_split
from famlab.experiments.plumbing.data_cache import cache_dir
from famlab.experiments.plumbing.prepare_once import env_rank
from famlab.experiments.plumbing.reliability import Preempted
from famlab.experiments.plumbing.rundir import CompareDir, make_run_dir, task_run_name, write_json
from famlab.experiments.steps.finetune import finetune
from famlab.experiments.steps.init import Init

log = logging.getLogger("famlab")
TABLE = "suite_table.md"


class SuiteTaskRow(TypedDict):
    """One task of a suite's ``results.json``: its fine-tune's headline scores and the references."""

    name: str
    task: str
    metric: str  # the headline metric: acc | f1 | mcc
    run_dir: str
    num_classes: int
    sizes: dict[str, int]
    seeds: dict[str, float]  # seed -> headline test score
    mean: float
    low: float
    high: float
    majority: float
    tfidf: float


class _FinetuneSuiteResults(TypedDict):
    job: str
    family: str
    init: str | None
    tasks: list[SuiteTaskRow]
    suite: SuiteScoreEntry
    references: dict[str, float | None]  # reference name -> its suite value
    wall_s: float


class FinetuneSuiteResults(_FinetuneSuiteResults, total=False):
    """A suite's ``results.json`` (:func:`finetune_suite`), plus the rendered ``table`` (not written there)."""

    table: str


def read_suite(value: str) -> list[TaskSpec] | None:
    """The suite ``data.task=value`` names, or None when it names a single task.

    A suite file is a mapping with ``tasks:`` (and an optional ``name:``); ``tasks`` is a list of entries or a
    mapping of task name to entry (:data:`famlab.datamodules.suite.SUITE_FORM`).

    Raises:
        ConfigInputError: a suite file that is missing, not UTF-8, not YAML, or not of that form; one line naming
            the file (and the line).
        DataError: a suite entry that is invalid (``datamodules.suite.parse_suite``).
    """
    if not is_suite(value):
        return None
    if Path(value).suffix not in (".yaml", ".yml"):
        return suite_specs(value)
    path = Path(value).expanduser()
    if not path.is_file():
        raise ConfigInputError(f"data.task={value}: no such suite file")
    data, node = _load_yaml(path)
    if not isinstance(data, dict) or "tasks" not in data:
        got = "an empty file" if data is None else type(data).__name__
        raise ConfigInputError(f"{path}: a suite file is a mapping with 'tasks:', not {got} ({SUITE_FORM})")
    unknown = sorted(str(k) for k in set(data) - {"tasks", "name"})
    if unknown:
        raise ConfigInputError(f"{path}: unknown key '{unknown[0]}' (keys: tasks, name)")
    tasks_node = (next((v for k, v in node.value if getattr(k, "value", None) == "tasks"), None)
                  if node is not None else None)  # None: an empty file, refused above
    lines = _entry_lines(tasks_node, path)
    entries = data["tasks"]
    # a YAML merge key (<<) makes the nodes differ from the parsed entries: then messages count tasks instead
    lines_fit = isinstance(entries, (list, dict)) and len(lines) == len(entries)
    return parse_suite(entries, str(path), base_dir=path.parent, lines=lines if lines_fit else None)


def _load_yaml(path: Path) -> tuple[object, yaml.Node | None]:
    """The parsed YAML of a suite file and its node tree (for line numbers)."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigInputError(f"{path}: not UTF-8 text (byte 0x{raw[e.start]:02x} at line {line}, byte offset "
                               f"{e.start})") from None
    try:
        return yaml.safe_load(text), yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        raise ConfigInputError(f"{path}{where}: not valid YAML ({problem})") from None
    except (ValueError, TypeError, OverflowError) as e:  # a tagged value its constructor rejects: !!int abc
        raise ConfigInputError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise ConfigInputError(f"{path}: not a suite file (YAML nested too deeply)") from None


def _entry_lines(tasks_node: object, path: Path) -> list[int]:
    """The 1-based line of each entry under ``tasks:`` (a mapping entry's key); a name used twice fails, since
    YAML would silently keep only the last."""
    if isinstance(tasks_node, yaml.SequenceNode):
        return [item.start_mark.line + 1 for item in tasks_node.value]
    if not isinstance(tasks_node, yaml.MappingNode):
        return []
    seen: dict[str, int] = {}
    for key, _ in tasks_node.value:
        line = key.start_mark.line + 1
        if isinstance(key, yaml.ScalarNode) and key.value in seen:
            raise ConfigInputError(f"{path} line {line}: task name '{key.value}' is used twice (also line "
                                   f"{seen[key.value]})")
        if isinstance(key, yaml.ScalarNode):
            seen[key.value] = line
    return [key.start_mark.line + 1 for key, _ in tasks_node.value]


def tfidf_reference(data: TaskData, spec: TaskSpec, task: Task) -> dict[str, float]:
    """TF-IDF + logistic regression test scores of a task (:func:`famlab.experiments.analysis.baselines.tfidf`),
    cached under the cache directory by task, split and the rule (``baselines.TFIDF_RULE``)."""
    key = {"spec": dataclasses.asdict(spec), "seed": data.seed, "val_fraction": data.val_fraction,
           "test_fraction": data.test_fraction, "sizes": [len(task.train), len(task.val), len(task.test)],
           "rule": TFIDF_RULE}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir(data) / "references" / f"tfidf-{spec.name}-{digest}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    scores = tfidf(task)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(scores, indent=2) + "\n", encoding="utf-8")
    return scores


def finetune_suite(cfg: FinetunePlan, init: Init, specs: list[TaskSpec]) -> FinetuneSuiteResults:
    """Fine-tune every task of ``specs`` in turn; returns the suite results written to ``results.json``."""
    started = time.time()
    tasks = {spec.name: load_suite_task(spec, **task_split(cfg.data)) for spec in specs}  # fail before any training
    suite_name = "suite" if cfg.data.task == "suite" else Path(cfg.data.task).stem.replace(",", "+")
    suite_run = task_run_name(cfg.name, cfg.model.family.value, "finetune", suite_name)
    suite_dir = make_run_dir(cfg.run_dir, cfg.resume, suite_run)
    rows: list[SuiteTaskRow] = []
    results: list[TaskResult] = []
    for spec in specs:
        log.info("suite task %s (%s)", spec.name, spec.task)
        try:  # resume=auto: finished tasks return their results.json, an interrupted one continues its jobs
            run_dir = suite_dir / spec.name
            ft = finetune(with_values(cfg, {"data": task_data(cfg.data, spec), "run_dir": str(run_dir),
                                            "name": f"{suite_dir.name}-{spec.name}"}), init)
        except Preempted as e:
            e.run_dir = suite_dir  # the suite resumes as a whole
            raise
        result = TaskResult(spec.name, spec.metric, {s: v[spec.headline] for s, v in ft.seeds.items()})
        interval = task_interval(result)
        results.append(result)
        rows.append({
            "name": spec.name, "task": spec.task, "metric": spec.metric, "run_dir": str(suite_dir / spec.name),
            "num_classes": ft.num_classes, "sizes": ft.sizes, "seeds": dict(result.seeds),
            "mean": interval.mean, "low": interval.low, "high": interval.high,
            "majority": ft.majority[spec.headline],
            "tfidf": tfidf_reference(cfg.data, spec, tasks[spec.name])[spec.headline],
        })
    score = suite_score(results)
    family = ft.family  # for init=hf:, known only once the model is loaded
    references = {"majority class": {r["name"]: r["majority"] for r in rows},
                  "TF-IDF + LR": {r["name"]: r["tfidf"] for r in rows}}
    table = render_suite_table({f"{family} ({cfg.init})": results}, references)
    out: FinetuneSuiteResults = {
        "job": "finetune-suite", "family": family, "init": cfg.init, "tasks": rows,
        "suite": {"mean": score.mean, "low": score.low, "high": score.high, "seeds": score.n},
        "references": {name: reference_suite(v, [s.name for s in specs]) for name, v in references.items()},
        "wall_s": round(time.time() - started, 1),
    }
    if env_rank() == 0:
        write_json(CompareDir(suite_dir).results_file, out)
        (suite_dir / TABLE).write_text(table, encoding="utf-8")
    out["table"] = table
    return out
