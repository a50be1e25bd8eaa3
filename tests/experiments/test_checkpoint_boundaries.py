"""Where a preempted run's checkpoint lands, and where the resumed run writes.

Both were bugs found while tracing DDP resume (test_ddp.py): a run preempted before ModelCheckpoint's first
save resumed into ``last-v1.ckpt`` (``last.ckpt`` stayed stale), and a signal between accumulated
micro-batches checkpointed mid-window (the accumulated gradients were lost).
"""

from __future__ import annotations

import pytest
import torch
from famlab.experiments.commands import cli
from famlab.experiments.plumbing.reliability import PREEMPTED_EXIT

from tests.experiments.ddp_trace_script import SigtermAtBatch
from tests.experiments.reliability_helpers import fast_args, write_corpus


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FAMLAB_FAULT_SIGTERM_STEP", raising=False)
    monkeypatch.delenv("FAMLAB_FAULT_NAN_STEPS", raising=False)
    return tmp_path, write_corpus(tmp_path / "corpus.txt")


@pytest.mark.slow
def test_run_preempted_before_its_first_checkpoint_resumes_into_last_ckpt(env, monkeypatch):
    """finetune init=, compare and generate read checkpoints/last.ckpt: it must hold the finished model."""
    root, corpus = env
    run_dir = root / "run"
    args = fast_args(corpus, run_dir, 4)  # validation (and ModelCheckpoint's first save) at step 4
    monkeypatch.setenv("FAMLAB_FAULT_SIGTERM_STEP", "2")
    assert cli.main(args) == PREEMPTED_EXIT
    monkeypatch.delenv("FAMLAB_FAULT_SIGTERM_STEP")
    assert cli.main([*args, "resume=auto"]) == 0
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    stray = sorted(p.name for p in (run_dir / "checkpoints").glob("last-v*.ckpt"))
    assert (ckpt["global_step"], stray) == (4, [])


@pytest.mark.slow
def test_sigterm_between_accumulated_micro_batches_checkpoints_at_a_step_boundary(env, monkeypatch):
    import famlab.experiments.steps.pretrain as pretrain_job

    root, corpus = env
    make_trainer = pretrain_job.make_trainer

    def with_signal(*args, **kwargs):
        trainer = make_trainer(*args, **kwargs)
        trainer.callbacks.append(SigtermAtBatch(3))  # the first micro-batch of step 2, as a real signal can land
        return trainer

    monkeypatch.setattr(pretrain_job, "make_trainer", with_signal)
    run_dir = root / "run"
    batch, accumulate = 8, 2
    args = [*fast_args(corpus, run_dir, 4), f"trainer.accumulate_grad_batches={accumulate}"]
    assert cli.main(args) == PREEMPTED_EXIT
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    position = ckpt["PretrainDataModule"]["train_sampler"]["position"]  # blocks consumed by this rank
    # the global batch of each step, read in `accumulate` micro-batches of batch / accumulate
    assert position == ckpt["global_step"] * batch, "checkpoint taken between micro-batches"
