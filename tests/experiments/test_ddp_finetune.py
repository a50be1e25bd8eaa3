"""Fine-tuning under 2-process DDP on CPU (gloo) through `famlab finetune`: every family with every pooling it offers
trains without unused-parameter detection, and at the same global batch it computes what one process computes.

Why the two agree: `finetune.batch_size` (here `data.batch_size`) is the global batch, so each of 2 ranks loads half
of it; the `ResumableSampler` gives rank r the r-th of every 2 indices of the same (seed, epoch) order, so one step of
the two ranks reads exactly the examples of one step of a single process; DDP averages the ranks' mean-loss gradients,
which is the mean over the global batch (equal per-rank sizes); validation and test metrics are torchmetrics objects
(`val/loss` a weighted `MeanMetric`) that sync across ranks when computed. Not covered: `finetune.standardize` (on
by default) standardises with each rank's batch statistics, so it is switched off here.
"""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from famlab.datamodules import PositionTrackingLoader, ResumableSampler
from famlab.experiments.commands import cli
from famlab.families import registry

from tests.experiments.reliability_helpers import write_corpus

ROOT = Path(__file__).resolve().parents[2]
DDP = ["trainer.devices=2", "trainer.accelerator=cpu", "trainer.strategy=ddp"]
EVERY_POOLING = [(f, p) for f in ("bert", "gpt", "t5") for p in registry.family(f).input_format.poolings]
# Tolerance of the comparison: the ranks' gradients meet in a gloo all-reduce that sums in another order than one
# process's mean over the batch, each rank pads its half batch to its own longest row (other matmul shapes, other
# summation orders), and the eval metrics add per-rank partial sums: float32 rounding, about 1e-7 relative per
# operation, which 4 optimizer steps of a dim-32 model carry to ~1e-6 (measured: at most 4.4e-7 relative, t5 cls).
# Each rank loading the whole global batch instead differs by 0.16 in val/loss (t5 mean).
RTOL, ATOL = 1e-4, 1e-6


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("ddpft")
    return root, write_corpus(root / "corpus.txt"), _task_csv(root / "task.csv")


def _task_csv(path: Path) -> Path:
    """120 sentences of 3 topics (96 train, 12 val, 12 test), each with words of other topics (not all separable
    in 4 steps, so accuracy moves). No word every sentence starts with: GPT's `cls` pooling reads the first
    token's state, which would be one vector for all."""
    words = {"animal": ["dog", "cat", "horse", "bird"], "colour": ["red", "blue", "green", "white"],
             "motion": ["run", "walk", "swim", "fly"]}
    every = [w for ws in words.values() for w in ws]
    rng = random.Random(0)
    lines = ["sentence,topic"] + [f"{' '.join(rng.sample(rng.choices(words[t], k=2) + rng.choices(every, k=3), 5))},{t}"
                                  for t in (list(words)[i % 3] for i in range(120))]
    path.write_text("\n".join(lines) + "\n")
    return path


def _args(files, family: str, pooling: str, run_dir: Path) -> list[str]:
    """A tiny scratch fine-tune: dim 32, 2 layers, global batch 8, 4 steps, validation after steps 2 and 4; no
    dropout anywhere (each process draws its own masks); `finetune.standardize=false`: the standardising head's
    batch norm would read each rank's own batch statistics (torch's SyncBatchNorm runs on GPUs only)."""
    _, corpus, task = files
    return ["finetune", family, "tiny", "init=scratch", f"data.corpus={corpus}", f"data.task={task}",
            "data.text_column=sentence", "data.label_column=topic", "model.dim=32", "model.num_layers=2",
            "data.tokenizer.vocab_size=512", "data.max_len=32", "data.batch_size=8", "data.num_workers=0",
            "finetune.max_steps=4", "finetune.val_every=2", f"finetune.pooling={pooling}", "finetune.dropout=0",
            "finetune.head_dropout=0", "finetune.standardize=false", "trainer.log_every_n_steps=1",
            "trainer.progress_bar=false", "wandb.mode=disabled", f"run_dir={run_dir}"]


