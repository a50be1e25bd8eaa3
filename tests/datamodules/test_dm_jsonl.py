"""The one JSON Lines reader (datamodules/jsonl.py) and the four places that read JSON Lines through it."""

from __future__ import annotations

import gzip
import json
import pickle
import re

import pytest
from famlab.datamodules import DataError, load_corpus, load_task
from famlab.datamodules.bundled import read_jsonl_gz
from famlab.datamodules.jsonl import JsonlError, read_jsonl
from famlab.experiments.steps.evaluate import EvalInputError, read_items

ITEM = {"text": "a ___ sat", "choices": ["cat", "dog"], "label": 0}


def test_records_keep_their_line_numbers(tmp_path):
    """Blank lines are skipped but counted; a byte-order mark, CRLF endings and gzip are read as plain JSON Lines."""
    f = tmp_path / "r.jsonl.gz"
    text = '\ufeff{"a": 1}\r\n\r\n  \n{"a": "\u2028x"}\n'
    f.write_bytes(gzip.compress(text.encode("utf-8")))
    assert list(read_jsonl(f)) == [(1, {"a": 1}), (4, {"a": "\u2028x"})]


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"a": 1}\n{"a": oops}\n', "not JSON (Expecting value)"),
        (b'{"a": 1}\n[1, 2]\n', "expected a JSON object, got list"),
        (b'{"a": 1}\n{"a": "\xff"}\n', "not UTF-8 (byte 0xff at byte 7 of the line: invalid start byte)"),
    ],
)
def test_a_bad_line_is_one_error_naming_file_and_line(tmp_path, content, problem):
    f = tmp_path / "r.jsonl"
    f.write_bytes(content)
    with pytest.raises(JsonlError) as err:
        list(read_jsonl(f))
    assert str(err.value).startswith(f"{f} line 2: {problem}"), str(err.value)
    assert isinstance(err.value, DataError) and (err.value.path, err.value.line) == (f, 2)


def test_the_error_survives_pickling(tmp_path):
    """Worker processes hand errors back pickled: the file, line and problem come through."""
    err = JsonlError(tmp_path / "r.jsonl", 3, "not JSON (Expecting value)")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is JsonlError and str(back) == str(err) and (back.path, back.line) == (err.path, 3)


def _corpus(path):
    return load_corpus(str(path))


def _task(path):
    return load_task(path)


def _bundled(path):
    gz = path.with_suffix(".jsonl.gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    return read_jsonl_gz(gz)


@pytest.mark.parametrize("reader", [_corpus, _task, read_items, _bundled])
def test_every_reader_words_a_bad_line_the_same(tmp_path, reader):
    """Corpus, task, eval-item and bundled files all go through the one reader: the same words for the same line."""
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps(ITEM) + "\n{oops\n")
    with pytest.raises((DataError, EvalInputError)) as err:
        reader(f)
    message = str(err.value)
    assert "\n" not in message and "not JSON (Expecting property name enclosed in double quotes)" in message
    assert f"{f.stem}.jsonl line 2: " in message or f"{f.stem}.jsonl.gz line 2: " in message or f"{f}:2: " in message


def test_an_eval_file_that_is_not_utf8_is_an_input_error(tmp_path):
    """famlab eval refuses an item file with a non-UTF-8 line naming file and line (exit 2), not with a traceback."""
    f = tmp_path / "items.jsonl"
    f.write_bytes(json.dumps(ITEM).encode() + b'\n{"text": "\xe9 ___"}\n')
    with pytest.raises(EvalInputError, match=rf"^{re.escape(str(f))}:2: not UTF-8 \(byte 0xe9"):
        read_items(f)
