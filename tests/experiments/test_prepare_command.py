"""``famlab prepare`` and runs from prepared data: a raw spec goes through the same prepared path, a prepared
directory needs no raw text."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from famlab.datamodules import prepare as prep
from famlab.experiments.commands import cli
from famlab.experiments.commands import prepare as prepare_command

WORDS = "the a river stone cloud runs falls over under quiet bright old new small large red blue".split()
TINY = ["model.dim=32", "model.num_layers=1", "model.num_heads=2", "data.seq_len=32", "data.batch_size=4",
        "data.tokenizer.vocab_size=400", "data.tokenizer.num_sentinels=8", "trainer.max_steps=2",
        "trainer.val_check_interval=2", "trainer.limit_val_batches=1", "trainer.progress_bar=false",
        "wandb.mode=disabled"]


@pytest.fixture
def corpus(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    rng = random.Random(0)
    docs = ["\n".join(" ".join(rng.choices(WORDS, k=rng.randint(4, 12))) for _ in range(rng.randint(1, 4)))
            for _ in range(600)]
    path = tmp_path / "raw.txt"
    path.write_text("\n\n".join(docs) + "\n")
    return path


def test_prepare_writes_run_dir_and_prints_it(corpus, capsys):
    out = corpus.parent / "prepared"
    assert prepare_command.main([], [f"data.corpus={corpus}", f"run_dir={out}", "data.tokenizer.vocab_size=400",
                                      "data.tokenizer.num_sentinels=8"], []) == 0
    printed = capsys.readouterr().out
    assert f"prepared: {out}" in printed and f"data.corpus={out}" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sources"][0]["path"] == str(corpus.resolve()) and manifest["settings"]["vocab_size"] == 400
    assert manifest["tokenizer"]["sample_limit"] == 200_000_000 and manifest["split"]["val_documents"] == 30
    assert not (corpus.parent / "cache" / "prepared").exists()  # run_dir=, not the cache


def test_pretrain_from_a_prepared_dir_never_opens_the_raw_text(corpus, capsys):
    out = corpus.parent / "prepared"
    assert prepare_command.main([], [f"data.corpus={corpus}", f"run_dir={out}", "data.tokenizer.vocab_size=400",
                                      "data.tokenizer.num_sentinels=8"], []) == 0
    corpus.unlink()  # nothing may read it now
    assert cli.main(["pretrain", "gpt", "tiny", f"data.corpus={out}", "run_dir=run", *TINY]) == 0
    results = json.loads((corpus.parent / "run" / "results.json").read_text())
    assert results["steps"] == 2
    assert cli.main(["pretrain", "bert", "tiny", f"data.corpus={out}", "run_dir=run-bert", *TINY]) == 0
    assert (out / "streams-sep3.json").is_file()  # BERT separates documents with [SEP] (id 3): its own streams


def test_a_raw_spec_is_prepared_once_into_the_cache(corpus, monkeypatch):
    assert cli.main(["pretrain", "gpt", "tiny", f"data.corpus={corpus}", "run_dir=first", *TINY]) == 0
    prepared = [p for p in (corpus.parent / "cache" / "prepared").iterdir() if not p.is_symlink()]
    assert len(prepared) == 1 and (prepared[0] / "manifest.json").is_file()  # (and a link: "with its tokenizer")

    def no_read(*args, **kwargs):
        raise AssertionError("a cached corpus was read again")

    monkeypatch.setattr(prep, "path_documents", no_read)
    assert cli.main(["pretrain", "gpt", "tiny", f"data.corpus={corpus}", "run_dir=second", *TINY]) == 0
    first = (corpus.parent / "first" / "tokenizer.json").read_bytes()
    assert first == (corpus.parent / "second" / "tokenizer.json").read_bytes()


def test_bad_corpus_is_one_line_and_leaves_nothing(corpus, capsys):
    (corpus.parent / "empty").mkdir()
    assert cli.main(["pretrain", "gpt", "tiny", f"data.corpus={corpus.parent / 'empty'}", *TINY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "directory has no .txt or .jsonl files" in err[0]
    assert not any((corpus.parent / "cache").glob("prepared/*"))
