"""Corpus sources read as a stream of documents, in bounded memory.

One reader for every corpus spec famlab accepts, used by both :func:`famlab.datamodules.corpus.load_corpus` (the
documents as a list) and :mod:`famlab.datamodules.prepare` (the streaming prepare), so the two see the same
documents with the same boundaries:

- ``wordnet``: the bundled corpus, one document per row (``datamodules/bundled.py``);
- a ``.txt`` file: documents separated by blank lines or, when the file has no blank line at all, one document per
  line; each document's lines are stripped and joined with ``\\n``;
- a ``.jsonl`` file: the ``text`` field of each line (stripped; empty texts dropped);
- either of those compressed, ``.txt.gz`` / ``.jsonl.gz`` (gzip) or ``.txt.zst`` / ``.jsonl.zst`` (zstd, with the
  ``zstandard`` package);
- a ``.parquet`` file: its ``text`` column (with ``pyarrow``);
- a directory of such files, read recursively in sorted path order;
- ``hf:<name>[:<config>]``: a Hugging Face dataset, streamed (``datasets.load_dataset(..., streaming=True)``), its
  ``train`` split's ``text`` column, and its ``validation`` split when it has one.

Memory is bounded by the block size and :data:`MAX_DOC_BYTES`, never by a file: files are read in
:data:`READ_BLOCK` blocks, and a document longer than :data:`MAX_DOC_BYTES` (a 1 GB line without a newline, a book
without blank lines) is cut into pieces of at most that many bytes, each piece a document of its own (cut at a UTF-8
character boundary; each piece is stripped like any document). A ``.jsonl`` line longer than
:data:`MAX_JSON_LINE_BYTES` is an error, since JSON cannot be cut.

Undecodable bytes: a line that is not UTF-8 (or holds a NUL byte) is skipped and counted; each file with skipped
lines gets one warning naming how many and the line and byte offset of the first; a file with no UTF-8 text at all
is a :class:`DataError`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import logging
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

import numpy as np
from famlab.datamodules.bundled import WORDNET_CORPUS
from famlab.datamodules.errors import DataError
from famlab.datamodules.hf import load_hf
from famlab.datamodules.jsonl import decode_lines, parse_jsonl

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = logging.getLogger(__name__)

READ_BLOCK = 1 << 20  # bytes read per call: large enough for the C-level split / decode to dominate
MAX_DOC_BYTES = 8 << 20  # longer documents are cut into pieces of this many bytes (bounds memory, see the docstring)
MAX_JSON_LINE_BYTES = 64 << 20  # a JSONL line cannot be cut: longer is an error
CORPUS_SUFFIXES = (".txt", ".jsonl")  # the plain formats (also inside .gz / .zst)
COMPRESSIONS = (".gz", ".zst")
# str.strip()'s whitespace in UTF-8, so a line is found blank without decoding the file (Python's str.isspace set)
_WS = (rb"(?:[\t\x0b\x0c\r\x1c-\x1f ]|\xc2[\x85\xa0]|\xe1\x9a\x80|\xe2\x80[\x80-\x8a\xa8\xa9\xaf]|\xe2\x81\x9f"
       rb"|\xe3\x80\x80)")
_BLANK_LINE = re.compile(rb"(?m)^" + _WS + rb"*$")
_ALL_WS = re.compile(_WS + rb"*")
SAMPLE_BLOCK = 1 << 16  # identity: bytes hashed per sampled block
SAMPLE_BLOCKS = 8  # identity: blocks sampled per file (first and last included)


def corpus_format(path: Path) -> tuple[str, str]:
    """``(format, compression)`` of a corpus file from its name: format ``txt`` / ``jsonl`` / ``parquet``,
    compression ``""`` / ``.gz`` / ``.zst``; ``("", "")`` for an unsupported name."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        return "parquet", ""
    compression = next((c for c in COMPRESSIONS if name.endswith(c)), "")
    stem = name[: len(name) - len(compression)]
    for suffix in CORPUS_SUFFIXES:
        if stem.endswith(suffix):
            return suffix[1:], compression
    return "", ""


