"""AppendingCSVLogger under DDP: only rank 0 may touch the resumed run's metrics.csv.

Lightning reads ``logger.experiment`` on every rank during setup. When rank 1 rewrote metrics.csv there, it
raced rank 0 (which reads the file, lets Lightning's writer delete it, writes it back): rank 0 could read the
file truncated mid-rewrite and the resumed DDP run lost its first segment's rows (2 of 4 resumed 2-process
runs on a loaded 2-core machine; test_ddp.py's resume test saw it as a flaky ``step_rows`` assertion).
"""

from __future__ import annotations

import time

import pytest
from famlab.experiments.plumbing.reliability import AppendingCSVLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

HISTORY = "epoch,step,train/loss\n0,0,6.5\n0,1,6.25\n"


@pytest.fixture
def as_rank():
    """Set Lightning's notion of this process's rank for one test (restored afterwards)."""
    before = rank_zero_only.rank

    def set_rank(rank: int) -> None:
        rank_zero_only.rank = rank

    yield set_rank
    rank_zero_only.rank = before


def test_other_ranks_leave_metrics_csv_alone(tmp_path, as_rank):
    path = tmp_path / "metrics.csv"
    path.write_text(HISTORY, encoding="utf-8")
    before = path.stat().st_mtime_ns
    time.sleep(0.02)  # a rewrite would move the modification time past `before`
    as_rank(1)
    _ = AppendingCSVLogger(save_dir=str(tmp_path), name="", version="").experiment
    assert path.stat().st_mtime_ns == before, "rank 1 rewrote metrics.csv"
    assert path.read_text(encoding="utf-8") == HISTORY


def test_rank0_keeps_the_history_and_appends(tmp_path, as_rank):
    path = tmp_path / "metrics.csv"
    path.write_text(HISTORY, encoding="utf-8")
    as_rank(0)
    logger = AppendingCSVLogger(save_dir=str(tmp_path), name="", version="")
    logger.log_metrics({"train/loss": 6.0, "epoch": 0}, step=2)
    logger.save()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == HISTORY.splitlines() and lines[3].split(",") == ["0", "2", "6.0"]
