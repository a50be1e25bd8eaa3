"""The data generator of ``tests/generated_data.py``: deterministic from its seed, and covering every category."""

from __future__ import annotations

import csv
import io
import json

import generated_data as g
from famlab.datamodules.tokenizer import min_vocab_size


def test_same_seed_same_bytes_other_seed_other_bytes():
    assert [c.files for c in g.catalogue(0)] == [c.files for c in g.catalogue(0)]
    assert g.random_case(7).files == g.random_case(7).files
    assert g.random_case(7).files != g.random_case(8).files
    assert [c.files for c in g.catalogue(0)] != [c.files for c in g.catalogue(1)]


def test_catalogue_has_twenty_reports_unique_names_and_every_category():
    cases = g.catalogue(0)
    assert len({c.name for c in cases}) == len(cases)
    assert sum(c.expect_error is None for c in cases) >= 20
    reports = [c for c in cases if c.expect_error is None]
    assert sum(c.families == g.FAMILIES for c in reports) > len(reports) / 2  # every family on most cases
    covers = set().union(*(c.covers for c in cases))
    wanted = {f"script:{s}" for s in g.SCRIPTS} | {f"lengths:{n}" for n in g.DOC_LENGTHS}
    wanted |= {f"kind:{k}" for k in g.KINDS} | {"vocab:min", "vocab:huge", "corpus:txt", "corpus:jsonl", "corpus:dir"}
    wanted |= {"classes:2", "classes:50", "majority", "labels:ints", "labels:bools", "duplicates", "empty", "pairs",
               "quotes", "task:csv", "task:jsonl", "no-split-column", "line_breaks"}
    wanted |= {f"corpus-{t}" for t in ("crlf", "bom", "tabs", "controls")} | {"task-bom", "task-crlf"}
    assert wanted <= covers, sorted(wanted - covers)


def test_characters_and_layouts_are_what_the_names_say():
    cases = {c.name: c for c in g.catalogue(0)}
    corpus = cases["accents-bom-bpe-min-csv-quotes"].files["corpus/corpus.txt"]
    assert corpus.startswith(b"\xef\xbb\xbf") and "\u0301".encode() in corpus  # a BOM and a combining accent
    crlf = cases["cyrillic-crlf-wordpiece-min-jsonl-ints"].files["corpus/corpus.txt"]
    assert b"\r\n\r\n" in crlf and b"\n\n" not in crlf.replace(b"\r\n", b"")
    assert any(0x4E00 <= ord(ch) < 0x9FFF for ch in cases["cjk-unigram-2000-csv"].files["corpus/corpus.txt"].decode())
    assert " " not in cases["cjk-unigram-2000-csv"].files["corpus/corpus.txt"].decode()  # CJK: no spaces
    assert "🚀".encode() in cases["emoji-bpe-huge-majority95"].files["corpus/corpus.txt"]
    tabs = cases["tabs-controls-bpe"].files["corpus/corpus.txt"].decode()
    assert "\t" in tabs and any(ch in tabs for ch in g.CONTROLS) and "\x00" not in tabs
    assert set(cases["mixed-dir-wordpiece-huge-50-classes"].files) >= {"corpus/a.txt", "corpus/sub/b.jsonl"}


def test_document_lengths_span_one_word_to_ten_thousand():
    one = g.corpus_docs(g.CorpusSpec(lengths="one-word"), g.random.Random(0))
    assert all(len(d.split()) == 1 for d in one)
    varied = g.corpus_docs(g.CorpusSpec(lengths="varied"), g.random.Random(0))
    assert max(len(d.split()) for d in varied) == 10_000 and min(len(d.split()) for d in varied) == 1
    assert sum(len(d.split()) for d in g.corpus_docs(g.CorpusSpec(lengths="tiny"), g.random.Random(0))) < 32


def test_vocabulary_sizes_follow_the_config_validation():
    assert g.vocab_size("bpe", 20, "min") == min_vocab_size("bpe", 20)
    assert g.vocab_size("unigram", 0, "min") == min_vocab_size("unigram", 0)
    assert g.vocab_size("wordpiece", 20, "huge") == g.HUGE_VOCAB


def test_tasks_have_their_shape():
    rng = g.random.Random
    rows = g.task_rows(g.TaskSpec(classes=2, majority=0.95, rows=400), rng(0))
    counts = sorted(sum(r["label"] == lab for r in rows) for lab in {r["label"] for r in rows})
    assert len(counts) == 2 and counts[1] / len(rows) > 0.9
    rows = g.task_rows(g.TaskSpec(classes=50, rows=400), rng(0))
    train = {r["label"] for r in rows if r["split"] == "train"}
    assert len(train) == 50 and {r["label"] for r in rows} == train  # every val / test label is in train
    rows = g.task_rows(g.TaskSpec(duplicates=True, empty=True, pairs=True), rng(0))
    texts = [r["text"] for r in rows]
    assert "" in texts and len(set(texts)) < len(texts) and all("pair" in r for r in rows)
    files, path, _ = g.task_files(g.TaskSpec(quotes=True), rng(1))
    parsed = list(csv.DictReader(io.StringIO(files[path].decode(), newline="")))
    assert len(parsed) == 120 and any("\n" in r[next(iter(r))] and '"' in r[next(iter(r))] for r in parsed)
    files, path, _ = g.task_files(g.TaskSpec(fmt="jsonl", labels="ints"), rng(0))
    labels = {json.loads(line)[k] for line in files[path].decode().splitlines() if line
              for k in ("label", "topic", "stars") if k in json.loads(line)}
    assert labels == {-1, 0, 1}
