"""The bundled suite tasks (wordnet-pairs, wordnet-domain): splits follow supersense, no leakage, real relations."""

from __future__ import annotations

import collections
import re
import shutil

import pytest
from famlab.datamodules.bundled import (
    DATA_DIR,
    WORDNET_CORPUS,
    WORDNET_DOMAIN,
    WORDNET_PAIRS,
    WORDNET_TASK,
    read_jsonl_gz,
)
from famlab.datamodules.tasks import load_task

from tests.datamodules.test_dm_wordnet_data import WORDNET_DIR, build_module

needs_wordnet = pytest.mark.skipif(not WORDNET_DIR.exists(), reason="wordnet-base not installed")


@pytest.fixture(scope="module")
def split_of() -> dict[str, str]:
    return {r["id"]: r["split"] for r in read_jsonl_gz(WORDNET_TASK)}


@pytest.fixture(scope="module")
def pairs() -> list[dict]:
    return read_jsonl_gz(WORDNET_PAIRS)


def test_pair_synsets_keep_their_supersense_split_and_stay_out_of_the_corpus(pairs, split_of):
    """Both synsets of a pair have the pair's split (the supersense one), so no synset crosses splits, and no
    val/test pair synset is a pretraining document."""
    corpus = {r["id"] for r in read_jsonl_gz(WORDNET_CORPUS)}
    splits_of_synset = collections.defaultdict(set)
    for r in pairs:
        assert split_of[r["a"]] == split_of[r["b"]] == r["split"], r
        splits_of_synset[r["a"]].add(r["split"])
        splits_of_synset[r["b"]].add(r["split"])
        if r["split"] != "train":
            assert r["a"] not in corpus and r["b"] not in corpus
    assert all(len(s) == 1 for s in splits_of_synset.values())
    counts = collections.Counter(r["split"] for r in pairs)
    assert counts["val"] > 1000 and counts["test"] > 1000 and counts["train"] == 36_000


def test_every_anchor_appears_once_in_each_class(pairs):
    """Three rows per anchor (hypernym, sibling, unrelated): the first text alone says nothing about the label."""
    by_anchor = collections.defaultdict(list)
    for r in pairs:
        by_anchor[(r["split"], r["a"])].append(r["label"])
    assert all(sorted(labels) == ["hypernym", "sibling", "unrelated"] for labels in by_anchor.values())


@needs_wordnet
def test_pair_labels_match_the_wordnet_relations(pairs):
    """hypernym: b is a direct hypernym of a; sibling: a and b share one; unrelated: no hypernym in common
    within two levels."""
    build = build_module()
    pointers = build.read_pointers(WORDNET_DIR)
    parents = {s: {t for sym, t in p if sym == "@"} for s, p in pointers.items()}
    for r in pairs[:: 7]:
        a, b = r["a"], r["b"]
        if r["label"] == "hypernym":
            assert b in parents[a]
        elif r["label"] == "sibling":
            assert parents[a] & parents[b] and b not in parents[a] and a not in parents[b]
        else:
            assert not build._up(a, parents, 2) & build._up(b, parents, 2)


def test_domain_task_follows_supersense_splits_and_hides_the_domain_name(split_of):
    rows = read_jsonl_gz(WORDNET_DOMAIN)
    assert all(split_of[r["id"]] == r["split"] for r in rows)
    labels = collections.Counter(r["label"] for r in rows)
    assert len(labels) == 14 and min(labels.values()) >= 90
    for r in rows:  # the domain's own name (e.g. "law" in "(law) a ...") is masked like the synset's lemmas
        assert not re.search(rf"(?<!\w){re.escape(r['label'].replace('_', ' '))}(?!\w)", r["text"], re.I), r


def test_bundled_tasks_load_by_name():
    """data.task=wordnet-pairs gives sentence pairs with 3 balanced classes; wordnet-domain single texts."""
    task = load_task("wordnet-pairs")
    assert task.labels == ["hypernym", "sibling", "unrelated"]
    assert all(e.text_pair for e in task.test) and len(task.test) % 3 == 0
    assert collections.Counter(e.label for e in task.test) == {0: len(task.test) // 3, 1: len(task.test) // 3,
                                                                2: len(task.test) // 3}
    domain = load_task("wordnet-domain")
    assert domain.num_classes == 14 and all(e.text_pair is None for e in domain.train)


@pytest.mark.slow
@needs_wordnet
def test_suite_tasks_build_byte_reproducibly(tmp_path):
    """Rebuilding the suite tasks from wordnet-base gives the committed files byte for byte."""
    shutil.copy(WORDNET_TASK, tmp_path / WORDNET_TASK.name)
    stats = build_module().build_suite_tasks(WORDNET_DIR, tmp_path, seed=0)
    assert stats["domain_classes"] == 14
    for name in ("wordnet-pairs.jsonl.gz", "wordnet-domain.jsonl.gz"):
        assert (tmp_path / name).read_bytes() == (DATA_DIR / name).read_bytes(), name