def corpus_files(spec: str) -> list[Path]:
    """The files a path spec (or ``wordnet``) reads, in reading order; ``[]`` for an ``hf:`` spec.

    Raises:
        DataError: a missing path, an unsupported file type, a directory without corpus files.
    """
    if spec == "wordnet":
        return [WORDNET_CORPUS]
    if spec.startswith("hf:"):
        return []
    path = Path(spec).expanduser()
    if not path.exists():
        raise DataError(f"{path}: no such corpus file or directory")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and corpus_format(p)[0])
        if not files:
            raise DataError(f"{path}: directory has no .txt or .jsonl files (nor .gz, .zst or .parquet ones)")
        return files
    if not corpus_format(path)[0]:
        raise DataError(f"{path}: unsupported corpus file type '{path.suffix}' (use .txt, .jsonl or a directory; "
                        ".gz, .zst and .parquet files too)")
    return [path]


def file_identity(path: Path, blocks: int = SAMPLE_BLOCKS, block: int = SAMPLE_BLOCK) -> dict[str, str | int]:
    """What identifies a source file without reading it all: resolved path, size, mtime, and a sha256 of ``blocks``
    blocks of ``block`` bytes at evenly spaced offsets (the first and last included)."""
    st = path.stat()
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            last = max(0, st.st_size - block)
            for offset in sorted({round(last * i / max(1, blocks - 1)) for i in range(blocks)}):
                f.seek(offset)
                h.update(f.read(block))
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sample_sha256": h.hexdigest()}


def file_stat(path: Path) -> dict[str, str | int]:
    """The cheap part of :func:`file_identity` (one ``stat``): what a cache key is made of."""
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


@dataclass
class FileReport:
    """Undecodable lines of one file: how many of how many, and where the first is."""

    path: Path
    lines: int = 0
    bad: int = 0
    first: str = ""
    has_text: bool = False
    utf16: bool = False

    def decode(self, raw: bytes, number: int, offset: int) -> str | None:
        """Line ``number`` (at byte ``offset``) as text; None, counted and the first remembered, when it is not
        UTF-8 or holds a NUL byte (:func:`line_problem`)."""
        problem = line_problem(raw, number, offset)
        if problem:
            self.bad += 1
            self.first = self.first or problem
            return None
        text = raw.decode("utf-8")
        self.has_text = self.has_text or bool(text.strip())
        return text

    def finish(self, report: bool) -> None:
        """Raise when the file has no UTF-8 text; warn (``report``) when lines were skipped."""
        if not self.bad:
            return
        hint = "; a UTF-16 byte-order mark: save the file as UTF-8" if self.utf16 else ""
        if not self.has_text:
            raise DataError(f"{self.path}: no UTF-8 text ({self.bad} of {self.lines} lines undecodable, the first "
                            f"{self.first}{hint or '; binary file?'})")
        if report:
            message = (f"{self.path}: skipped {self.bad} of {self.lines} lines that are not UTF-8 text "
                       f"(the first {self.first}{hint})")
            log.warning(message)
            warnings.warn(message, stacklevel=2)


def line_problem(chunk: bytes, number: int, offset: int) -> str:
    """Where and what the first bad byte of a line is ("" for a good line); ``offset`` is the line's byte offset in
    the file, so the message points at the byte itself (as ``cmp`` / a hex editor count, from 0)."""
    try:
        text = chunk.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"at line {number}, byte offset {offset + e.start}: 0x{chunk[e.start]:02x}"
    if "\x00" in text:  # NUL bytes: a binary file that happens to decode
        return f"at line {number}, byte offset {offset + chunk.index(0)}: NUL"
    return ""


class CountingReader(io.RawIOBase):
    """A binary file that counts the bytes read from it (progress on compressed files counts compressed bytes)."""

    def __init__(self, f: io.BufferedIOBase, counter: Callable[[int], None] | None) -> None:
        self.f, self.counter = f, counter

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        n = self.f.readinto(buffer)
        if self.counter is not None and n:
            self.counter(n)
        return n

    def close(self) -> None:
        self.f.close()
        super().close()


def open_binary(path: Path, compression: str, counter: Callable[[int], None] | None = None) -> IO[bytes]:
    """``path`` opened for reading bytes, decompressed; ``counter(n)`` hears every ``n`` bytes read from disk."""
    if compression == ".zst":
        try:
            import zstandard
        except ImportError:
            raise DataError(f"{path}: reading .zst files needs the 'zstandard' package (pip install zstandard)") \
                from None
    try:
        raw: IO[bytes] = io.BufferedReader(CountingReader(open(path, "rb"), counter), buffer_size=READ_BLOCK)
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror})") from None
    if compression == ".gz":  # a GzipFile reads like IO[bytes], but typeshed declares it a BufferedIOBase only
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if compression == ".zst":
        return zstandard.ZstdDecompressor().stream_reader(raw, read_size=READ_BLOCK)
    return raw


