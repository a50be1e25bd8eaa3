"""``famlab finetune data.task=<suite>``: bad suites exit 2 with one line; a tiny suite fine-tunes end to end."""

from __future__ import annotations

import json
import random

import pytest
import yaml
from famlab.experiments.commands import cli

from tests.experiments.reliability_helpers import write_corpus

WORDS = {"animal": ["dog", "cat", "horse", "bird", "fish"], "colour": ["red", "blue", "green", "white", "black"],
         "motion": ["run", "walk", "swim", "fly", "jump"]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A single-text CSV task (3 classes), a JSONL pair task (same / different topic) and a one-class task."""
    d = tmp_path_factory.mktemp("suite")
    rng = random.Random(0)
    topics = list(WORDS)
    single = ["sentence,topic"] + [f"a {' '.join(rng.choices(WORDS[topics[i % 3]], k=4))} thing,{topics[i % 3]}"
                                   for i in range(120)]
    (d / "topic.csv").write_text("\n".join(single) + "\n")
    rows = []
    for i in range(120):
        ta, tb = topics[i % 3], topics[(i // 3) % 3]
        rows.append(json.dumps({"first": " ".join(rng.choices(WORDS[ta], k=3)),
                                "second": " ".join(rng.choices(WORDS[tb], k=3)),
                                "label": "same" if ta == tb else "different"}))
    (d / "pairs.jsonl").write_text("\n".join(rows) + "\n")
    (d / "one.csv").write_text("text,label\n" + "".join(f"t{i},x\n" for i in range(30)))
    write_corpus(d / "corpus.txt")
    return d


def _suite(path, tasks):
    path.write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False))
    return path


BAD = [
    ("unknown task", [{"task": "topic.csv", "text_column": "sentence", "label_column": "topic"}, "wordnet-pairz"],
     "suite.yaml line 5: unknown task 'wordnet-pairz'"),
    ("pair task without its second column", [{"task": "pairs.jsonl", "text_column": "first", "pair": True}],
     "is a pair task (pair: true) but names no text_pair_column"),
    ("pair column absent from the file", [{"task": "pairs.jsonl", "text_column": "first", "pair": True,
                                           "text_pair_column": "secnd"}], "no column 'secnd'"),
    ("a task with one class", [{"task": "one.csv"}], "only one class ('x') in the training split"),
]


@pytest.mark.parametrize("case,tasks,fragment", BAD, ids=[c[0] for c in BAD])
def test_bad_suite_exits_2_with_one_line(files, tmp_path, monkeypatch, capsys, case, tasks, fragment):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    suite = _suite(files / "suite.yaml", tasks)
    args = ["finetune", "gpt", "tiny", "init=scratch", f"data.task={suite}", "wandb.mode=disabled",
            f"data.corpus={files / 'corpus.txt'}"]
    capsys.readouterr()
    assert cli.main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("famlab:")]
    assert len(err) == 1 and err[0].startswith("famlab: error: ") and fragment in err[0], err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # refused before training


@pytest.mark.slow
def test_finetune_suite_end_to_end(files, tmp_path, monkeypatch):
    """Two tasks (one a sentence pair), two seeds, a few steps each: one sub run per task, the suite results and
    table; the suite score is the per-seed average of the tasks' headline scores."""
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    suite = _suite(files / "ok.yaml", [
        {"task": "topic.csv", "text_column": "sentence", "label_column": "topic"},
        {"name": "same", "task": "pairs.jsonl", "text_column": "first", "text_pair_column": "second", "pair": True,
         "metric": "f1"},
    ])
    run_dir = tmp_path / "suite-run"
    args = ["finetune", "gpt", "tiny", "init=scratch", f"data.task={suite}", f"data.corpus={files / 'corpus.txt'}",
            "data.tokenizer.vocab_size=400", "model.dim=32", "finetune.max_steps=3", "finetune.val_every=3",
            "finetune.seeds=[0,1]", "data.batch_size=16", "data.max_len=32", "trainer.progress_bar=false",
            "wandb.mode=offline", f"run_dir={run_dir}"]
    assert cli.main(args) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert [t["name"] for t in results["tasks"]] == ["topic", "same"]
    per_seed = {}
    for t, key in zip(results["tasks"], ("test/acc", "test/f1"), strict=True):
        sub = json.loads((run_dir / t["name"] / "results.json").read_text())
        assert sub["task"] == t["task"] and set(sub["seeds"]) == {"0", "1"}
        assert t["seeds"] == {s: v[key] for s, v in sub["seeds"].items()}
        assert t["majority"] == sub["majority"][key] and 0.0 <= t["tfidf"] <= 1.0
        for s, v in t["seeds"].items():
            per_seed.setdefault(s, []).append(v)
        assert (run_dir / t["name"] / "seed-0" / "checkpoints").is_dir()
    assert results["suite"]["mean"] == pytest.approx(sum(sum(v) / 2 for v in per_seed.values()) / 2)
    assert results["suite"]["seeds"] == 2 and results["suite"]["low"] <= results["suite"]["mean"]
    table = (run_dir / "suite_table.md").read_text()
    assert "| topic (acc) | same (f1) | suite (macro avg) |" in table
    assert "| majority class |" in table and "| TF-IDF + LR |" in table
