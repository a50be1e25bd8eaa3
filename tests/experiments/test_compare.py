"""A tiny real comparison run twice: same seeds give the same table (except time columns); budgets match."""

import json
import random
from pathlib import Path

import pytest
import yaml

from experiments import cli
from experiments.report import TIME_COLUMNS


def tiny_inputs(root: Path) -> list[str]:
    """A small corpus and a 3-class task (own files, so the test trains its own small tokenizer quickly)."""
    rng = random.Random(0)
    words = {"animal": ["dog", "cat", "horse", "bird", "fish", "cow"], "colour": ["red", "blue", "green", "white"],
             "motion": ["run", "walk", "swim", "fly", "jump"]}
    docs = [" ".join(rng.choices(sum(words.values(), []), k=30)) for _ in range(400)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    lines = ["sentence,topic,split"]
    for i in range(300):
        topic = list(words)[i % 3]
        split = (["train"] * 8 + ["val", "test"])[i % 10]
        lines.append(f"a {' '.join(rng.choices(words[topic], k=4))} thing,{topic},{split}")
    (root / "task.csv").write_text("\n".join(lines) + "\n")
    return [f"data.corpus={root / 'corpus.txt'}", f"data.task={root / 'task.csv'}", "data.text_column=sentence",
            "data.label_column=topic", "data.tokenizer.vocab_size=300", "data.tokenizer.num_sentinels=20",
            "data.seq_len=32", "data.batch_size=8",
            "data.max_len=32", "model.dim=32", "trainer.max_steps=12", "trainer.val_check_interval=6",
            "trainer.limit_val_batches=2", "finetune.max_steps=6", "finetune.val_every=3", "compare.task_limit=None",
            "compare.seeds=[0,1]", "compare.scratch_seeds=[0]", "wandb.mode=disabled", "trainer.progress_bar=false"]


def run_compare(root: Path, *extra: str) -> Path:
    before = set((root / "runs").glob("compare-*")) if (root / "runs").exists() else set()
    assert cli.main(["compare", *tiny_inputs(root), *extra]) == 0
    (new,) = set((root / "runs").glob("compare-*")) - before
    return new


def strip_time_columns(table: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]
    drop = {i for i, name in enumerate(rows[0]) if name in TIME_COLUMNS}
    return [[c for i, c in enumerate(r) if i not in drop] for r in rows]


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        first = run_compare(root, "compare.families=[bert,gpt,t5]", "trainer.max_steps=30")
        second = run_compare(root, "compare.families=[bert,gpt,t5]", "trainer.max_steps=30")
    return first, second


@pytest.mark.slow
def test_same_seeds_reproduce_every_column_but_time(twice):
    a, b = (json.loads((d / "results.json").read_text()) for d in twice)
    for name in ("pretrain", "finetune"):
        assert strip_time_columns(a["tables"][name]) == strip_time_columns(b["tables"][name])
    assert a["significance"] == b["significance"]
    pre = strip_time_columns(a["tables"]["pretrain"])
    assert [r[0] for r in pre[2:]] == ["bert", "gpt", "t5"]  # one row per family


@pytest.mark.slow
def test_flops_budget_is_matched_within_two_percent(twice):
    plan = json.loads((twice[0] / "plan.json").read_text())
    flops = {f: p["flops"] for f, p in plan["families"].items()}
    assert max(flops.values()) / min(flops.values()) - 1 <= 0.02
    logged = {json.loads((twice[0] / f"{f}-pretrain-s0" / "results.json").read_text())["budget"]["flops"]
              for f in flops}
    assert logged == set(flops.values())  # what the runs logged as budget/flops is the plan
    from experiments.report import read_metrics

    for family, p in plan["families"].items():  # the last validation is at the end of each family's budget
        rows = read_metrics(twice[0] / f"{family}-pretrain-s0" / "metrics.csv")
        val_steps = [r["step"] for r in rows if "val/loss" in r]
        assert val_steps[-1] == p["steps"] - 1, (family, val_steps)


@pytest.mark.slow
def test_runs_share_the_group_tokenizer_and_tags(twice):
    comp = twice[0]
    runs = [p for p in comp.iterdir() if (p / "config.yaml").is_file()]
    assert len(runs) == 9  # 3 families x (pretrain, fine-tune, scratch)
    cfgs = [yaml.safe_load((p / "config.yaml").read_text()) for p in runs]
    assert {c["wandb"]["group"] for c in cfgs} == {f"compare-{comp.name.split('-', 1)[1].rsplit('-', 2)[0]}"}
    assert {c["data"]["tokenizer"]["path"] for c in cfgs} == {str((comp / "tokenizer.json").resolve())}
    assert all({c["model"]["family"], "budget-flops"} <= set(c["wandb"]["tags"]) for c in cfgs)
    ft = json.loads((comp / "gpt-ft-s0" / "results.json").read_text())
    assert set(ft["seeds"]) == {"0", "1"}


@pytest.mark.slow
def test_lr_grid_keeps_the_lr_with_the_lowest_validation_loss(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    comp = run_compare(tmp_path, "compare.families=[gpt]", "compare.lr_grid=[1e-4,3e-3]", "compare.seeds=[0]",
                       "compare.scratch_seeds=[]")
    plan = json.loads((comp / "plan.json").read_text())["families"]["gpt"]
    losses = {float(k): v for k, v in plan["lr_grid"].items()}
    assert plan["lr"] == min(losses, key=losses.get)
    results = json.loads((comp / "results.json").read_text())["families"]["gpt"]
    assert results["lr"] == pytest.approx(plan["lr"]) and results["val_loss"] == pytest.approx(min(losses.values()))
    ft = yaml.safe_load((comp / "gpt-ft-s0" / "config.yaml").read_text())
    assert ft["init"].endswith(f"gpt-pretrain-s0-lr{plan['lr']:g}")  # fine-tuned from the chosen run
