"""``data.task`` loaded with the data section's column and split settings: the one place that turns the
config into a ``famlab.datamodules.load_task`` call (fine-tuning, probing, a comparison's subsample, the
report's TF-IDF reference), and the check that a comparison's subsample of it can still be fine-tuned."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, TypedDict, TypeVar

from famlab.datamodules.suite import TaskSpec
from famlab.datamodules.tasks import Task, load_task
from famlab.experiments.configuration.config import CompareConfig, ConfigInputError, DataConfig, with_values
from famlab.experiments.configuration.plans import SplitData, TaskData

Tasked = TypeVar("Tasked", bound=TaskData)
TASK_VAL_FRACTION = 0.1  # a task's validation fraction when data.val_fraction is unset (a corpus's is 0.05)


class TaskSplit(TypedDict):
    """How a task without a split column is split: the keyword arguments of ``famlab.datamodules.load_task`` and
    ``famlab.datamodules.suite.load_suite_task`` that say it."""

    seed: int
    val_fraction: float
    test_fraction: float


def task_split(data: SplitData) -> TaskSplit:
    """``data.seed``, ``data.val_fraction`` (unset: :data:`TASK_VAL_FRACTION`) and ``data.test_fraction``."""
    val_fraction = data.val_fraction if data.val_fraction is not None else TASK_VAL_FRACTION
    return {"seed": data.seed, "val_fraction": val_fraction, "test_fraction": data.test_fraction}


def task_columns(spec: TaskSpec) -> dict[str, str | None]:
    """The ``data.*`` keys that read the suite task ``spec``: its file and columns (``task``, ``*_column``)."""
    return {"task": spec.task, "text_column": spec.text_column, "text_pair_column": spec.text_pair_column,
            "label_column": spec.label_column, "split_column": spec.split_column}


def task_data(data: Tasked, spec: TaskSpec) -> Tasked:
    """The data section reading the suite task ``spec`` (:func:`task_columns`)."""
    return with_values(data, task_columns(spec))


def load_configured_task(data: TaskData | Mapping[str, Any]) -> Task:
    """Load ``data.task`` as the data section says (columns, split column or fractions, seed).

    Args:
        data: the config's ``data`` section, or the same section as a plain mapping (a run directory's
            ``config.yaml``, as the report reads it).
    """

    def read(key: str) -> Any:
        return data[key] if isinstance(data, Mapping) else getattr(data, key)

    val_fraction = read("val_fraction")
    return load_task(
        read("task"), text_column=read("text_column"), text_pair_column=read("text_pair_column"),
        label_column=read("label_column"), split_column=read("split_column"),
        val_fraction=val_fraction if val_fraction is not None else TASK_VAL_FRACTION,
        test_fraction=read("test_fraction"), seed=read("seed"),
    )


def check_compare_task(data: DataConfig, compare: CompareConfig) -> None:
    """Load the comparison's single task and check its ``compare.task_limit`` subsample, before anything trains.

    Without this the task is first read after the tokenizer is trained (for the subsample) or, with no limit, by
    the first fine-tune, after pretraining.

    Raises:
        DataError: the task cannot be loaded (a missing file or column, one class, ...).
        ConfigInputError: the subsample would hold one class or an empty split (:func:`check_subsample`).
    """
    task = load_configured_task(data)
    check_subsample(task, compare.task_limit, compare.task_eval_limit, seed=data.seed, source=f"data.task={data.task}")


def check_subsample(task: Task, limit: int | None, eval_limit: int | None, *, seed: int, source: str) -> None:
    """Refuse a ``compare.task_limit`` subsample that could not be fine-tuned, predicting exactly what
    ``famlab.experiments.steps.comparison.subsample_task`` writes.

    That subsample draws ``min(limit, len(train))`` training examples with ``random.Random(seed).sample``, keeps
    the validation / test examples whose label the drawn training examples hold, and draws ``eval_limit`` (default
    ``max(1, limit // 5)``) of each. Fine-tuning then needs two classes in the drawn training examples and at
    least one validation and one test example: the task loader would otherwise refuse the file after pretraining,
    or silently carve the missing split out of the training examples.

    Args:
        task: the task as loaded (:func:`load_configured_task`, or ``load_suite_task`` for a suite's task).
        limit: ``compare.task_limit``; None or 0: no subsample, nothing to check.
        eval_limit: ``compare.task_eval_limit``.
        seed: ``data.seed``, the subsample's seed.
        source: names the task in messages (``data.task=<file>``, or a suite's task and file).

    Raises:
        ConfigInputError: one line naming ``source``, ``compare.task_limit`` / ``compare.task_eval_limit`` and the
            counts.
    """
    if not limit:  # subsample_task is not called then
        return
    if eval_limit is not None and eval_limit < 1:
        raise ConfigInputError(f"compare.task_eval_limit={eval_limit} would leave the validation and test splits "
                               f"of {source} empty; it must be at least 1 (or null: compare.task_limit // 5)")
    drawn = random.Random(seed).sample(task.train, min(limit, len(task.train)))  # the same draw as subsample_task
    seen = {e.label for e in drawn}
    if len(seen) < 2:
        raise ConfigInputError(
            f"{source}: the compare.task_limit={limit} subsample's {len(drawn)} training examples hold one class "
            f"('{task.labels[next(iter(seen))]}') of the task's {len(task.labels)}; fine-tuning needs two (raise "
            "compare.task_limit, or set it to null for the whole task)")
    for split in ("val", "test"):
        examples = getattr(task, split)
        if not any(e.label in seen for e in examples):
            raise ConfigInputError(
                f"{source}: the compare.task_limit={limit} subsample would have an empty {split} split: none of the "
                f"task's {len(examples)} {split} examples has one of the {len(seen)} classes its {len(drawn)} "
                "training examples hold (raise compare.task_limit, or set it to null for the whole task)")