def _read(f: IO[bytes], path: Path) -> bytes:
    try:
        return f.read(READ_BLOCK)
    except (OSError, EOFError, ValueError) as e:  # truncated / corrupt gzip or zstd, I/O errors
        raise DataError(f"{path}: cannot read ({type(e).__name__}: {str(e)[:120]})") from None


def _char_boundary(data: bytes, limit: int) -> int:
    """The largest cut ``<= limit`` that does not split a UTF-8 character (at most 3 bytes back)."""
    cut = limit
    while cut > limit - 3 and 0x80 <= data[cut] < 0xC0:
        cut -= 1
    return cut


class BlockLines:
    """The lines of a binary file read in :data:`READ_BLOCK` blocks, as the text readers need them.

    Iterating gives, for each block read, the complete lines it finished (``\\n``-joined, without the last
    newline), or None when it finished none; :attr:`rest` is then the unfinished line after them, which the caller
    may cut (an over-long line) before the next block joins it. A leading UTF-8 byte-order mark is dropped
    (:attr:`bom`); :attr:`utf16` tells whether the file starts with a UTF-16 one.
    """

    def __init__(self, f: IO[bytes], path: Path) -> None:
        self.f, self.path, self.rest = f, path, b""
        first = _read(f, path)
        self.utf16 = first.startswith((b"\xff\xfe", b"\xfe\xff"))  # Windows' "Unicode"
        self.bom = first.startswith(b"\xef\xbb\xbf")
        self._first = first[3:] if self.bom else first

    def __iter__(self) -> Iterator[bytes | None]:
        block = self._first
        while block:
            buf = self.rest + block if self.rest else block
            end = buf.rfind(b"\n")
            chunk, self.rest = (buf[:end], buf[end + 1 :]) if end >= 0 else (None, buf)
            yield chunk
            block = _read(self.f, self.path)


def text_lines(path: Path, f: IO[bytes], report: FileReport, limit: int) -> Iterator[tuple[int, str, bool]]:
    """``(line number, text, continues)`` of every UTF-8 line of ``f`` (``\\r\\n`` endings and a leading byte-order
    mark dropped). A line longer than ``limit`` bytes comes in pieces: every piece but its last ``continues``.
    Undecodable lines are skipped and counted in ``report``."""
    lines = BlockLines(f, path)
    report.utf16 = lines.utf16
    number, offset, pending = 0, 3 if lines.bom else 0, False
    for chunk in lines:
        if chunk is not None:
            yield from _chunk_lines(chunk, number + (0 if pending else 1), offset, report)
            number += chunk.count(b"\n") + (0 if pending else 1)
            offset, pending = offset + len(chunk) + 1, False
        while len(lines.rest) > limit:  # an over-long line: hand out a piece, keep reading the rest
            cut = _char_boundary(lines.rest, limit)
            yield from _piece(lines.rest[:cut], number + (0 if pending else 1), offset, report)
            number += 0 if pending else 1
            offset, pending, lines.rest = offset + cut, True, lines.rest[cut:]
    if lines.rest:
        yield from _chunk_lines(lines.rest, number + (0 if pending else 1), offset, report)


def _piece(piece: bytes, number: int, offset: int, report: FileReport) -> Iterator[tuple[int, str, bool]]:
    text = report.decode(piece, number, offset)
    if text is not None:
        yield number, text, True


def _chunk_lines(chunk: bytes, number: int, offset: int, report: FileReport) -> Iterator[tuple[int, str, bool]]:
    """The lines of ``chunk`` (complete lines joined by ``\\n``), the first numbered ``number``."""
    try:
        text = chunk.decode("utf-8")
        clean = "\x00" not in text
    except UnicodeDecodeError:
        clean = False
    if clean:  # the common case: one C-level decode and split for the whole block
        lines = text.split("\n")
        report.lines += len(lines)
        report.has_text = report.has_text or (bool(text) and not text.isspace())
        if "\r" in text:
            lines = [line.rstrip("\r") for line in lines]
        for i, line in enumerate(lines):
            yield number + i, line, False
        return
    for i, raw in enumerate(chunk.split(b"\n")):  # some line is bad: find it, skip it, go on
        report.lines += 1
        decoded = report.decode(raw, number + i, offset)
        offset += len(raw) + 1
        if decoded is not None:
            yield number + i, decoded.rstrip("\r"), False


