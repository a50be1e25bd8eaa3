"""Checkpoint files: ``last.ckpt`` keeps its predecessor as ``last-prev.ckpt``, and a forced ``last.ckpt`` save.

The rotation is a ``CheckpointIO`` plugin (Lightning's public interface for how checkpoint files are written),
wrapped around whatever the strategy writes with. Every write of ``last.ckpt`` goes through it: ``ModelCheckpoint``'s
``save_last`` and the saves the preemption and non-finite callbacks force. Strategies that write sharded
checkpoints without their ``CheckpointIO`` (DeepSpeed, sharded FSDP) keep no previous copy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from famlab.experiments.configuration.run_files import LAST_CKPT
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import CheckpointIO

PREV_NAME = "last-prev.ckpt"  # the previous last.ckpt, kept so a truncated last.ckpt is survivable


class KeepPreviousCheckpointIO(CheckpointIO):
    """Writes through ``inner``; before overwriting a ``last.ckpt``, moves the current one to ``last-prev.ckpt``.

    Lightning calls ``save_checkpoint`` on global rank 0 only, so only rank 0 moves the file.
    """

    def __init__(self, inner: CheckpointIO) -> None:
        self.inner = inner

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: object | None = None
    ) -> None:
        file = Path(path)
        if file.name == LAST_CKPT and file.is_file():
            os.replace(file, file.with_name(PREV_NAME))
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)

    # only what the caller passes is forwarded, so the inner plugin's defaults (map_location) apply
    def load_checkpoint(self, path: str | Path, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.inner.load_checkpoint(path, *args, **kwargs)

    def remove_checkpoint(self, path: str | Path) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


def keep_previous_last(trainer: pl.Trainer) -> None:
    """Route ``trainer``'s checkpoint writes through :class:`KeepPreviousCheckpointIO` (once)."""
    io = trainer.strategy.checkpoint_io
    if not isinstance(io, KeepPreviousCheckpointIO):
        trainer.strategy.checkpoint_io = KeepPreviousCheckpointIO(io)


def checkpoint_callback(checkpoint_dir: Path, monitor: str, mode: str) -> ModelCheckpoint:
    """The best checkpoint by ``monitor`` plus ``last.ckpt``, in an explicit ``checkpoint_dir``.

    Explicit dirpath: otherwise checkpoints land under the W&B run id and a requeued job finds none. No
    version counter (no ``last-v1.ckpt``): a resumed run overwrites ``last.ckpt``, since finetune / compare /
    generate read that file (the previous one is kept as ``last-prev.ckpt``).
    """
    return ModelCheckpoint(dirpath=str(checkpoint_dir), filename="best-step{step}", auto_insert_metric_name=False,
                           monitor=monitor, mode=mode, save_top_k=1, save_last=True, enable_version_counter=False)


def save_last(trainer: pl.Trainer, checkpoint_dir: Path) -> Path:
    """Write ``last.ckpt`` now (all ranks call this), keeping the previous one."""
    path = checkpoint_dir / LAST_CKPT
    keep_previous_last(trainer)
    trainer.save_checkpoint(str(path))
    return path
