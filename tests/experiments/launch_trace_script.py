"""``famlab`` plus a record of data preparation and of how each rank was placed (test_multinode.py).

Run as ``python -m tests.experiments.launch_trace_script pretrain gpt ...`` (famlab's own arguments) under a
launcher (torchrun, or SLURM variables set by the test) with ``FAMLAB_TEST_TRACE=<dir>``. The real
``famlab pretrain`` path runs unchanged; two observers are added:

- each call of the real tokenizer training and token-file writing appends ``<rank>`` to
  ``<dir>/trained.txt`` / ``<dir>/tokenized.txt`` (the real functions still run);
- at the start of training each rank writes ``<dir>/rank<r>.json``: its global rank and world size as
  Lightning sees them, the cluster environment that supplied them, the tokenizer hash and the SHA-256 of
  the train and validation token arrays it memory-mapped.

A script file, not a function inside pytest, because every rank runs it as its entry point.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np

TRACE_ENV = "FAMLAB_TEST_TRACE"


def _rank() -> str:
    return os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or os.environ.get("LOCAL_RANK") or "0"


def _counted(fn: Any, out: Path) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with open(out, "a", encoding="utf-8") as f:
            f.write(_rank() + "\n")
        return fn(*args, **kwargs)

    return wrapper


class PlacementRecorder(pl.Callback):
    """Writes ``rank<r>.json`` at the start of training (see the module docstring)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        dm = trainer.datamodule
        record = {
            "global_rank": trainer.global_rank, "world_size": trainer.world_size,
            "environment": type(trainer.strategy.cluster_environment).__name__,
            "tokenizer": dm.bundle.hash, "token_dir": str(dm.token_dir),
            "train_sha": hashlib.sha256(np.asarray(dm.train_tokens).tobytes()).hexdigest(),
            "val_sha": hashlib.sha256(np.asarray(dm.val_tokens).tobytes()).hexdigest(),
        }
        (self.out_dir / f"rank{trainer.global_rank}.json").write_text(json.dumps(record))


def main() -> int:
    import famlab.datamodules.prepare as prepare
    import famlab.experiments.steps.pretrain as pretrain_job
    from famlab.experiments.commands.cli import main as famlab

    out_dir = Path(os.environ[TRACE_ENV])
    out_dir.mkdir(parents=True, exist_ok=True)
    # the corpus is streamed into a prepared dataset: its tokenizer trained and its tokens written there, once
    prepare.train_tokenizer = _counted(prepare.train_tokenizer, out_dir / "trained.txt")
    prepare.prepare_corpus = _counted(prepare.prepare_corpus, out_dir / "tokenized.txt")
    make_trainer = pretrain_job.make_trainer

    def traced_make_trainer(*args: Any, **kwargs: Any) -> Any:
        trainer = make_trainer(*args, **kwargs)
        trainer.callbacks.append(PlacementRecorder(out_dir))
        return trainer

    pretrain_job.make_trainer = traced_make_trainer
    return famlab()


# Guarded: every rank runs this module as its entry point.
if __name__ == "__main__":
    sys.exit(main())