def has_blank_line(path: Path, compression: str) -> bool:
    """Whether a text file has a line that is empty after ``str.strip()`` (then its documents are blank-line
    separated, else one per line); read as bytes with a regular expression, stopping at the first blank line."""
    with open_binary(path, compression) as f:
        lines, skip_first = BlockLines(f, path), False
        for chunk in lines:
            if chunk is not None:
                if skip_first:  # the tail of an over-long line: not blank (it had text before)
                    chunk, skip_first = chunk[chunk.find(b"\n") + 1 :] if b"\n" in chunk else b"\x01", False
                if _BLANK_LINE.search(chunk):
                    return True
            if len(lines.rest) > MAX_DOC_BYTES:  # an over-long line
                skip_first = skip_first or not _ALL_WS.fullmatch(lines.rest)
                lines.rest = b""
        return bool(lines.rest) and not skip_first and _ALL_WS.fullmatch(lines.rest) is not None


def cut_text(text: str) -> list[str]:
    """``text`` as pieces of at most :data:`MAX_DOC_BYTES` UTF-8 bytes (one piece when it is short), stripped."""
    if len(text) * 4 <= MAX_DOC_BYTES:  # surely short: skip the encode
        return [text]
    data = text.encode("utf-8")
    if len(data) <= MAX_DOC_BYTES:
        return [text]
    pieces, lo = [], 0
    while lo < len(data):
        cut = len(data) if len(data) - lo <= MAX_DOC_BYTES else lo + _char_boundary(data[lo:], MAX_DOC_BYTES)
        piece = data[lo:cut].decode("utf-8").strip()
        if piece:
            pieces.append(piece)
        lo = cut
    return pieces


@dataclass
class ReadStats:
    """What a read of a source found: documents cut for length, and per-file undecodable-line reports."""

    cut: int = 0
    skipped_lines: int = 0
    blank_separated: dict[str, bool] = field(default_factory=dict)  # per text file: found once, reused


def txt_documents(path: Path, compression: str, stats: ReadStats, report: bool,
                  counter: Callable[[int], None] | None = None) -> Iterator[str]:
    """The documents of a ``.txt`` file (see the module docstring)."""
    key = str(path)
    if key not in stats.blank_separated:
        stats.blank_separated[key] = has_blank_line(path, compression)
    blank = stats.blank_separated[key]
    rep = FileReport(path)
    with open_binary(path, compression, counter) as f:
        if not blank:  # one document per line; pieces of an over-long line are documents of their own
            for _, line, continues in text_lines(path, f, rep, MAX_DOC_BYTES):
                doc = line.strip()
                if doc:
                    stats.cut += continues
                    yield doc
        else:
            current: list[str] = []
            size = 0
            for _, line, continues in text_lines(path, f, rep, MAX_DOC_BYTES):
                line = line.strip()
                if not line:
                    if current and not continues:
                        yield "\n".join(current)
                        current, size = [], 0
                    continue
                if current and size + len(line) > MAX_DOC_BYTES // 4:  # chars: at most 4 bytes each
                    stats.cut += 1
                    yield "\n".join(current)
                    current, size = [], 0
                current.append(line)
                size += len(line) + 1
            if current:
                yield "\n".join(current)
    stats.skipped_lines += rep.bad
    rep.finish(report)


def jsonl_documents(path: Path, compression: str, stats: ReadStats, report: bool,
                    counter: Callable[[int], None] | None = None) -> Iterator[str]:
    """The stripped, non-empty ``text`` fields of a ``.jsonl`` file, cut when over-long."""
    rep = FileReport(path)
    with open_binary(path, compression, counter) as f:
        for number, row in parse_jsonl(path, _whole_lines(path, f, rep)):
            if "text" not in row:
                raise DataError(f"{path} line {number}: no 'text' field (found {sorted(row)})")
            if not isinstance(row["text"], str):
                raise DataError(f"{path} line {number}: 'text' is {type(row['text']).__name__}, not a string")
            text = row["text"].strip()
            if text:
                pieces = cut_text(text)
                stats.cut += len(pieces) - 1
                yield from pieces
    stats.skipped_lines += rep.bad
    rep.finish(report)


