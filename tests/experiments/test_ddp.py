"""2-process DDP on CPU (gloo) through `famlab pretrain`: one W&B run, files from rank 0, exact plan after resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from experiments.reliability import PREEMPTED_EXIT, RNG_KEY
from tests.experiments.reliability_helpers import fast_args, step_rows, write_corpus

ROOT = Path(__file__).resolve().parents[2]
DDP = ["trainer.devices=2", "trainer.accelerator=cpu", "trainer.strategy=ddp"]


def _famlab(args: list[str], root: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FAMLAB_CACHE": str(root / "cache"), "WANDB_MODE": "offline", **extra}
    env.pop("FAMLAB_RUN_DIR", None)
    return subprocess.run([sys.executable, "-m", "experiments", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_ddp_pretrain_logs_one_wandb_run_and_rank0_writes(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir = tmp_path / "ddp"
    args = [a for a in fast_args(corpus, run_dir, 6) if not a.startswith("wandb.")] + ["wandb.mode=offline", *DDP]
    done = _famlab(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("done:") == 1  # one report, from rank 0
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 1
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 6
    assert sorted(step_rows(run_dir)) == list(range(6))


@pytest.mark.slow
def test_ddp_run_interrupted_and_resumed_finishes_the_plan(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir = tmp_path / "ddp-resume"
    args = [*fast_args(corpus, run_dir, 8), *DDP]
    first = _famlab(args, tmp_path, FAMLAB_FAULT_SIGTERM_STEP="3")
    assert first.returncode == PREEMPTED_EXIT, first.stderr[-3000:]
    assert "resume=auto" in first.stderr
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 3
    states = ckpt[RNG_KEY]
    assert len(states) == 2 and not torch.equal(states[0]["collate"], states[1]["collate"])  # per rank
    second = _famlab([*args, "resume=auto"], tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 8
    assert sorted(step_rows(run_dir)) == list(range(8))
