"""Classification tasks: bundled WordNet tasks, CSV / JSONL files, Hugging Face datasets."""

from __future__ import annotations

import collections
import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from famlab.datamodules.bundled import BUNDLED_TASKS, read_bundled_task
from famlab.datamodules.errors import DataError
from famlab.datamodules.hf import load_hf
from famlab.datamodules.jsonl import JsonRecord, parse_jsonl

SPLIT_NAMES = {"train": "train", "val": "val", "validation": "val", "dev": "val", "test": "test"}
# GLUE column conventions, tried in order when the configured text column is absent.
GLUE_COLUMNS = [("sentence", None), ("sentence1", "sentence2"), ("question1", "question2"),
                ("premise", "hypothesis"), ("question", "sentence")]  # fmt: skip


@dataclass
class Example:
    """One labelled example; ``label`` indexes ``Task.labels``."""

    text: str
    text_pair: str | None
    label: int


@dataclass
class Task:
    """A classification task split three ways.

    Attributes:
        train, val, test: the examples.
        labels: label names; the label set comes from the training split.
        name: the spec it was loaded from.
    """

    train: list[Example]
    val: list[Example]
    test: list[Example]
    labels: list[str]
    name: str

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    def majority_accuracy(self, split: str = "test") -> float:
        """Accuracy on ``split`` of always predicting the most common training label."""
        majority = collections.Counter(e.label for e in self.train).most_common(1)[0][0]
        examples = getattr(self, split)
        return sum(e.label == majority for e in examples) / max(len(examples), 1)


# A raw row before label mapping: (split or None, text, text_pair, raw label, where-for-messages).
_Row = tuple[str | None, str, str | None, object, str]


def load_task(
    spec: str | Path,
    *,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    split_column: str = "split",
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    seed: int = 0,
) -> Task:
    """Load a classification task.

    Args:
        spec: a bundled task (``wordnet-supersense``, ``wordnet-pairs``, ``wordnet-domain``; fixed splits,
            see ``datamodules/data/README.md``); a ``.csv`` or
            ``.jsonl`` file; or ``hf:<name>[:<config>]`` (GLUE column names are recognised when
            ``text_column`` is absent; rows labelled -1 are dropped; ``hf:csv:<file>`` /
            ``hf:json:<file>`` load local files).
        text_column, text_pair_column, label_column: column names (labels may be strings or ints).
        split_column: optional column with ``train`` / ``val`` / ``validation`` / ``test``. Files
            without it are split deterministically (seeded) by ``val_fraction`` / ``test_fraction``;
            a split missing from the file (e.g. GLUE's unlabelled test) is carved from the training rows.
        seed: seeds that split.

    Raises:
        DataError: missing file or column, empty file, bad JSON line, unknown split value, labels in
            validation/test that the training split lacks, a single class.
    """
    spec = str(spec)
    if spec in BUNDLED_TASKS:
        rows: list[_Row] = [(*row, "") for row in read_bundled_task(spec)]
        return _build(spec, rows, val_fraction, test_fraction, seed)
    if spec.startswith("hf:"):
        rows, names = _hf_rows(spec, text_column, text_pair_column, label_column)
        return _build(spec, rows, val_fraction, test_fraction, seed, label_order=names)
    records = _file_records(spec)
    rows = [_file_row(where, record, text_column, text_pair_column, label_column, split_column)
            for where, record in records]
    return _build(spec, rows, val_fraction, test_fraction, seed)


def _file_records(spec: str) -> list[tuple[str, dict]]:
    """``(where, record)`` of every row of a task file (``.csv`` / ``.jsonl``), ``where`` naming file and line."""
    path = Path(spec)
    if not path.is_file():
        if not path.suffix and len(path.parts) == 1:  # a bare name: a misspelt bundled task, most likely
            raise DataError(f"unknown task '{spec}' (bundled: {', '.join(BUNDLED_TASKS)}; or a .csv/.jsonl file, "
                            "hf:<name>)")
        raise DataError(f"{path}: no such task file")
    if path.suffix == ".csv":
        records = _csv_records(path)
    elif path.suffix == ".jsonl":
        records = _jsonl_records(path)
    else:
        raise DataError(f"{path}: unsupported task file type '{path.suffix}' (use .csv, .jsonl or hf:<name>)")
    if not records:
        raise DataError(f"{path}: empty task file (no rows)")
    return records


def _file_row(where: str, record: dict, text_column: str, text_pair_column: str | None, label_column: str,
              split_column: str) -> _Row:
    """One task-file record as a row, its configured columns checked."""
    _check_columns(where, record, {"text": text_column, "label": label_column, "text pair": text_pair_column})
    label = record[label_column]
    if label is None or (isinstance(label, str) and not label.strip()):
        raise DataError(f"{where}: empty label in column '{label_column}'")
    split = record.get(split_column)
    if split is not None and str(split).strip().lower() not in SPLIT_NAMES:
        raise DataError(f"{where}: split '{split}' is not one of train, val, validation, test")
    pair = None if text_pair_column is None else str(record[text_pair_column])
    split_name = None if split is None else SPLIT_NAMES[str(split).strip().lower()]
    return split_name, str(record[text_column]), pair, label, where


