"""Seeded fuzz of ``famlab config``: hostile ``key=value`` tokens on the schema's own keys.

Every token either exits 0 or exits 2 with one ``famlab: error:`` line (an exception escaping ``cli.main`` is
the traceback a user would see, and fails the test); every config it accepts pretrains 2 steps to a finite
loss through the real ``famlab pretrain`` path (in-process, a 32-wide one-layer model on a small corpus).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.configuration.compose import flatten, schema, to_plain
from famlab.experiments.configuration.reads import reads

from tests.experiments.reliability_helpers import step_rows, write_corpus

SEED, TOKENS = 0, 240
HOSTILE = [
    "0", "-1", "1", "2", "3.7", "0.5", "1e-12", "-0", "nan", "inf", "-inf", "1e309", "99999999999", "[1,2", "[]",
    "[0.5]", "[[1]]", "{a: 1}", "{", "true", "None", "", "abc", "a\x07b", "1\x00", "'", "${nope}", "x" * 300,
]
# Keys whose accepted values start other processes or a compile (covered by test_ddp / test_multinode /
# test_compile): checked here through `famlab config`, not trained in-process.
NOT_TRAINED_HERE = ("trainer.devices", "trainer.num_nodes", "trainer.strategy", "trainer.compile")


def schema_keys() -> list[str]:
    """Every leaf key of the config schema, dotted (``model.dim``, ``data.tokenizer.kind`` ...)."""
    return sorted(flatten(to_plain(schema())))


def draw(seed: int, n: int) -> list[tuple[str, str]]:
    """``n`` seeded (family, ``key=value``) pairs: a schema key with a hostile value."""
    rng, keys = random.Random(seed), schema_keys()
    return [(rng.choice(["gpt", "bert", "t5"]), f"{rng.choice(keys)}={rng.choice(HOSTILE)}") for _ in range(n)]


def base(corpus: Path) -> list[str]:
    return [f"data.corpus={corpus}", "data.seq_len=32", "data.batch_size=4", "model.dim=32", "model.num_layers=1",
            "trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
            "trainer.validate_first=false", "trainer.log_every_n_steps=1", "trainer.progress_bar=false",
            "wandb.mode=disabled", "data.val_batches=1"]


def test_schema_keys_cover_every_section():
    keys = schema_keys()
    assert len(keys) > 100 and {k.split(".")[0] for k in keys} >= {"model", "objective", "data", "optim", "trainer"}


@pytest.mark.slow
def test_hostile_tokens_exit_0_or_2_and_accepted_configs_train(tmp_path, monkeypatch, capsys):
    """240 seeded hostile tokens: never an exception, exit 0 or 2 with one line; accepted ones train 2 steps."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    corpus = write_corpus(tmp_path / "corpus.txt", lines=200)
    accepted: dict[str, tuple[str, str]] = {}  # resolved pretraining config -> (family, token), one run each
    refused = 0
    for family, token in draw(SEED, TOKENS):
        args = [family, "tiny", *base(corpus), token]
        status = cli.main(["config", *args])  # an exception here is a traceback for the user
        out = capsys.readouterr()
        assert status in (0, 2), (token, status)
        if status == 2:
            lines = out.err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("famlab: error: "), (token, out.err)
            refused += 1
            continue
        key = token.split("=")[0].lstrip("-")
        if key in NOT_TRAINED_HERE or not reads("pretrain", key):  # pretrain refuses a key it does not read
            continue
        cfg = yaml.safe_load(out.out)
        trained = {k: cfg[k] for k in ("model", "objective", "data", "optim", "trainer", "seed", "resume")}
        accepted.setdefault(json.dumps(trained, sort_keys=True, default=str), (family, token))
    assert refused > TOKENS // 3 and accepted, (refused, len(accepted))
    with capsys.disabled():
        print(f"{TOKENS} tokens: {refused} refused, {len(accepted)} distinct accepted pretraining configs trained")
    for i, (family, token) in enumerate(accepted.values()):
        run_dir = tmp_path / f"run{i}"
        status = cli.main(["pretrain", family, "tiny", *base(corpus), token, f"run_dir={run_dir}"])
        err = capsys.readouterr().err
        assert status == 0, (family, token, err[-2000:])
        steps = json.loads((run_dir / "results.json").read_text())["steps"]
        losses = [float(r["train/loss"]) for r in step_rows(run_dir).values()]
        assert steps >= 1 and len(losses) == steps and all(math.isfinite(v) for v in losses), (token, losses)
