"""Tripwires: each library internal famlab relies on (experiments/plumbing/internals.py) still has the shape and
behaviour famlab uses, and the public hooks that replaced the others still behave as relied on.

A failure names the library and the attribute; docs/architecture.md ("Library internals we rely on") says where
each is used.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import lightning.pytorch as pl
import torch
from famlab.experiments.plumbing import internals
from famlab.experiments.plumbing.checkpoints import PREV_NAME, KeepPreviousCheckpointIO, keep_previous_last, save_last
from famlab.experiments.plumbing.csv_logger import AppendingCSVLogger
from lightning.pytorch.loggers import CSVLogger


def test_lightning_csv_writer_keeps_its_columns_in_metrics_keys(tmp_path):
    """lightning: the CSVLogger's writer has a ``metrics_keys`` list that is the file's header."""
    library, attribute = internals.CSV_WRITER_KEYS
    writer = CSVLogger(save_dir=str(tmp_path), name="", version="").experiment
    keys = getattr(writer, "metrics_keys", None)
    assert isinstance(keys, list), f"{library} changed {attribute}: the CSV writer has no metrics_keys list"
    writer.log_metrics({"b": 1.0, "a": 2.0}, step=0)
    writer.save()
    assert keys is writer.metrics_keys and keys == ["a", "b", "step"], f"{library} changed {attribute}: {keys}"
    assert Path(writer.metrics_file_path).read_text().splitlines()[0] == "a,b,step"


def test_appending_csv_logger_continues_the_file_under_its_header(tmp_path):
    """The behaviour built on it: a resumed run's rows append under the kept header; a new column widens it."""
    old = "a,b,step\n1.0,,0\n,2.0,1\n"
    (tmp_path / "metrics.csv").write_text(old)
    logger = AppendingCSVLogger(save_dir=str(tmp_path), name="", version="")
    logger.log_metrics({"a": 3.0}, step=2)
    logger.save()
    assert (tmp_path / "metrics.csv").read_text() == old + "3.0,,2\n"
    logger.log_metrics({"c": 4.0}, step=3)
    logger.save()
    assert (tmp_path / "metrics.csv").read_text().splitlines() == [
        "a,b,c,step", "1.0,,,0", ",2.0,,1", "3.0,,,2", ",,4.0,3"]


def test_wandb_run_console_stop_is_a_method_without_arguments():
    """wandb: ``Run._console_stop(self)`` exists (stop_console_copy calls it on runs left open)."""
    from wandb.sdk.wandb_run import Run

    library, attribute = internals.WANDB_CONSOLE_STOP
    stop = getattr(Run, "_console_stop", None)
    assert callable(stop), f"{library} removed {attribute}"
    assert list(inspect.signature(stop).parameters) == ["self"], f"{library} changed {attribute}'s signature"


def test_stop_console_copy_skips_a_run_without_it():
    """A wandb without ``_console_stop`` degrades to no-op instead of failing the run."""
    internals.stop_console_copy(object())


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))

    def training_step(self, batch, batch_idx):
        return (self.w * batch).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.ones(4, 2), batch_size=2)


def test_last_ckpt_writes_go_through_the_strategy_checkpoint_io(tmp_path):
    """lightning: ``Strategy.checkpoint_io`` is settable and ``trainer.save_checkpoint`` writes through it, so the
    previous ``last.ckpt`` survives as ``last-prev.ckpt``."""
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu")
    module = _Tiny()
    trainer.fit(module)
    keep_previous_last(trainer)
    keep_previous_last(trainer)  # once only
    io = trainer.strategy.checkpoint_io
    assert isinstance(io, KeepPreviousCheckpointIO) and not isinstance(io.inner, KeepPreviousCheckpointIO)
    first = module.w.detach().clone()
    save_last(trainer, tmp_path)
    with torch.no_grad():
        module.w.add_(1.0)
    save_last(trainer, tmp_path)
    prev = torch.load(tmp_path / PREV_NAME, weights_only=True)["state_dict"]["w"]
    last = torch.load(tmp_path / "last.ckpt", weights_only=True)["state_dict"]["w"]
    torch.testing.assert_close(prev, first)
    torch.testing.assert_close(last, first + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last-prev.ckpt", "last.ckpt"]
