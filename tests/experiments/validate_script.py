"""Validate one pretraining checkpoint the way ``famlab pretrain`` validates, on however many processes it is given
(test_rank_disagreement.py: the validation loss of 1 and of 2 gloo ranks on the same checkpoint).

Run as ``python -m tests.experiments.validate_script pretrain gpt tiny ... key=value`` (``famlab pretrain``'s own
arguments; ``run_dir=`` a fresh directory) with ``FAMLAB_TEST_VALIDATE=<checkpoint>``: the command's own pieces build
the data module (its validation loader, sampler and collation), the module and the Trainer (``make_trainer``, the
strategy and devices of ``trainer.*``), then ``Trainer.validate`` loads the checkpoint's weights. Each rank writes
``<run_dir>/validate-rank<r>.json``: the logged metrics and the number of validation blocks that rank evaluated.
A script file because Lightning's ddp strategy re-executes the entry point for rank 1.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

CHECKPOINT_ENV = "FAMLAB_TEST_VALIDATE"


class BlockCounter(pl.Callback):
    """Counts the validation blocks (rows of ``input_ids``) this rank evaluates."""

    def __init__(self) -> None:
        self.blocks = 0

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self.blocks += int(batch["input_ids"].shape[0])


def main() -> int:
    from famlab.experiments.configuration.compose import compose, split_args
    from famlab.experiments.plumbing.rundir import make_run_dir
    from famlab.experiments.plumbing.trainer import make_trainer
    from famlab.experiments.steps.pretrain import make_module, prepare_data

    presets, overrides, _ = split_args(sys.argv[2:])  # argv[1] is the command, pretrain
    cfg = compose(presets, overrides).cfg
    run_dir = make_run_dir(cfg.run_dir, cfg.resume, "validate")
    cfg, _, _, objective, dm = prepare_data(cfg, run_dir)  # the config with the tokenizer's vocabulary
    module = make_module(cfg.model, cfg.optim, cfg.trainer, objective, dm)
    trainer = make_trainer(cfg.trainer, run_dir, [], seed=cfg.seed, grad_clip=cfg.optim.grad_clip,
                           checkpoint_dir=run_dir / "checkpoints", monitor="val/loss", mode="min",
                           limit_val_batches=cfg.trainer.limit_val_batches)
    counter = BlockCounter()
    trainer.callbacks.append(counter)
    (metrics,) = trainer.validate(module, datamodule=dm, ckpt_path=os.environ[CHECKPOINT_ENV], verbose=False)
    out = {"metrics": {k: float(v) for k, v in metrics.items()}, "blocks": counter.blocks,
           "world": trainer.world_size}
    Path(run_dir, f"validate-rank{trainer.global_rank}.json").write_text(json.dumps(out))
    return 0


# Guarded: Lightning re-executes this module for rank 1 (Lightning's DDP launcher).
if __name__ == "__main__":
    sys.exit(main())