def _metrics(run_dir: Path) -> dict[str, float]:
    """Every validation row's metrics (``val/loss@1`` ...) and the test scores of results.json."""
    out: dict[str, float] = {}
    with open(run_dir / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("val/loss"):
                out |= {f"{k}@{row['step']}": float(row[k]) for k in ("val/loss", "val/acc", "val/f1")}
    results = json.loads((run_dir / "results.json").read_text())
    return out | {k: float(v) for k, v in results["mean"].items()}


def _steps(num: int, batch: int, rank: int, world: int, epoch: int) -> list[list[int]]:
    """The index batches one rank trains on in ``epoch``, as `ClassificationDataModule.train_dataloader` loads them."""
    sampler = ResumableSampler(num, shuffle=True, seed=7, drop_last=True, rank=rank, world_size=world)
    sampler.set_epoch(epoch)
    return [b.tolist() for b in PositionTrackingLoader(list(range(num)), batch_size=batch, sampler=sampler)]


@pytest.mark.parametrize("num", [96, 100, 98])  # whole batches; a partial last batch; a partial one per rank
def test_two_ranks_at_batch_b_read_the_steps_of_one_process_at_2b(num):
    """Every step, the two ranks' batches are disjoint and together the single process's batch of that step; so are
    whole epochs (an odd dataset would lose its last index of the shuffled order under 2 ranks: not these)."""
    for epoch in (0, 1):
        one = _steps(num, 8, 0, 1, epoch)
        ranks = [_steps(num, 4, r, 2, epoch) for r in range(2)]
        assert len(ranks[0]) == len(ranks[1]) == len(one)
        for step, (a, b) in enumerate(zip(*ranks, strict=True)):
            assert not set(a) & set(b) and len(a) == len(b)
            assert sorted(a + b) == sorted(one[step]), (epoch, step)
    assert _steps(num, 8, 0, 1, 0) != _steps(num, 8, 0, 1, 1)  # shuffled per epoch


@pytest.mark.slow
@pytest.mark.parametrize("family,pooling", EVERY_POOLING)
def test_ddp_finetune_equals_one_process_at_the_same_global_batch(files, monkeypatch, family, pooling):
    """2 gloo ranks (batch 4 each) and one process (batch 8): the same validation loss, accuracy and F1 after
    steps 2 and 4, and the same test scores, for every family and each of its poolings."""
    root = files[0]
    env = {**os.environ, "FAMLAB_CACHE": str(root / "cache"), "WANDB_MODE": "disabled"}
    env.pop("FAMLAB_RUN_DIR", None)
    ddp_dir, one_dir = root / f"{family}-{pooling}-ddp", root / f"{family}-{pooling}-one"
    done = subprocess.run([sys.executable, "-m", "famlab", *_args(files, family, pooling, ddp_dir), *DDP], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "MEMBER: 2/2" in done.stderr  # two ranks trained
    monkeypatch.setenv("FAMLAB_CACHE", str(root / "cache"))  # the same tokenizer, trained once
    monkeypatch.delenv("FAMLAB_RUN_DIR", raising=False)
    assert cli.main([*_args(files, family, pooling, one_dir), "trainer.accelerator=cpu", "trainer.devices=1"]) == 0
    ddp, one = _metrics(ddp_dir), _metrics(one_dir)
    assert sorted(ddp) == sorted(one) and {"val/loss@1", "val/loss@3", "test/acc"} <= set(one), (ddp, one)
    worst = max(abs(ddp[k] - one[k]) / max(abs(one[k]), 1e-12) for k in one)
    print(f"{family} {pooling}: largest relative difference {worst:.1e} over {sorted(one)}")
    assert ddp == pytest.approx(one, rel=RTOL, abs=ATOL)
