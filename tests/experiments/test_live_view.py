"""The comparison's live view: jobs' status files (written by the job and its fits) drawn as one table with an ETA."""

from __future__ import annotations

import io
import os

import pytest
import torch
from famlab.experiments.plumbing import live
from famlab.experiments.plumbing.heartbeat import Heartbeat
from rich.console import Console


def render(board: live.Board) -> str:
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(board)
    return out.getvalue()


def test_each_job_shows_its_state_progress_and_result(tmp_path):
    entries = [live.Entry("gpt-pre-s0", "pretrain", 2e9), live.Entry("bert-pre-s0", "pretrain", 2e9),
               live.Entry("gpt-ft-s0", "transfer"), live.Entry("t5-pre-s0", "pretrain", 2e9)]
    board = live.Board(tmp_path, entries)
    with live.job_status(tmp_path / "gpt-pre-s0.json") as outcome:
        outcome["result"] = "val/loss 3.5400"
    with live.job_status(tmp_path / "bert-pre-s0.json"):
        live.report_progress(fit="bert-pre-s0", step=40, max_steps=100, loss=4.25, rate=12.5)
        running = render(board)
    with pytest.raises(ValueError), live.job_status(tmp_path / "gpt-ft-s0.json"):
        raise ValueError("a task with one class\nsecond line")
    assert os.environ.get(live.PROGRESS_ENV) is None  # the job's progress file is not left for the next code
    rows = {name: (state, text) for name, state, text in board.rows()}
    assert rows["gpt-pre-s0"][0] == "done" and rows["gpt-pre-s0"][1].startswith("val/loss 3.5400 (")
    assert rows["bert-pre-s0"][0] == "done"
    assert rows["gpt-ft-s0"] == ("failed", rows["gpt-ft-s0"][1]) and "ValueError: a task with one class (" in \
        rows["gpt-ft-s0"][1]
    assert rows["t5-pre-s0"] == ("queued", "")
    assert "bert-pre-s0 step 40/100, loss 4.2500, 12.5 steps/s" in running and "running" in running
    assert "1/4 jobs done, 1 running, 2 queued" in running
    assert "2/4 jobs done, 0 running, 1 queued, 1 failed" in render(board)


def test_the_eta_prices_pretraining_by_planned_flops_and_other_jobs_by_their_mean(tmp_path):
    entries = [live.Entry("a", "pretrain", 1e9), live.Entry("b", "pretrain", 3e9), live.Entry("c", "transfer"),
               live.Entry("d", "transfer")]
    board = live.Board(tmp_path, entries, started=0.0)
    live.write_status(tmp_path / "a.json", state="done", started=0.0, ended=10.0, result="")
    assert board.eta(now=10.0) is None  # no transfer has finished: nothing prices the transfers yet
    live.write_status(tmp_path / "c.json", state="done", started=10.0, ended=14.0, result="")
    live.write_status(tmp_path / "b.json", state="running", started=10.0, step=50, max_steps=100)
    # a: 10 s for 1e9; b: half of 3e9 in 20 s -> 30 s per 2.5e9 FLOPs; b's other half: 1.5e9 x 1.2e-8 = 18 s
    assert board.eta(now=30.0) == pytest.approx(18.0 + 4.0)
    assert "about 22 s left" in board.headline(now=30.0)


def test_a_fit_reports_its_progress_into_the_jobs_status_file(tmp_path, monkeypatch):
    """A real Lightning fit with the heartbeat: the job's file holds the fit, its step and its loss; with a live
    view drawn (FAMLAB_LIVE=1) the fit prints no heartbeat line."""
    import lightning.pytorch as pl

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            loss = self.w(batch[0]).pow(2).mean()
            self.log("train/loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    monkeypatch.setattr("famlab.experiments.plumbing.heartbeat.STATUS_EVERY_S", 0.0)
    monkeypatch.setenv(live.LIVE_ENV, "1")
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(32, 4)), batch_size=4)
    path = tmp_path / "job.json"
    with live.job_status(path):
        trainer = pl.Trainer(max_steps=6, callbacks=[Heartbeat("fit-1", every_s=0.0)], logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=tmp_path)
        trainer.fit(Tiny(), data)
        during = live.read_status(path)
    assert during["state"] == "running" and during["fit"] == "fit-1" and during["max_steps"] == 6
    assert during["step"] == 6 and isinstance(during["loss"], float) and during["rate"] > 0
    assert live.read_status(path)["state"] == "done"


