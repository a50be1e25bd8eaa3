"""The one JSON Lines reader: ``(line number, record)`` for every non-blank line, one error for a bad line.

Used by the corpus reader (``datamodules/sources.py``), the bundled data (``datamodules/bundled.py``), task files
(``datamodules/tasks.py``) and ``famlab eval``'s item files (``experiments/steps/evaluate.py``). Each caller
chooses how lines are read (a streamed corpus skips undecodable lines, a task file must be UTF-8 throughout) and
hands the numbered lines to :func:`parse_jsonl`; :func:`read_jsonl` reads a whole (optionally ``.gz``) file.
A line that is not a JSON object raises :class:`JsonlError`, which names the file and the line.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from famlab.datamodules.errors import DataError

# A JSON object as read: its values are whatever JSON holds, so each caller checks the fields it uses.
JsonRecord = dict[str, Any]


class JsonlError(DataError):
    """A line of a JSON Lines file that cannot be read as a JSON object: ``{path} line {line}: {problem}``."""

    def __init__(self, path: Path | str, line: int, problem: str) -> None:
        super().__init__(f"{path} line {line}: {problem}")
        self.path, self.line, self.problem = path, line, problem

    def __reduce__(self) -> tuple[type[JsonlError], tuple[Path | str, int, str]]:
        return type(self), (self.path, self.line, self.problem)  # picklable across worker processes


def parse_jsonl(path: Path | str, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, JsonRecord]]:
    """``(line number, record)`` of every non-blank ``(line number, text)`` of ``lines`` read from ``path``.

    Raises:
        JsonlError: a line that is not JSON, or JSON that is not an object.
    """
    for number, line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise JsonlError(path, number, f"not JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise JsonlError(path, number, f"expected a JSON object, got {type(row).__name__}")
        yield number, row


def decode_lines(path: Path | str, f: Iterable[bytes]) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of the byte lines of ``f`` (split at ``\\n`` only, as JSON Lines are; a leading
    UTF-8 byte-order mark dropped).

    Raises:
        JsonlError: a line that is not UTF-8.
    """
    for number, raw in enumerate(f, 1):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise JsonlError(path, number, f"not UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start} of the line: "
                                           f"{e.reason}); save the file as UTF-8") from None
        yield number, text


def read_jsonl(path: Path) -> Iterator[tuple[int, JsonRecord]]:
    """``(line number, record)`` of every non-blank line of a JSON Lines file, gzip-compressed when it ends in
    ``.gz``; read one line at a time.

    Raises:
        JsonlError: a line that is not UTF-8, not JSON, or not a JSON object.
        OSError: the file cannot be opened or read.
    """
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
        yield from parse_jsonl(path, decode_lines(path, f))
