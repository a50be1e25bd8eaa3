"""Readers for the data bundled under ``datamodules/data/`` (built by ``scripts/build_wordnet.py``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
WORDNET_CORPUS = DATA_DIR / "wordnet-corpus.jsonl.gz"
WORDNET_TASK = DATA_DIR / "wordnet-supersense.jsonl.gz"
WORDNET_REVERSE_DICTIONARY = DATA_DIR / "wordnet-reverse-dictionary.jsonl.gz"  # zero-shot cloze (famlab eval)
WORDNET_MINIMAL_PAIRS = DATA_DIR / "wordnet-minimal-pairs.jsonl.gz"  # zero-shot minimal pairs (famlab eval)


def read_jsonl_gz(path: Path) -> list[dict]:
    """All rows of a gzip-compressed JSONL file."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