def test_the_view_is_drawn_only_where_asked(monkeypatch):
    monkeypatch.setenv(live.LIVE_ENV, "0")
    assert not live.live_wanted()
    monkeypatch.setenv(live.LIVE_ENV, "1")
    assert live.live_wanted()
    monkeypatch.delenv(live.LIVE_ENV)
    assert not live.live_wanted()  # pytest's stdout is not a terminal


@pytest.mark.slow
def test_a_comparison_draws_its_jobs_and_its_workers_never_write_over_the_view(tmp_path):
    """A test-scale comparison in two workers with the live view forced on a pipe: rich draws the final table (every
    job done, with its result), the workers' own lines go to compare.log, and each job's status file says done."""
    import json
    import subprocess
    import sys

    from test_compare import tiny_inputs

    env = {k: v for k, v in os.environ.items() if k != "FAMLAB_VERBOSE"}
    env |= {"FAMLAB_CACHE": str(tmp_path / "cache"), live.LIVE_ENV: "1", "FAMLAB_HEARTBEAT_S": "1",
            "COLUMNS": "200"}
    args = [a for a in tiny_inputs(tmp_path) if a != "compare.workers=1"]
    done = subprocess.run([sys.executable, "-m", "famlab", "compare", *args, "compare.families=[gpt,t5]",
                           "trainer.max_steps=30", "compare.bpb_docs=8", "compare.zero_shot_items=12",
                           "compare.workers=2", "run_dir=cmp"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    names = ["gpt-pretrain-s0", "t5-pretrain-s0", "gpt-scratch", "t5-scratch", "gpt-transfer-s0", "t5-transfer-s0"]
    statuses = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "cmp" / "jobs").glob("*.json")}
    assert sorted(statuses) == sorted(names) and {s["state"] for s in statuses.values()} == {"done"}
    assert statuses["gpt-pretrain-s0"]["result"].startswith("val/loss ")
    table = done.stdout
    assert "6/6 jobs done, 0 running, 0 queued" in table
    for name in names:
        assert any(name in line and "done" in line for line in table.splitlines()), name
    assert "steps/s" not in table  # no heartbeat line from a worker tore the view
    log = (tmp_path / "cmp" / "compare.log").read_text()
    assert "[famlab compare" in log  # the workers' own progress lines, kept


def test_off_a_terminal_the_board_prints_one_line_a_period_while_jobs_run(tmp_path, capsys):
    """The plain view: a line per period naming each running job's step and loss with the headline; nothing while
    no job runs; the fits are told not to print heartbeats of their own.

    The board prints from its own thread: the test waits for its lines (up to 30 s, however loaded the machine),
    and a line printed between the job's start and its first progress report says the job is starting."""
    import time

    board = live.Board(tmp_path, [live.Entry("gpt-pretrain-s0", "pretrain", 1e9), live.Entry("gpt-scratch", "scratch")])
    headline = "| 0/2 jobs done, 1 running, 1 queued"
    progress = "gpt-pretrain-s0 step 7/20, loss 3.5000 " + headline
    lines: list[str] = []
    with live.live_view(board, live=False, every_s=0.05):
        assert os.environ[live.BOARD_ENV] == "1" and live.LIVE_ENV not in os.environ
        time.sleep(0.2)  # four periods with no job running
        quiet = capsys.readouterr().out
        with live.job_status(tmp_path / "gpt-pretrain-s0.json"):
            live.report_progress(fit="gpt-pretrain-s0", step=7, max_steps=20, loss=3.5, rate=1.0)
            deadline = time.monotonic() + 30
            while sum(progress in x for x in lines) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
                lines += capsys.readouterr().out.splitlines()
    assert live.BOARD_ENV not in os.environ
    lines += capsys.readouterr().out.splitlines()
    assert quiet == ""
    assert sum(progress in x for x in lines) >= 2, lines
    first = next(i for i, x in enumerate(lines) if progress in x)
    # every line is stamped by console.say ("[famlab HH:MM:SS] ..."); those before the first report say "starting"
    assert all(x.startswith("[famlab ") and "] gpt-pretrain-s0 starting " + headline in x for x in lines[:first]), lines
    assert all(progress in x for x in lines[first:]), lines
