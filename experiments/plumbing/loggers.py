"""A run's loggers: ``metrics.csv`` always, and a W&B run unless W&B is disabled (its trouble never stops training)."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from famlab.experiments.configuration.compose import flatten
from famlab.experiments.configuration.config import CompareMatch, ModelConfig, WandbConfig
from famlab.experiments.configuration.plans import ObjectiveName
from famlab.experiments.configuration.run_files import LAST_CKPT
from famlab.experiments.plumbing.console import library_output
from famlab.experiments.tracking.wandb_artifacts import log_model_mode, log_saved_checkpoint
from famlab.experiments.tracking.wandb_guard import wandb_mode
from famlab.experiments.tracking.wandb_metrics import define_metrics, x_axis

if TYPE_CHECKING:
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.loggers import Logger


def identity_tags(model: ModelConfig, objective: ObjectiveName) -> list[str]:
    """A run's own W&B tags, before ``wandb.tags``: its family, objective and position scheme."""
    return [model.family.value, str(objective.name), model.pos.value]


def make_loggers(
    w: WandbConfig, run_dir: Path, *, job_type: str, name: str, config: Mapping[str, object], tags: Sequence[str],
    resume: str, match: CompareMatch,
) -> list[Logger]:
    """CSVLogger writing ``<run_dir>/metrics.csv`` and, unless ``wandb.mode`` disables it, a WandbLogger named
    ``wandb.name`` or ``name``, tagged ``tags`` then ``wandb.tags``, its charts' x-axis from ``compare.match``;
    a run that may resume (``resume`` other than ``never``) continues the W&B run it finds in ``run_dir``.

    The W&B config is the resolved config flattened to dotted keys, logged once at init (nested + flat
    gives duplicate columns in sweeps, wandb #5477). A W&B failure never stops training: warn, go on.
    Every run is its own (``reinit="create_new"``): a fine-tuning grid keeps its runs open until selection,
    and Lightning's ``WandbLogger`` would otherwise reuse the global run still open.
    """
    from famlab.experiments.plumbing.csv_logger import AppendingCSVLogger

    # a resumed run appends to metrics.csv (Lightning's CSVLogger would delete the history)
    loggers: list[Logger] = [AppendingCSVLogger(save_dir=str(run_dir), name="", version="")]
    mode = wandb_mode(w)
    if mode == "disabled":
        return loggers
    all_tags = list(dict.fromkeys([*tags, *w.tags]))
    log_model = log_model_mode(w.log_model)  # a bad value fails before training, naming the key
    save_dir = Path(w.dir) if w.dir else run_dir  # a comparison keeps all its runs in one place
    try:
        from lightning.pytorch.loggers import WandbLogger

        class FlatConfigWandbLogger(WandbLogger):
            """Skips Lightning's ``log_hyperparams``: the module's nested hparams (``optim: {...}``) would add
            a second, nested copy of keys already in the flat config (duplicate columns, wandb #5477).
            With ``wandb.log_model=all`` uploads each checkpoint as it is saved (famlab's own artifacts)."""

            def log_hyperparams(self, params: object, *args: object, **kwargs: object) -> None:
                return None

            def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
                last = Path(checkpoint_callback.dirpath or "") / LAST_CKPT
                if log_model == "all" and job_type == "pretrain" and last.is_file():
                    log_saved_checkpoint(self.experiment, last)

        from famlab.experiments.tracking.wandb_guard import start_wandb
        from lightning.pytorch.utilities import rank_zero_only

        if getattr(rank_zero_only, "rank", 0) != 0:
            return loggers  # only rank 0 logs to W&B (one run per job)
        with library_output():  # wandb.init prints its banners and settings warnings: into the run's log
            logger, note = start_wandb(
                FlatConfigWandbLogger, run_dir, mode, resuming=resume != "never",
                kwargs=dict(project=w.project, entity=w.entity, name=w.name or name,
                            group=w.group, job_type=job_type, tags=all_tags, save_dir=str(save_dir),
                            config=flatten(config), reinit="create_new"),
            )
        if note:  # once, on stderr: where the run went and how to upload it
            print(f"famlab: WARNING {note}", file=sys.stderr)
        if logger is not None:
            define_metrics(logger.experiment, job_type, x_axis(match.value))
            loggers.append(logger)
    except Exception as e:  # noqa: BLE001 - any W&B trouble must not stop training (docs/scale.md)
        message = f"W&B logging disabled for this run ({type(e).__name__}: {e}); CSV metrics still written"
        warnings.warn(message, stacklevel=2)
    return loggers
