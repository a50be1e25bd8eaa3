"""Faults: SIGTERM to a real `famlab pretrain` process, NaN steps, a corrupt last.ckpt, an unreachable W&B server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from famlab.experiments.commands import cli
from famlab.experiments.plumbing.faults import FaultInjection
from famlab.experiments.plumbing.reliability import PREEMPTED_EXIT, PREV_NAME, NonFiniteCallback, resolve_resume

from tests.experiments.reliability_helpers import fast_args, step_rows, write_corpus

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        mp.setenv("WANDB_DIR", str(root / "wandb-dir"))
        mp.delenv("WANDB_API_KEY", raising=False)
        mp.delenv("FAMLAB_FAULT_SIGTERM_STEP", raising=False)
        mp.delenv("FAMLAB_FAULT_NAN_STEPS", raising=False)
        yield root, write_corpus(root / "corpus.txt")


def wandb_records(run: Path) -> list[dict]:
    """Records of one offline run's `.wandb` log, read with wandb's own reader."""
    (log,) = run.glob("run-*.wandb")
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(log)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.slow
def test_sigterm_to_a_running_pretrain_then_resume_auto_finishes(env):
    """SIGTERM -> checkpoint at the step boundary, exit 3 with the resume command; resume=auto finishes the plan.
    W&B offline: the resumed segment is a new run that names the one it resumes (same group, steps continue)."""
    root, corpus = env
    run_dir = root / "sigterm"
    args = [a for a in fast_args(corpus, run_dir, 40) if not a.startswith("wandb.")]
    args += ["wandb.mode=offline", "wandb.group=g1"]
    # 0.25 s a step: the 36 steps after the first last.ckpt (step 4) outlast the poll below on any machine
    proc = subprocess.Popen([sys.executable, "-m", "famlab", *args], cwd=ROOT,
                            env={**os.environ, "FAMLAB_FAULT_STEP_SLEEP": "0.25"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 300
    while not last.is_file() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == PREEMPTED_EXIT, err[-2000:]
    assert "Traceback" not in err
    assert f"run_dir={run_dir} resume=auto" in err
    cut = torch.load(last, map_location="cpu", weights_only=True)["global_step"]
    assert 4 <= cut < 40
    first_id = json.loads((run_dir / "wandb-run.json").read_text())["id"]

    done = subprocess.run([sys.executable, "-m", "famlab", *args, "resume=auto"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 40
    assert sorted(step_rows(run_dir)) == list(range(40))  # metrics.csv kept the first segment

    second = json.loads((run_dir / "wandb-run.json").read_text())
    assert second["id"] != first_id and second["resumed_from"] == first_id
    runs = {p.name.rsplit("-", 1)[1]: p for p in (run_dir / "wandb").glob("offline-run-*")}
    assert set(runs) == {first_id, second["id"]}
    records = wandb_records(runs[second["id"]])
    run = next(r["run"] for r in records if r["type"] == "run")
    assert run["run_group"] == "g1" and "resumed" in run["tags"]
    resumed_from = run["config"]["update"]["resumed_from"]
    if isinstance(resumed_from, dict):  # the reader may keep wandb's {"value": ...} wrapping
        resumed_from = resumed_from["value"]
    assert resumed_from == first_id
    steps = [r["history"]["item"]["trainer/global_step"] for r in records
             if r["type"] == "history" and "trainer/global_step" in r["history"]["item"]]
    assert min(steps) >= cut  # the resumed segment continues at the checkpoint's step
    first_steps = [r["history"]["item"]["trainer/global_step"] for r in wandb_records(runs[first_id])
                   if r["type"] == "history" and "trainer/global_step" in r["history"]["item"]]
    assert max(first_steps) < cut + 1  # and the first segment's history is still there, up to the cut


class _Linear(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.snapshots: list[torch.Tensor] = []

    def training_step(self, batch: torch.Tensor, idx: int) -> torch.Tensor:
        return self.lin(batch).pow(2).mean()

    def on_train_batch_end(self, *args) -> None:
        self.snapshots.append(torch.cat([p.detach().flatten().clone() for p in self.parameters()]))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(16, 4), batch_size=4)


def test_nan_step_is_skipped_without_touching_weights_or_optimizer(tmp_path):
    """A NaN gradient at step 2: parameters and AdamW moments unchanged by that step, later steps train."""
    torch.manual_seed(0)
    module, callback = _Linear(), NonFiniteCallback(max_bad_steps=3, checkpoint_dir=tmp_path)
    trainer = pl.Trainer(max_steps=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu",
                         callbacks=[FaultInjection(nan_steps={2}), callback])  # the fault first, as make_trainer does
    trainer.fit(module)
    s = module.snapshots
    torch.testing.assert_close(s[1], s[0], rtol=0, atol=0)  # step 2 skipped
    assert not torch.equal(s[2], s[1]) and not torch.equal(s[0], s[0] * 0)
    assert all(torch.isfinite(x).all() for x in s)
    assert callback.skipped == 1 and trainer.global_step == 4
    state = trainer.optimizers[0].state[module.lin.weight]
    assert int(state["step"]) == 3  # AdamW took 3 updates in 4 steps


@pytest.mark.slow
def test_nan_steps_in_pretrain_are_counted_then_max_bad_steps_stops(env, monkeypatch, capsys):
    root, corpus = env
    monkeypatch.setenv("FAMLAB_FAULT_NAN_STEPS", "3")
    run_dir = root / "nan-once"
    assert cli.main(fast_args(corpus, run_dir, 6)) == 0
    rows = step_rows(run_dir, "train/skipped_steps")
    skipped = {step: float(row["train/skipped_steps"]) for step, row in rows.items()}
    assert skipped == {0: 0.0, 1: 0.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 1.0}  # metrics step 2 = optimizer step 3
    assert all(torch.isfinite(torch.tensor(float(r["train/loss"]))) for r in step_rows(run_dir).values())

    monkeypatch.setenv("FAMLAB_FAULT_NAN_STEPS", "3,4,5")
    run_dir = root / "nan-many"
    capsys.readouterr()
    assert cli.main([*fast_args(corpus, run_dir, 8), "trainer.max_bad_steps=2"]) == 1
    err = capsys.readouterr().err
    assert "stopped at step 4: 2 consecutive non-finite steps (trainer.max_bad_steps=2)" in err
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 4


@pytest.mark.slow
def test_corrupt_last_ckpt_falls_back_to_the_previous_one(env, capsys):
    root, corpus = env
    run_dir = root / "corrupt"
    assert cli.main(fast_args(corpus, run_dir, 8)) == 0  # last.ckpt at step 8, last-prev.ckpt at step 4
    ckpts = run_dir / "checkpoints"
    assert torch.load(ckpts / PREV_NAME, map_location="cpu", weights_only=True)["global_step"] == 4
    data = (ckpts / "last.ckpt").read_bytes()
    (ckpts / "last.ckpt").write_bytes(data[: len(data) // 2])  # a write killed half-way
    capsys.readouterr()
    assert cli.main([*fast_args(corpus, run_dir, 8), "resume=auto"]) == 0
    err = capsys.readouterr().err
    assert "last.ckpt is unreadable" in err and PREV_NAME in err
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 8


def test_resolve_resume_cases(tmp_path):
    from famlab.experiments.configuration.config import ConfigInputError

    ckpts = tmp_path / "checkpoints"
    ckpts.mkdir()
    assert resolve_resume("auto", ckpts) is None  # requeued job, nothing yet: start fresh
    assert resolve_resume("never", ckpts) is None
    with pytest.raises(ConfigInputError, match="no such checkpoint"):
        resolve_resume(str(tmp_path / "nope.ckpt"), ckpts)
    (ckpts / "last.ckpt").write_bytes(b"garbage")
    with pytest.raises(ConfigInputError, match="unreadable"):
        resolve_resume("auto", ckpts)
    torch.save({"global_step": 1}, ckpts / PREV_NAME)
    with pytest.warns(UserWarning, match="previous checkpoint"):
        assert resolve_resume("auto", ckpts) == str(ckpts / PREV_NAME)


@pytest.mark.slow
def test_unreachable_wandb_server_in_online_mode_does_not_stop_training(env, monkeypatch, capsys):
    root, corpus = env
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "5")
    run_dir = root / "wandb-down"
    args = [a for a in fast_args(corpus, run_dir, 4) if not a.startswith("wandb.")]
    capsys.readouterr()
    assert cli.main([*args, "wandb.mode=online"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("famlab: WARNING W&B online start failed")]
    assert len(warnings) == 1 and f"wandb sync {run_dir}/wandb/offline-run-*" in warnings[0]
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 4
    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    history = [r for r in wandb_records(offline) if r["type"] == "history"]
    assert any("train/loss" in r["history"]["item"] for r in history)
