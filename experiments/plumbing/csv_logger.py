"""``metrics.csv`` that survives a resume: Lightning's ``CSVLogger`` deletes an existing file; this one continues it."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Protocol, cast

from famlab.experiments.configuration.run_files import METRICS
from famlab.experiments.libraries.internals import continue_csv_header
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only


class _RankZeroOnly(Protocol):
    rank: int  # the global rank: Lightning sets it on import and each strategy at setup


class AppendingCSVLogger(CSVLogger):
    """``CSVLogger`` that keeps an existing ``metrics.csv`` (Lightning deletes it) and appends to it.

    A resumed run continues the file: steps logged after the checkpoint it resumes from appear twice (the
    resumed run's row comes later). A fresh run has none, so this is a plain CSVLogger there.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._continued = False  # the writer exists and the kept file is back in place

    @property
    def experiment(self) -> Any:
        # Lightning asks every rank; only rank 0 touches the file
        if self._continued or cast(_RankZeroOnly, rank_zero_only).rank != 0:
            return super().experiment
        path = Path(self.log_dir) / METRICS
        kept = path.read_text(encoding="utf-8") if path.is_file() else None
        with warnings.catch_warnings():
            # "Previous log files in this directory will be deleted": not here (the run directory also holds
            # config.yaml / tokenizer.json, which Lightning never touches, and metrics.csv is kept below)
            warnings.filterwarnings("ignore", message="Experiment logs directory .* exists and is not empty")
            experiment = super().experiment
        self._continued = True
        if kept:
            path.write_text(kept, encoding="utf-8")
            continue_csv_header(experiment, kept.splitlines()[0].split(","))
        return experiment
