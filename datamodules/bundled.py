"""Readers for the data bundled under ``datamodules/data/`` (built by ``scripts/build_wordnet.py``)."""

from __future__ import annotations

from pathlib import Path

from famlab.datamodules.jsonl import JsonRecord, read_jsonl

DATA_DIR = Path(__file__).resolve().parent / "data"
WORDNET_CORPUS = DATA_DIR / "wordnet-corpus.jsonl.gz"
WORDNET_TASK = DATA_DIR / "wordnet-supersense.jsonl.gz"
WORDNET_REVERSE_DICTIONARY = DATA_DIR / "wordnet-reverse-dictionary.jsonl.gz"  # zero-shot cloze (famlab eval)
WORDNET_MINIMAL_PAIRS = DATA_DIR / "wordnet-minimal-pairs.jsonl.gz"  # zero-shot minimal pairs (famlab eval)
WORDNET_PAIRS = DATA_DIR / "wordnet-pairs.jsonl.gz"
WORDNET_DOMAIN = DATA_DIR / "wordnet-domain.jsonl.gz"
# name -> file of every bundled classification task; ``data.task=<name>`` loads it (datamodules/data/README.md)
BUNDLED_TASKS = {"wordnet-supersense": WORDNET_TASK, "wordnet-pairs": WORDNET_PAIRS, "wordnet-domain": WORDNET_DOMAIN}

# A bundled row: (split, text, text_pair or None, label)
BundledRow = tuple[str, str, str | None, str]


def read_jsonl_gz(path: Path) -> list[JsonRecord]:
    """All rows of a gzip-compressed JSONL file (:func:`~famlab.datamodules.jsonl.read_jsonl`)."""
    return [row for _, row in read_jsonl(path)]


def read_bundled_task(name: str) -> list[BundledRow]:
    """The rows of the bundled task ``name`` (a key of :data:`BUNDLED_TASKS`).

    ``wordnet-pairs`` stores synset ids (``a``, ``b``); their texts are the definitions of the supersense
    task, so the two files cannot disagree and the pair file stays small.
    """
    rows = read_jsonl_gz(BUNDLED_TASKS[name])
    if name != "wordnet-pairs":
        return [(r["split"], r["text"], None, r["label"]) for r in rows]
    text = {r["id"]: r["text"] for r in read_jsonl_gz(WORDNET_TASK)}
    return [(r["split"], text[r["a"]], text[r["b"]], r["label"]) for r in rows]