def _read_text(path: Path) -> str:
    """The file as text: UTF-8, a leading byte-order mark dropped (else it would join the first column's name)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}, byte offset {e.start}: "
                        f"{e.reason}); save the file as UTF-8") from None


def _csv_records(path: Path) -> list[tuple[str, dict]]:
    reader = csv.DictReader(io.StringIO(_read_text(path), newline=""))
    try:
        return [(f"{path} line {reader.line_num}", row) for row in reader]
    except csv.Error as e:  # e.g. a field longer than the csv module's limit
        raise DataError(f"{path} line {reader.line_num}: not CSV ({e})") from None


def _jsonl_records(path: Path) -> list[tuple[str, JsonRecord]]:
    # JSON Lines end at "\n" only: str.splitlines would also break at U+2028, U+0085 ... inside a raw UTF-8 string
    lines = enumerate(_read_text(path).split("\n"), 1)
    return [(f"{path} line {number}", row) for number, row in parse_jsonl(path, lines)]


def _check_columns(where: str, record: dict, columns: dict[str, str | None]) -> None:
    """Every configured column is present in a record, with a value (a short CSV row leaves ``None``)."""
    for role, column in columns.items():
        if column is None:
            continue
        if column not in record:
            found = ", ".join(str(c) for c in record if c is not None)  # None: the extra fields of a long CSV row
            raise DataError(f"{where}: no column '{column}' (columns: {found}), the {role} column")
        if record[column] is None and role != "label":  # an absent label is an "empty label" below
            raise DataError(f"{where}: no value in column '{column}' (the {role} column)")


def _hf_rows(
    spec: str, text_column: str, pair_column: str | None, label_column: str
) -> tuple[list[_Row], list[str] | None]:
    """Rows of every train/validation/test split, and the ClassLabel names when the label column has them."""
    ds = load_hf(spec)
    first = ds[next(iter(ds))]
    columns = first.column_names
    if text_column not in columns:
        found = next(((a, b) for a, b in GLUE_COLUMNS if a in columns and (b is None or b in columns)), None)
        if found is None:
            raise DataError(f"{spec}: no column '{text_column}' (columns: {', '.join(columns)})")
        text_column, pair_column = found
    for column in (label_column, pair_column):
        if column is not None and column not in columns:
            raise DataError(f"{spec}: no column '{column}' (columns: {', '.join(columns)})")
    names = getattr(first.features[label_column], "names", None)  # ClassLabel: ints with names
    rows: list[_Row] = []
    for split, data in ds.items():
        split_name = SPLIT_NAMES.get(split)
        if split_name is None:
            continue
        pairs = data[pair_column] if pair_column else [None] * len(data)
        for i, (text, pair, label) in enumerate(zip(data[text_column], pairs, data[label_column], strict=True)):
            if label is None or label == -1:  # GLUE test splits hide their labels as -1
                continue
            label = names[label] if names is not None else label
            rows.append((split_name, str(text), None if pair is None else str(pair), label, f"{spec} {split} row {i}"))
    if not rows:
        raise DataError(f"{spec}: no labelled rows")
    return rows, (list(names) if names is not None else None)


def _label_key(label: object) -> tuple[int, int, str]:
    # Integers (or integer strings) sort numerically, everything else alphabetically after them.
    text = str(label).strip()
    try:
        return (0, int(text), "")
    except ValueError:
        return (1, 0, text)


def _build(
    name: str, rows: list[_Row], val_fraction: float, test_fraction: float, seed: int,
    label_order: list[str] | None = None,
) -> Task:
    if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
        raise DataError(f"val_fraction={val_fraction} and test_fraction={test_fraction} must leave training rows")
    splits = _assign_splits([r[0] for r in rows], val_fraction, test_fraction, seed)
    train_labels = {str(r[3]).strip() for r, s in zip(rows, splits, strict=True) if s == "train"}
    if not train_labels:
        raise DataError(f"{name}: no training rows")
    # A dataset's own label order (HF ClassLabel) is kept, so label i means what the dataset says it means.
    order = {label: i for i, label in enumerate(label_order or [])}
    labels = sorted(train_labels, key=lambda lab: (order.get(lab, len(order)), _label_key(lab)))
    index = {label: i for i, label in enumerate(labels)}
    held_out = {str(r[3]).strip() for r, s in zip(rows, splits, strict=True) if s != "train"}
    unknown = sorted(held_out - train_labels, key=_label_key)
    if unknown:
        raise DataError(f"{name}: labels in validation/test but not in the training split: {', '.join(unknown)}")
    if len(train_labels) < 2:
        raise DataError(f"{name}: only one class ('{labels[0]}') in the training split; a classification "
                        "task needs at least two")
    out: dict[str, list[Example]] = {"train": [], "val": [], "test": []}
    for (_, text, pair, label, _), split in zip(rows, splits, strict=True):
        out[split].append(Example(text=text, text_pair=pair, label=index[str(label).strip()]))
    return Task(train=out["train"], val=out["val"], test=out["test"], labels=labels, name=name)


def _assign_splits(given: list[str | None], val_fraction: float, test_fraction: float, seed: int) -> list[str]:
    """Fill in splits: rows without one go to train; a split with no rows is carved from train (seeded)."""
    splits = [g or "train" for g in given]
    rng = np.random.default_rng(seed)
    for split, fraction in (("val", val_fraction), ("test", test_fraction)):
        if split in splits or fraction == 0:
            continue
        train_idx = np.array([i for i, s in enumerate(splits) if s == "train"])
        n = min(max(1, round(len(given) * fraction)), len(train_idx) - 1)
        for i in rng.permutation(train_idx)[:max(n, 0)]:
            splits[i] = split
    return splits