def _whole_lines(path: Path, f: IO[bytes], report: FileReport) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of the UTF-8 lines of a JSON Lines file; a line too long to hold is an error."""
    for number, line, continues in text_lines(path, f, report, MAX_JSON_LINE_BYTES):
        if continues:
            raise DataError(f"{path} line {number}: longer than {MAX_JSON_LINE_BYTES >> 20} MiB (a JSONL line "
                            "must fit in memory; split the record)")
        yield number, line


def parquet_documents(path: Path, stats: ReadStats, counter: Callable[[int], None] | None = None) -> Iterator[str]:
    """The stripped, non-empty strings of a Parquet file's ``text`` column, read one record batch at a time."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(f"{path}: reading .parquet files needs the 'pyarrow' package (pip install pyarrow)") from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises its own error types
        raise DataError(f"{path}: not a Parquet file ({str(e).splitlines()[0][:120]})") from None
    if "text" not in pf.schema_arrow.names:
        raise DataError(f"{path}: no 'text' column (columns: {pf.schema_arrow.names})")
    for i in range(pf.num_row_groups):
        for batch in pf.iter_batches(batch_size=4096, row_groups=[i], columns=["text"]):
            for text in batch.column(0).to_pylist():
                if isinstance(text, str) and text.strip():
                    pieces = cut_text(text.strip())
                    stats.cut += len(pieces) - 1
                    yield from pieces
        if counter is not None:
            counter(pf.metadata.row_group(i).total_byte_size)


def wordnet_documents(counter: Callable[[int], None] | None = None) -> Iterator[str]:
    """The bundled corpus's ``text`` fields, as they are (``datamodules/bundled.py``)."""
    with open_binary(WORDNET_CORPUS, "", counter) as raw, gzip.GzipFile(fileobj=raw) as f:
        for _, row in parse_jsonl(WORDNET_CORPUS, decode_lines(WORDNET_CORPUS, f)):
            yield row["text"]


def path_documents(spec: str, stats: ReadStats, *, report: bool = True,
                   counter: Callable[[int], None] | None = None) -> Iterator[str]:
    """Every document of a path spec or ``wordnet``, in reading order."""
    if spec == "wordnet":
        yield from wordnet_documents(counter)
        return
    for path in corpus_files(spec):
        fmt, compression = corpus_format(path)
        if fmt == "parquet":
            yield from parquet_documents(path, stats, counter)
        elif fmt == "jsonl":
            yield from jsonl_documents(path, compression, stats, report, counter)
        else:
            yield from txt_documents(path, compression, stats, report, counter)


def hf_splits(spec: str) -> tuple[Iterable[Mapping[str, object]], Iterable[Mapping[str, object]] | None]:
    """The streamed ``train`` split of ``hf:<name>[:<config>]`` and its ``validation`` split (or None).

    Raises:
        DataError: no ``datasets`` package, a dataset that does not load, no ``train`` split, no ``text`` column.
    """
    ds = load_hf(spec, streaming=True)
    if "train" not in ds:
        raise DataError(f"{spec}: no 'train' split (splits: {sorted(ds)})")
    try:
        columns = ds["train"].column_names
        if columns is None:  # features unknown until read: the first row's keys
            columns = list(next(iter(ds["train"]), {}))
    except Exception as e:  # noqa: BLE001 - datasets raises many types (offline, missing, bad config)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise DataError(f"{spec}: cannot load dataset ({type(e).__name__}: {first})") from e
    if "text" not in columns:
        raise DataError(f"{spec}: no 'text' column (columns: {columns})")
    return ds["train"], ds.get("validation")


def hf_texts(rows: Iterable[Mapping[str, object]], stats: ReadStats) -> Iterator[str]:
    """The stripped, non-empty ``text`` strings of streamed rows (the HF text loader keeps empty lines)."""
    for row in rows:
        text = row.get("text")
        if isinstance(text, str) and text.strip():
            pieces = cut_text(text.strip())
            stats.cut += len(pieces) - 1
            yield from pieces


def hold_out(n: int, val_fraction: float, seed: int) -> np.ndarray:
    """``(n,)`` bool: which of ``n`` documents are held out for validation.

    ``max(1, round(n * val_fraction))`` documents (none when ``val_fraction`` is 0 or there is one document), the
    first of a seeded permutation; membership depends only on (n, val_fraction, seed), so a streaming prepare that
    knows only the document count holds out the same documents as a list in memory.
    """
    n_val = 0 if val_fraction == 0 or n < 2 else max(1, round(n * val_fraction))
    is_val = np.zeros(n, dtype=bool)
    is_val[permutation(n, seed)[:n_val]] = True
    return is_val


def permutation(n: int, seed: int) -> np.ndarray:
    """``numpy.random.default_rng(seed).permutation(n)`` in int32 when ``n`` fits (half the memory of a corpus's
    document count): ``Generator.permutation(n)`` shuffles ``arange(n)``, and the shuffle's draws do not depend
    on the dtype, so the order is the same."""
    order = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)
    np.random.default_rng(seed).shuffle(order)
    return order
