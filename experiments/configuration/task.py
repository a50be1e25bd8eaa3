"""``data.task`` loaded with the data section's column and split settings: the one place that turns the
config into a ``famlab.datamodules.load_task`` call (fine-tuning, probing, a comparison's subsample, the
report's TF-IDF reference)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from famlab.datamodules.tasks import Task, load_task
from famlab.experiments.configuration.config import DataConfig

TASK_VAL_FRACTION = 0.1  # a task's validation fraction when data.val_fraction is unset (a corpus's is 0.05)


def load_configured_task(data: DataConfig | Mapping[str, Any]) -> Task:
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
