"""The bundled WordNet corpus, supersense task and zero-shot tasks: splits, leakage, lemma masking, reproducible
build."""

from __future__ import annotations

import collections
import importlib.util
import re
from pathlib import Path

import pytest
from famlab.datamodules.bundled import (
    DATA_DIR,
    WORDNET_CORPUS,
    WORDNET_MINIMAL_PAIRS,
    WORDNET_REVERSE_DICTIONARY,
    WORDNET_TASK,
    read_jsonl_gz,
)
from famlab.objectives.zeroshot import Item, length_only

ROOT = Path(__file__).resolve().parents[2]
WORDNET_DIR = Path("/usr/share/wordnet")


def build_module():
    spec = importlib.util.spec_from_file_location("build_wordnet", ROOT / "scripts" / "build_wordnet.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def task_rows() -> list[dict]:
    return read_jsonl_gz(WORDNET_TASK)


def test_bundled_files_are_small_and_licensed():
    """The committed files stay a few MB and ship the WordNet 3.0 licence."""
    sizes = {p.name: p.stat().st_size for p in DATA_DIR.iterdir()}
    print("bundled data sizes (bytes):", sizes)
    assert sum(sizes.values()) < 8_000_000
    licence = (DATA_DIR / "LICENSE-WordNet.txt").read_text()
    assert "WordNet 3.0 Copyright 2006 by Princeton University" in licence


def test_task_has_45_supersenses_split_80_10_10_per_label(task_rows):
    """Every one of the 45 lexicographer files is a class, and each is split about 80/10/10."""
    build = build_module()
    labels = collections.Counter(r["label"] for r in task_rows)
    assert set(labels) == set(build.LEXNAMES) and len(labels) == 45
    per_label = collections.defaultdict(collections.Counter)
    for r in task_rows:
        per_label[r["label"]][r["split"]] += 1
    for label, counts in per_label.items():
        total = sum(counts.values())
        for split, expected in (("val", 0.1), ("test", 0.1)):
            # Groups of identical definitions make the cut slightly coarse; allow a few synsets.
            assert abs(counts[split] - expected * total) <= 0.02 * total + 3, (label, counts)
    totals = collections.Counter(r["split"] for r in task_rows)
    print("task split sizes:", dict(totals))
    assert abs(totals["test"] / len(task_rows) - 0.1) < 0.005


def test_identical_definitions_share_one_split(task_rows):
    """No definition text appears in two splits."""
    splits = collections.defaultdict(set)
    for r in task_rows:
        splits[r["text"]].add(r["split"])
    counts = collections.Counter(r["text"] for r in task_rows)
    assert sum(c > 1 for c in counts.values()) > 100  # duplicates exist, so the property is not vacuous
    assert all(len(s) == 1 for s in splits.values())


def test_val_and_test_synsets_are_not_in_the_corpus(task_rows):
    """Corpus documents are exactly the synsets whose task split is train (or that have no task row)."""
    corpus_ids = {r["id"] for r in read_jsonl_gz(WORDNET_CORPUS)}
    held_out = {r["id"] for r in task_rows if r["split"] != "train"}
    train = {r["id"] for r in task_rows if r["split"] == "train"}
    assert corpus_ids.isdisjoint(held_out)
    assert train <= corpus_ids


def test_definitions_hide_lemmas_and_examples():
    """Parsing a real wndb line: lemmas masked as whole words, quoted examples dropped, adj markers removed."""
    build = build_module()
    line = ("00001740 29 v 04 breathe 0 take_a_breath 0 respire 0 suspire 3 021 * 00005041 v 0000 | draw air into, "
            'and expel out of, the lungs; "I can breathe better when the air is clean"; "The patient is respiring"  ')
    s = build.parse_data_line(line)
    assert s["label"] == "verb.body" and s["lemmas"] == ["breathe", "take a breath", "respire", "suspire"]
    definition, examples = build.split_gloss(s["gloss"])
    assert definition == "draw air into, and expel out of, the lungs"
    assert examples == ['"I can breathe better when the air is clean"', '"The patient is respiring"']
    assert build.mask_lemmas("to Take a breath; breathed, not breathe", s["lemmas"]) == "to _; breathed, not _"
    adj = build.parse_data_line("00001740 00 a 01 able(a) 0 000 | (usually followed by `to') having ability")
    assert adj["lemmas"] == ["able"] and adj["label"] == "adj.all"


def test_no_task_text_contains_its_own_lemma(task_rows):
    """Spot check against the source: single-word lemmas never survive in their synset's definition."""
    if not WORDNET_DIR.exists():
        pytest.skip("wordnet-base not installed")
    build = build_module()
    synsets = {}
    with open(WORDNET_DIR / "data.verb", encoding="utf-8") as f:
        for line in f:
            if not line.startswith("  "):
                s = build.parse_data_line(line.rstrip("\n"))
                synsets[s["id"]] = s
    checked = 0
    for r in task_rows:
        s = synsets.get(r["id"])
        if s is None:
            continue
        for lemma in s["lemmas"]:
            assert not re.search(rf"(?<!\w){re.escape(lemma)}(?!\w)", r["text"], re.IGNORECASE), (lemma, r)
        checked += 1
    assert checked > 10_000


@pytest.mark.slow
def test_build_is_byte_reproducible(tmp_path):
    """Rebuilding from wordnet-base gives the committed files byte for byte."""
    if not WORDNET_DIR.exists():
        pytest.skip("wordnet-base not installed")
    build = build_module()
    stats = build.build(WORDNET_DIR, tmp_path, Path("/usr/share/doc/wordnet-base/copyright"), seed=0)
    assert stats["synsets"] == 117659
    zeroshot = build.build_zeroshot(WORDNET_DIR, tmp_path, seed=0)
    assert zeroshot["reverse_dictionary"] == 1000 and set(zeroshot["minimal_pairs"].values()) == {400}
    for name in ("wordnet-supersense.jsonl.gz", "wordnet-corpus.jsonl.gz", "LICENSE-WordNet.txt",
                 "wordnet-reverse-dictionary.jsonl.gz", "wordnet-minimal-pairs.jsonl.gz"):
        assert (tmp_path / name).read_bytes() == (DATA_DIR / name).read_bytes(), name


def _inflections(word: str) -> set[str]:
    """The -s forms the minimal-pair rules pair ``word`` with (plural noun or 3rd-person-singular verb)."""
    irregular = {"are": "is", "have": "has", "do": "does", "were": "was"}
    return {irregular.get(word, ""), word + "s", word + "es", word[:-1] + "ies"} - {""}


def test_minimal_pairs_are_not_solvable_by_length_or_by_the_s_form():
    """Per construction the right filler is the strictly shorter one, and the one ending in -s, in 35-65 % of the
    items (order swaps are of equal length), and the two fillers differ only in the construction's way."""
    items = read_jsonl_gz(WORDNET_MINIMAL_PAIRS)
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for item in items:
        groups[item["group"]].append(item)
    assert {g: len(v) for g, v in groups.items()} == {"subject_verb_agreement": 400,
                                                       "determiner_noun_agreement": 400, "determiner_noun_order": 400}
    for group, rows in sorted(groups.items()):
        rights = [r["choices"][r["label"]] for r in rows]
        wrongs = [r["choices"][1 - r["label"]] for r in rows]
        length_acc = sum(length_only([Item(r["text"], tuple(r["choices"]), r["label"]) for r in rows])) / len(rows)
        print(f"{group}: length-only accuracy {length_acc:.3f}")
        if group == "determiner_noun_order":
            for right, wrong in zip(rights, wrongs, strict=True):
                assert wrong == " ".join(reversed(right.split())) and len(right.split()) == 2, (right, wrong)
            assert length_acc == 0.0  # equal lengths: a tie, which counts as wrong
            continue
        assert 0.35 <= length_acc <= 0.65, group
        assert 0.35 <= sum(g.endswith("s") for g in rights) / len(rows) <= 0.65, group
        for r, right, wrong in zip(rows, rights, wrongs, strict=True):
            assert wrong in _inflections(right) or right in _inflections(wrong), r
            if group == "determiner_noun_agreement":
                before = re.findall(r"[a-z]+", r["text"].split("___")[0].lower())[-1]
                assert (before in ("a", "an")) == (len(right) < len(wrong)), r


def test_zero_shot_items_are_not_in_the_corpus():
    """No reverse-dictionary answer shares a corpus document with its definition, and no minimal pair's
    grammatical text occurs in the corpus (every document holding a text holds its rarest word, so looking in
    those documents is complete)."""
    docs = [r["text"].lower() for r in read_jsonl_gz(WORDNET_CORPUS)]
    docs_of: dict[str, set[int]] = collections.defaultdict(set)
    for n, doc in enumerate(docs):
        for word in set(re.findall(r"[a-z]+", doc)):
            docs_of[word].add(n)

    def holding(text: str) -> list[str]:
        words = set(re.findall(r"[a-z]+", text.lower()))
        rarest = min(words, key=lambda w: len(docs_of.get(w, ())))
        return [docs[n] for n in sorted(docs_of.get(rarest, ())) if text.lower() in docs[n]]

    cloze = read_jsonl_gz(WORDNET_REVERSE_DICTIONARY)
    for item in cloze:
        answer, definition = item["choices"][item["label"]].lower(), item["text"].removeprefix("___: ")
        with_answer = [d for d in holding(definition) if re.search(rf"(?<![a-z]){re.escape(answer)}(?![a-z])", d)]
        assert not with_answer, (item, with_answer[:1])
    pairs = read_jsonl_gz(WORDNET_MINIMAL_PAIRS)
    for item in pairs:
        assert not holding(item["text"].replace("___", item["choices"][item["label"]])), item
    # Not vacuous: the same lookup finds the corpus's own text.
    assert holding(docs[123].split(": ", 1)[1][:40])
