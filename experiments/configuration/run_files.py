"""The layout of a run directory and of a comparison (or sweep) directory: every file name famlab writes there,
spelled once, and the path of each file.

This is the bottom of the layout, below the folders that read and write these files (``analysis`` and
``tracking`` sit in layer 2, where a layer-3 module cannot be imported); the typed readers over it are
``RunDir`` and ``CompareDir`` in ``experiments/plumbing/rundir.py``. A message that tells the user a file name
builds it from these constants.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from famlab.datamodules.tokenizer import TOKENIZER_FILE

CONFIG = "config.yaml"  # the resolved config + provenance, written before the first step
RESULTS = "results.json"  # the last file a run writes: a run directory that holds it is finished
EVAL = "eval.json"  # a pretrained run's bits per byte and zero-shot scores (famlab evaluate)
METRICS = "metrics.csv"  # the CSV logger's rows
LOG = "famlab.log"  # library banners, tips and foreign warnings
TOKENIZER = TOKENIZER_FILE  # the run's own copy of its tokenizer (the data layer names the file)
CHECKPOINTS = "checkpoints"  # the checkpoint folder
LAST_CKPT = "last.ckpt"  # the newest checkpoint in it
WANDB = "wandb"  # the offline W&B folder
COMPARE = "compare.json"  # a comparison's transfer record
PLAN = "plan.json"  # a comparison's budget plan
REPORT = "report.md"  # the report of a comparison, a sweep or run directories


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """The files of one run directory (a pretraining run, a fine-tune's seed, a probe, a sweep trial)."""

    path: Path

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG

    @property
    def results_file(self) -> Path:
        return self.path / RESULTS

    @property
    def eval_file(self) -> Path:
        return self.path / EVAL

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS

    @property
    def log_file(self) -> Path:
        return self.path / LOG

    @property
    def tokenizer_file(self) -> Path:
        return self.path / TOKENIZER

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoint_dir / LAST_CKPT

    @property
    def wandb_dir(self) -> Path:
        return self.path / WANDB

    def is_finished(self) -> bool:
        """The run wrote its results (the last file it writes)."""
        return self.results_file.is_file()


@dataclasses.dataclass(frozen=True)
class CompareFiles:
    """The files of a comparison directory (also a sweep's and a report's output directory)."""

    path: Path

    @property
    def compare_file(self) -> Path:
        return self.path / COMPARE

    @property
    def plan_file(self) -> Path:
        return self.path / PLAN

    @property
    def results_file(self) -> Path:
        return self.path / RESULTS

    @property
    def report_file(self) -> Path:
        return self.path / REPORT

    @property
    def tokenizer_file(self) -> Path:
        """The tokenizer every arm of the comparison shares."""
        return self.path / TOKENIZER

    @property
    def wandb_dir(self) -> Path:
        return self.path / WANDB
