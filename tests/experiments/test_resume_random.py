"""Exact resume with randomness on: dropout, BERT's masks, T5's span noise and UL2's denoiser draw.

The other resume tests run GPT ``tiny`` with dropout 0 and causal LM, whose collation draws nothing, so a resume that
restored no RNG state at all would pass them. Here every arm draws from the RNG in every step: the model's dropout
(the global torch RNG, ``experiments/plumbing/rng.py``) and the objective's corruption (the DataModule's collation
stream, ``datamodules/sampler.py``). A run interrupted (SIGTERM after ``CUT`` optimizer steps, the test hook in
``experiments/plumbing/faults.py``) and resumed with ``resume=auto`` must log the same training loss at every step as
the run that was not interrupted: exactly, since both are the same float32 CPU computation from the same states.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from famlab.experiments.commands import cli
from famlab.experiments.plumbing.reliability import PREEMPTED_EXIT

from tests.experiments.reliability_helpers import losses, step_rows, write_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS, CUT = 12, 5  # the resumed segment (steps 6-12) crosses an epoch boundary of the 60-line corpus (asserted)

ARMS = {  # arm -> (family, objective): every family, each with an objective that draws at collation
    "bert_mlm": ("bert", "mlm"),
    "gpt_clm": ("gpt", "clm"),  # draws nothing at collation: dropout alone
    "t5_span": ("t5", "span"),
    "gpt_ul2": ("gpt", "ul2"),  # a denoiser (R, X or S) drawn per batch
}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume_random")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        for knob in ("FAMLAB_FAULT_SIGTERM_STEP", "FAMLAB_FAULT_NAN_STEPS", "FAMLAB_FAULT_SIGTERM_FIT"):
            mp.delenv(knob, raising=False)
        yield root, write_corpus(root / "corpus.txt", lines=60)


def _args(family: str, objective: str, corpus: Path, run_dir: Path) -> list[str]:
    """A dim-32, 2-layer run of ``STEPS`` steps with dropout 0.1 and a training-loss row every step."""
    return [
        "pretrain", family, "tiny", f"objective.name={objective}", f"data.corpus={corpus}",
        "model.dim=32", "model.num_layers=2", "model.num_heads=2", "model.max_seq_len=64", "model.dropout=0.1",
        "data.seq_len=32", "data.batch_size=4",
        f"trainer.max_steps={STEPS}", "trainer.val_check_interval=4", "trainer.limit_val_batches=1",
        "trainer.log_every_n_steps=1", "trainer.progress_bar=false", "wandb.mode=disabled", f"run_dir={run_dir}",
    ]


@pytest.mark.parametrize("arm", list(ARMS))  # about 1.5 s each on one core: all in the fast subset
def test_interrupted_run_with_randomness_resumes_exactly(env, arm, monkeypatch):
    root, corpus = env
    family, objective = ARMS[arm]
    reference, resumed = root / f"{arm}_whole", root / f"{arm}_cut"
    assert cli.main(_args(family, objective, corpus, reference)) == 0

    monkeypatch.setenv("FAMLAB_FAULT_SIGTERM_STEP", str(CUT))
    assert cli.main(_args(family, objective, corpus, resumed)) == PREEMPTED_EXIT
    monkeypatch.delenv("FAMLAB_FAULT_SIGTERM_STEP")
    ckpt = torch.load(resumed / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == CUT
    assert cli.main([*_args(family, objective, corpus, resumed), "resume=auto"]) == 0

    epochs = {step: int(row["epoch"]) for step, row in step_rows(resumed).items()}
    assert epochs[CUT] < epochs[STEPS - 1], "the resumed segment must cross an epoch boundary"
    expected, got = losses(reference), losses(resumed)
    assert sorted(got) == sorted(expected) == list(range(STEPS))
    torch.testing.assert_close(torch.tensor([got[s] for s in range(STEPS)]),
                               torch.tensor([expected[s] for s in range(STEPS)]), rtol=0, atol=0)
