"""The W&B runs among a run's Lightning loggers: results and artifacts into them, lineage, console capture, finish.

Every call here is safe when W&B is disabled or failed to start (no ``WandbLogger`` among the loggers), and W&B
trouble never stops a run.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from famlab.experiments.libraries.internals import stop_console_copy
from famlab.experiments.tracking.wandb_artifacts import log_model_mode, log_pretrain_artifacts, use_run_artifacts

if TYPE_CHECKING:
    from famlab.experiments.configuration.config import WandbConfig
    from lightning.pytorch.loggers import Logger, WandbLogger


def wandb_loggers(loggers: Sequence[Logger]) -> list[WandbLogger]:
    """The WandbLoggers among ``loggers`` (none when W&B is disabled or failed to start)."""
    from lightning.pytorch.loggers import WandbLogger

    return [logger for logger in loggers if isinstance(logger, WandbLogger)]


def wandb_pretrain_results(w: WandbConfig, loggers: Sequence[Logger], run_dir: Path, results: dict[str, Any]
                           ) -> None:
    """Evaluation results into the run's W&B summary, tokenizer + checkpoint artifacts; never raises."""
    from famlab.experiments.tracking.wandb_metrics import pretrain_summary, record_summary

    record_summary(loggers, pretrain_summary(results))
    for logger in wandb_loggers(loggers):
        try:
            log_pretrain_artifacts(logger.experiment, run_dir, mode=log_model_mode(w.log_model),
                                   final_step=int(results["steps"]))
        except Exception as e:  # noqa: BLE001 - W&B trouble never stops a run (docs/scale.md)
            warnings.warn(f"W&B artifacts not logged ({type(e).__name__}: {e})", stacklevel=2)


def wandb_use_pretrained(loggers: Sequence[Logger], source_dir: Path | None, ckpt: Path | None) -> None:
    """Declare the pretraining run a fine-tune or probe starts from (W&B lineage); never raises."""
    if source_dir is None:
        return
    for logger in wandb_loggers(loggers):
        try:
            use_run_artifacts(logger.experiment, source_dir, ckpt)
        except Exception as e:  # noqa: BLE001 - W&B trouble never stops a run (docs/scale.md)
            warnings.warn(f"W&B lineage not recorded ({type(e).__name__}: {e})", stacklevel=2)


def close_wandb(loggers: Sequence[Logger]) -> None:
    """Finish the W&B run so the offline files are complete before the next run starts."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        if isinstance(logger, WandbLogger):
            try:
                logger.experiment.finish()
            except Exception:  # noqa: BLE001
                pass


def stop_console_capture(loggers: Sequence[Logger]) -> None:
    """Stop copying the console into W&B runs that stay open while other runs train (a fine-tuning grid).

    wandb copies every write to stdout / stderr into each open run's console log; a run kept open for its
    test scores would collect the next runs' output. wandb has no public call for this
    (``experiments/libraries/internals.py``).
    """
    for logger in wandb_loggers(loggers):
        try:
            stop_console_copy(logger.experiment)
        except Exception:  # noqa: BLE001 - W&B trouble never stops a run (docs/scale.md)
            pass
