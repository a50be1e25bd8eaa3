"""Pretraining corpora as lists in memory: the bundled WordNet corpus, text / JSONL files and directories, HF datasets.

The documents come from the streaming readers of :mod:`famlab.datamodules.sources` (the same boundaries as a
prepared dataset, :mod:`famlab.datamodules.prepare`); a large corpus should be prepared instead of loaded.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from famlab.datamodules.errors import DataError
from famlab.datamodules.prepare import is_prepared_dir, open_prepared
from famlab.datamodules.sources import CORPUS_SUFFIXES, ReadStats, hf_splits, hf_texts, hold_out, path_documents

__all__ = ["CORPUS_SUFFIXES", "Corpus", "load_corpus"]


@dataclass
class Corpus:
    """Documents split into training and validation.

    Attributes:
        train: training documents.
        val: validation documents (held out of the training split).
        name: the spec it was loaded from.
        hash: sha256 of the documents (train, then val), so a changed split changes the hash.
    """

    train: list[str]
    val: list[str]
    name: str
    hash: str


def load_corpus(spec: str | Path, *, val_fraction: float = 0.05, seed: int = 0) -> Corpus:
    """Load a pretraining corpus and hold out a validation split.

    Args:
        spec: ``wordnet`` (bundled: one document per synset, excluding the synsets of the
            ``wordnet-supersense`` validation/test splits); a ``.txt`` file, whose documents are
            separated by blank lines, or, when the file has no blank line at all, one document per
            line; a ``.jsonl`` file with a ``text`` field per line; a directory of such files (read
            recursively, in sorted path order); ``.gz`` / ``.zst`` compressed ones and ``.parquet`` files (a ``text``
            column); or ``hf:<name>[:<config>]`` (Hugging Face ``datasets``, streamed, its ``text`` column;
            ``hf:text:<file>`` / ``hf:json:<file>`` load local files). A prepared dataset's directory
            (:func:`famlab.datamodules.prepare.prepare_corpus`) returns that ``PreparedDataset`` instead, which has
            the ``name``, ``hash`` and (lazy) ``val`` of a ``Corpus``. Documents longer than
            ``sources.MAX_DOC_BYTES`` are cut into pieces.
        val_fraction: fraction of documents held out for validation (at least one document when
            positive). An HF dataset with a ``validation`` split uses that split instead.
        seed: seeds which documents are held out.

    Returns:
        The ``Corpus`` (a ``PreparedDataset`` for a prepared directory).

    Raises:
        DataError: missing file, unsupported file type, empty corpus, a ``.jsonl`` line that is not
            JSON or has no ``text``, a file with no UTF-8 text (naming the line and byte offset of its first bad
            byte). Undecodable lines of a file that has UTF-8 text are skipped with a warning naming the first.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise DataError(f"val_fraction={val_fraction} must be in [0, 1)")
    spec = str(spec)
    val: list[str] | None = None
    if is_prepared_dir(spec):
        return open_prepared(spec)  # type: ignore[return-value]  # duck-types Corpus: name, hash, val (lazy)
    if spec.startswith("hf:"):
        docs, val = _read_hf(spec)
    else:
        docs = list(path_documents(spec, ReadStats()))
    if not docs:
        raise DataError(f"{spec}: empty corpus (no documents)")
    if val is None:
        train, val = _hold_out(docs, val_fraction, seed)
    else:
        train = docs
    return Corpus(train=train, val=val, name=spec, hash=_hash_docs(train, val))


def _hold_out(docs: list[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    is_val = hold_out(len(docs), val_fraction, seed)
    # Both splits keep the file order; only membership is random.
    train = [d for d, v in zip(docs, is_val, strict=True) if not v]
    return train, [d for d, v in zip(docs, is_val, strict=True) if v]


def _hash_docs(train: list[str], val: list[str]) -> str:
    h = hashlib.sha256()
    for split in (train, val):
        h.update(f"{len(split)}\0".encode())
        for doc in split:
            h.update(doc.encode("utf-8"))
            h.update(b"\0")
    return h.hexdigest()


def _read_hf(spec: str) -> tuple[list[str], list[str] | None]:
    train, validation = hf_splits(spec)
    stats = ReadStats()
    val = list(hf_texts(validation, stats)) if validation is not None else []
    return list(hf_texts(train, stats)), (val or None)  # no (or an empty) validation split: hold one out
