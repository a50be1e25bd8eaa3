"""Pretraining corpora: the bundled WordNet corpus, text / JSONL files and directories, HF datasets."""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from famlab.datamodules.bundled import WORDNET_CORPUS, read_jsonl_gz
from famlab.datamodules.errors import DataError
from famlab.datamodules.hf import load_hf

log = logging.getLogger(__name__)
CORPUS_SUFFIXES = (".txt", ".jsonl")


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
            recursively, in sorted path order); or ``hf:<name>[:<config>]`` (Hugging Face
            ``datasets``, its ``text`` column; ``hf:text:<file>`` / ``hf:json:<file>`` load local files).
        val_fraction: fraction of documents held out for validation (at least one document when
            positive). An HF dataset with a ``validation`` split uses that split instead.
        seed: seeds which documents are held out.

    Returns:
        The ``Corpus``.

    Raises:
        DataError: missing file, unsupported file type, empty corpus, a ``.jsonl`` line that is not
            JSON or has no ``text``, a file with no UTF-8 text (naming the line and byte offset of its first bad
            byte). Undecodable lines of a file that has UTF-8 text are skipped with a warning naming the first.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise DataError(f"val_fraction={val_fraction} must be in [0, 1)")
    spec = str(spec)
    val: list[str] | None = None
    if spec == "wordnet":
        docs = [row["text"] for row in read_jsonl_gz(WORDNET_CORPUS)]
    elif spec.startswith("hf:"):
        docs, val = _read_hf(spec)
    else:
        docs = _read_path(Path(spec))
    if not docs:
        raise DataError(f"{spec}: empty corpus (no documents)")
    if val is None:
        train, val = _hold_out(docs, val_fraction, seed)
    else:
        train = docs
    return Corpus(train=train, val=val, name=spec, hash=_hash_docs(train, val))


def _hold_out(docs: list[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    n_val = 0 if val_fraction == 0 or len(docs) < 2 else max(1, round(len(docs) * val_fraction))
    is_val = np.zeros(len(docs), dtype=bool)
    is_val[np.random.default_rng(seed).permutation(len(docs))[:n_val]] = True
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


def _read_path(path: Path) -> list[str]:
    if not path.exists():
        raise DataError(f"{path}: no such corpus file or directory")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in CORPUS_SUFFIXES)
        if not files:
            raise DataError(f"{path}: directory has no {' or '.join(CORPUS_SUFFIXES)} files")
        return [doc for f in files for doc in _read_file(f)]
    return _read_file(path)


def _read_file(path: Path) -> list[str]:
    if path.suffix not in CORPUS_SUFFIXES:
        raise DataError(f"{path}: unsupported corpus file type '{path.suffix}' (use .txt, .jsonl or a directory)")
    lines = _decode_lines(path)
    return _parse_jsonl(path, lines) if path.suffix == ".jsonl" else _parse_txt(lines)


def _decode_lines(path: Path) -> list[tuple[int, str]]:
    """(1-based line number, text) of every UTF-8 line; undecodable / binary lines are skipped with a warning
    naming the first bad byte, and a file with no UTF-8 text at all fails naming it."""
    data = path.read_bytes()
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0  # a UTF-8 byte-order mark is dropped
    raw = data[bom:].split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    lines, bad, first, offset = [], 0, "", bom
    for number, chunk in enumerate(raw, 1):
        problem = _line_problem(chunk, number, offset)
        offset += len(chunk) + 1
        if problem:
            bad += 1
            first = first or problem
            continue
        lines.append((number, chunk.decode("utf-8").rstrip("\r")))
    if bad:
        utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))  # Windows' "Unicode": a byte-order mark
        hint = "; a UTF-16 byte-order mark: save the file as UTF-8" if utf16 else ""
        if not any(text.strip() for _, text in lines):
            raise DataError(f"{path}: no UTF-8 text ({bad} of {len(raw)} lines undecodable, the first {first}"
                            f"{hint or '; binary file?'})")
        message = f"{path}: skipped {bad} of {len(raw)} lines that are not UTF-8 text (the first {first}{hint})"
        log.warning(message)
        warnings.warn(message, stacklevel=4)
    return lines


def _line_problem(chunk: bytes, number: int, offset: int) -> str:
    """Where and what the first bad byte of a line is ("" for a good line); ``offset`` is the line's byte offset
    in the file, so the message points at the byte itself (as ``cmp`` / a hex editor count, from 0)."""
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"at line {number}, byte offset {offset + e.start}: 0x{chunk[e.start]:02x}"
    if "\x00" in text:  # NUL bytes: a binary file that happens to decode
        return f"at line {number}, byte offset {offset + chunk.index(0)}: NUL"
    return ""


def _parse_txt(lines: list[tuple[int, str]]) -> list[str]:
    if not any(not text.strip() for _, text in lines):
        return [text.strip() for _, text in lines]  # no blank line: one document per line
    docs, current = [], []
    for _, text in lines:
        if text.strip():
            current.append(text.strip())
        elif current:
            docs.append("\n".join(current))
            current = []
    if current:
        docs.append("\n".join(current))
    return docs


def _parse_jsonl(path: Path, lines: list[tuple[int, str]]) -> list[str]:
    docs = []
    for number, text in lines:
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{path} line {number}: not JSON ({e.msg})") from e
        if not isinstance(row, dict) or "text" not in row:
            keys = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise DataError(f"{path} line {number}: no 'text' field (found {keys})")
        if not isinstance(row["text"], str):
            raise DataError(f"{path} line {number}: 'text' is {type(row['text']).__name__}, not a string")
        if row["text"].strip():
            docs.append(row["text"].strip())
    return docs


def _read_hf(spec: str) -> tuple[list[str], list[str] | None]:
    ds = load_hf(spec)
    if "train" not in ds:
        raise DataError(f"{spec}: no 'train' split (splits: {sorted(ds)})")
    columns = ds["train"].column_names
    if "text" not in columns:
        raise DataError(f"{spec}: no 'text' column (columns: {columns})")

    def texts(split: str) -> list[str]:
        # The HF text loader keeps empty lines: drop them.
        return [t.strip() for t in ds[split]["text"] if isinstance(t, str) and t.strip()]

    val = texts("validation") if "validation" in ds else []
    return texts("train"), (val or None)  # no (or an empty) validation split: hold one out
