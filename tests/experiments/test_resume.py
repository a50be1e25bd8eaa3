"""Exact resume: a run interrupted (SIGTERM at a step boundary) and resumed trains exactly like one that was not."""

from __future__ import annotations

import pytest
import torch
from famlab.experiments.commands import cli
from famlab.experiments.plumbing.reliability import PREEMPTED_EXIT

from tests.experiments.reliability_helpers import fast_args, losses, step_rows, write_corpus

STEPS = 30  # about 1.5 epochs of the small corpus at batch 8: the resumed part crosses an epoch boundary


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        mp.delenv("FAMLAB_FAULT_SIGTERM_STEP", raising=False)
        mp.delenv("FAMLAB_FAULT_NAN_STEPS", raising=False)
        yield root, write_corpus(root / "corpus.txt")


@pytest.fixture(scope="module")
def reference(env):
    root, corpus = env
    run_dir = root / "uninterrupted"
    assert cli.main(fast_args(corpus, run_dir, STEPS)) == 0
    return run_dir


def _interrupted(env, name: str, cut: int, monkeypatch):
    root, corpus = env
    run_dir = root / name
    monkeypatch.setenv("FAMLAB_FAULT_SIGTERM_STEP", str(cut))
    assert cli.main(fast_args(corpus, run_dir, STEPS)) == PREEMPTED_EXIT
    monkeypatch.delenv("FAMLAB_FAULT_SIGTERM_STEP")
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == cut
    assert cli.main([*fast_args(corpus, run_dir, STEPS), "resume=auto"]) == 0
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("where", ["mid_epoch", "last_batch_of_epoch"])
def test_resumed_run_has_the_same_per_step_losses(env, reference, where, monkeypatch):
    rows = step_rows(reference)
    per_epoch = max(s for s, r in rows.items() if r["epoch"] == "0") + 1  # metrics step is 0-based
    assert STEPS > per_epoch + 2, "the test needs the resumed segment to cross an epoch boundary"
    cut = per_epoch // 2 + 1 if where == "mid_epoch" else per_epoch
    resumed = _interrupted(env, where, cut, monkeypatch)
    expected, got = losses(reference), losses(resumed)
    assert sorted(got) == sorted(expected) == list(range(STEPS))
    torch.testing.assert_close(torch.tensor([got[s] for s in range(STEPS)]),
                               torch.tensor([expected[s] for s in range(STEPS)]), rtol=0, atol=0)
    import json

    assert json.loads((resumed / "results.json").read_text())["steps"] == STEPS


def test_rng_states_are_weights_only_loadable(tmp_path):
    """The RNG states survive torch.save / torch.load(weights_only=True) and restore the same draws."""
    import random

    import numpy as np
    from famlab.experiments.plumbing.reliability import rng_state, set_rng_state

    state = rng_state()
    first = (torch.rand(3), np.random.rand(3), random.random())
    torch.save({"rng": state}, tmp_path / "s.pt")
    set_rng_state(torch.load(tmp_path / "s.pt", weights_only=True)["rng"])
    again = (torch.rand(3), np.random.rand(3), random.random())
    torch.testing.assert_close(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert first[2] == again[2]


def test_existing_run_dir_without_resume_is_refused(env, capsys):
    root, corpus = env
    run_dir = root / "occupied"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("x: 1\n")
    assert cli.main(fast_args(corpus, run_dir, 2)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "resume=auto" in err[0] and str(run_dir) in err[0]
