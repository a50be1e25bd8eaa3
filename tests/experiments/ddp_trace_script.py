"""``famlab`` plus a recorder of the training blocks every rank consumes at every optimizer step (test_ddp.py).

Run as ``python -m tests.experiments.ddp_trace_script pretrain gpt ...`` (famlab's own arguments) with
``FAMLAB_TEST_TRACE=<dir>``: the real ``famlab pretrain`` path runs unchanged — config, datamodule with its
``ResumableSampler`` / ``PositionTrackingLoader``, resume resolution, reliability callbacks, DDP — and one
observing callback is added to its Trainer. It writes one JSON line per consumed batch to
``<dir>/rank<r>.jsonl``: ``{"rank", "epoch", "step", "indices"}``, where ``step`` is ``global_step`` after the
optimizer step and ``indices`` are the training blocks of the batch; ``<dir>/blocks<r>.json`` holds
``{"num_blocks"}`` of the training split that rank sees.

Why blocks are identified by their tokens, not asked from the sampler: the test checks what the model was
actually trained on; deriving indices from the sampler's state would only restate the sampler's own belief.
A script file (not a function inside pytest) because Lightning's ddp strategy re-executes the entry point for
rank 1; the environment variable travels with it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch

TRACE_ENV = "FAMLAB_TEST_TRACE"
SIGTERM_BATCH_ENV = "FAMLAB_TEST_SIGTERM_BATCH"  # SIGTERM this process as its n-th training batch starts


class SigtermAtBatch(pl.Callback):
    """Sends this process SIGTERM as its ``batch``-th training batch (1-based, this process) starts.

    Unlike ``FAMLAB_FAULT_SIGTERM_STEP`` (after an optimizer step), this lands like a real signal can: between
    the micro-batches of one accumulated step.
    """

    def __init__(self, batch: int) -> None:
        self.batch, self.count = batch, 0

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        self.count += 1
        if self.count == self.batch:
            os.kill(os.getpid(), signal.SIGTERM)


class BlockRecorder(pl.Callback):
    """Appends ``{"rank", "epoch", "step", "indices"}`` for each trained batch of a causal-LM pretraining run."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.index: dict[bytes, int] = {}
        self.dtype: np.dtype = np.dtype(np.int64)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        dm = trainer.datamodule
        tokens, length = np.asarray(dm.train_tokens), dm.block_len
        self.dtype = tokens.dtype
        blocks = tokens[: (len(tokens) // length) * length].reshape(-1, length)  # (num_blocks, block_len)
        for i, block in enumerate(blocks):
            self.index.setdefault(block.tobytes(), i)
        if len(self.index) != len(blocks):  # a repeated block could not be told apart: the trace would lie
            raise RuntimeError(f"{len(blocks) - len(self.index)} duplicate training blocks; use another corpus")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / f"blocks{trainer.global_rank}.json").write_text(json.dumps({"num_blocks": len(blocks)}))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # CausalLM.collate: input_ids = block[:, :-1], labels = block[:, 1:]
        blocks = torch.cat([batch["input_ids"], batch["labels"][:, -1:]], dim=1).cpu().numpy().astype(self.dtype)
        indices = [self.index.get(row.tobytes(), -1) for row in blocks]  # -1: not a training block
        line = {"rank": trainer.global_rank, "epoch": trainer.current_epoch, "step": trainer.global_step,
                "indices": indices}
        with open(self.out_dir / f"rank{trainer.global_rank}.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


def read_trace(out_dir: Path) -> list[dict[str, Any]]:
    """All lines of all ranks' trace files in ``out_dir``."""
    rows: list[dict[str, Any]] = []
    for path in sorted(out_dir.glob("rank*.jsonl")):
        rows += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return rows


def main() -> int:
    import famlab.experiments.steps.pretrain as pretrain_job
    from famlab.experiments.commands.cli import main as famlab

    out_dir = Path(os.environ[TRACE_ENV])
    make_trainer = pretrain_job.make_trainer

    def traced_make_trainer(*args: Any, **kwargs: Any) -> Any:
        trainer = make_trainer(*args, **kwargs)
        trainer.callbacks.append(BlockRecorder(out_dir))
        if os.environ.get(SIGTERM_BATCH_ENV):
            trainer.callbacks.append(SigtermAtBatch(int(os.environ[SIGTERM_BATCH_ENV])))
        return trainer

    pretrain_job.make_trainer = traced_make_trainer  # the one change to the product path: an observer
    return famlab()


# Guarded: Lightning re-executes this module for rank 1 (Lightning's DDP launcher).
if __name__ == "__main__":
    sys.exit(main())
