"""2-process DDP on CPU (gloo) through `famlab pretrain`: one W&B run, files from rank 0, exact plan after resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from famlab.datamodules import ResumableSampler
from famlab.experiments.plumbing.reliability import PREEMPTED_EXIT, RNG_KEY

from tests.experiments.ddp_trace_script import TRACE_ENV, read_trace
from tests.experiments.reliability_helpers import fast_args, step_rows, write_corpus

ROOT = Path(__file__).resolve().parents[2]
DDP = ["trainer.devices=2", "trainer.accelerator=cpu", "trainer.strategy=ddp"]


def _famlab(args: list[str], root: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FAMLAB_CACHE": str(root / "cache"), "WANDB_MODE": "offline", **extra}
    env.pop("FAMLAB_RUN_DIR", None)
    return subprocess.run([sys.executable, "-m", "famlab", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_ddp_pretrain_from_a_prepared_dir_logs_one_wandb_run_and_rank0_writes(tmp_path):
    """Both ranks train from a directory `famlab prepare` wrote, with the raw text gone: no rank reads it."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    prepared = tmp_path / "prepared"
    done = _famlab(["prepare", "gpt", "tiny", f"data.corpus={corpus}", f"run_dir={prepared}"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    corpus.unlink()
    run_dir = tmp_path / "ddp"
    args = [a for a in fast_args(prepared, run_dir, 6) if not a.startswith("wandb.")] + ["wandb.mode=offline", *DDP]
    done = _famlab(args, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("done:") == 1  # one report, from rank 0
    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 1
    assert json.loads((run_dir / "results.json").read_text())["steps"] == 6
    assert sorted(step_rows(run_dir)) == list(range(6))


def _traced(args: list[str], root: Path, trace: Path, **extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`famlab` through ddp_trace_script; returns the process and ``(rank, step) -> (epoch, block indices)``."""
    env = {**os.environ, "FAMLAB_CACHE": str(root / "cache"), "WANDB_MODE": "offline", TRACE_ENV: str(trace), **extra}
    env.pop("FAMLAB_RUN_DIR", None)
    done = subprocess.run([sys.executable, "-m", "tests.experiments.ddp_trace_script", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    seen: dict[tuple[int, int], tuple[int, list[int]]] = {}
    for row in read_trace(trace):
        key = (row["rank"], row["step"])
        assert key not in seen, f"rank {key[0]} trained step {key[1]} twice in one run"
        seen[key] = (row["epoch"], row["indices"])
    return done, seen


def _assert_every_block_once_per_epoch(seen: dict, *, num_blocks: int, plan: int, batch: int, seed: int) -> None:
    """``seen`` (``(rank, step) -> (epoch, indices)`` of 2 ranks, steps 1..plan) follows the shuffled
    ``ResumableSampler`` order of (seed, epoch, rank) batch by batch: every block once per epoch, ranks
    disjoint, nothing missing in a complete epoch but the documented drop_last remainder."""
    per_rank = num_blocks // 2  # the sampler cuts the global order to a multiple of the world size
    per_epoch = per_rank // batch  # the loader drops each rank's last partial batch
    assert sorted(seen) == [(r, s) for r in range(2) for s in range(1, plan + 1)]
    for (r, step), (epoch, indices) in seen.items():
        assert epoch == (step - 1) // per_epoch and len(indices) == batch and -1 not in indices, (r, step, indices)
    for step in range(1, plan + 1):
        assert not set(seen[0, step][1]) & set(seen[1, step][1]), f"step {step}: both ranks trained a block"
    for epoch in range((plan - 1) // per_epoch + 1):
        steps = [s for s in range(1, plan + 1) if (s - 1) // per_epoch == epoch]
        everyone: list[int] = []
        for r in range(2):
            got = [i for s in steps for i in seen[r, s][1]]
            expected = ResumableSampler(num_blocks, shuffle=True, seed=seed, rank=r, world_size=2).indices(epoch)
            assert got == expected[: len(got)].tolist(), f"rank {r} epoch {epoch}: not the sampler's order"
            everyone += got
        assert len(everyone) == len(set(everyone)), f"epoch {epoch}: a block trained twice"
        if len(steps) == per_epoch:  # a complete epoch: everything but the documented drop_last remainder
            assert len(everyone) == num_blocks - num_blocks % 2 - 2 * (per_rank % batch)
    if plan > per_epoch:  # shuffled per epoch (else the order checks prove little)
        assert seen[0, 1][1] != seen[0, per_epoch + 1][1]


@pytest.mark.slow
def test_ddp_run_interrupted_and_resumed_finishes_the_plan_seeing_every_sample_once_per_epoch(tmp_path):
    """2 gloo ranks, 1.5 epochs, SIGTERM mid-epoch 0, resume=auto: the blocks trained on, step by step, are the
    sampler's epochs exactly once (drop_last remainder aside), disjoint across ranks, and the same as an
    uninterrupted run's."""
    corpus = write_corpus(tmp_path / "corpus.txt")  # 135 blocks of 33 tokens: 8 batches of 8 per rank and epoch
    run_dir = tmp_path / "ddp-resume"
    plan, cut, batch, seed = 12, 5, 8, 3  # batch: per rank, of the global data.batch_size=16
    extra = [*DDP, "data.shuffle=true", f"data.seed={seed}", f"data.batch_size={2 * batch}"]
    args = [*fast_args(corpus, run_dir, plan), *extra]
    first, seen1 = _traced(args, tmp_path, tmp_path / "trace1", FAMLAB_FAULT_SIGTERM_STEP=str(cut))
    assert first.returncode == PREEMPTED_EXIT, first.stderr[-3000:]
    assert "resume=auto" in first.stderr
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == cut
    assert len(ckpt[RNG_KEY]) == 2  # per rank
    streams = ckpt["PretrainDataModule"]["collate"]  # the DataModule's collation streams, per rank
    assert len(streams) == 2 and not torch.equal(streams[0], streams[1])
    second, seen2 = _traced([*args, "resume=auto"], tmp_path, tmp_path / "trace2")
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads((run_dir / "results.json").read_text())["steps"] == plan

    # Each rank trains steps 1..cut before the preemption and cut+1..plan after it, each once.
    for r in range(2):
        assert sorted(s for rank, s in seen1 if rank == r) == list(range(1, cut + 1))
        assert sorted(s for rank, s in seen2 if rank == r) == list(range(cut + 1, plan + 1))
    seen = {**seen1, **seen2}
    num_blocks = json.loads((tmp_path / "trace1" / "blocks0.json").read_text())["num_blocks"]
    per_epoch = num_blocks // 2 // batch
    assert 0 < cut < per_epoch < plan < 2 * per_epoch  # the cut is mid-epoch 0, the plan 1.5 epochs
    _assert_every_block_once_per_epoch(seen, num_blocks=num_blocks, plan=plan, batch=batch, seed=seed)

    # An uninterrupted 2-process run trains the same blocks at every step on every rank.
    reference, seen_ref = _traced([*fast_args(corpus, tmp_path / "ref", plan), *extra], tmp_path, tmp_path / "ref1")
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert seen_ref == seen
    # Last: rank 1 rewriting metrics.csv during setup races rank 0 (test_csv_ranks.py) and loses these rows.
    assert sorted(step_rows(run_dir)) == list(range(plan)), "metrics.csv lost the first segment's rows"
