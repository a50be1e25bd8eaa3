"""Prepared datasets: a corpus streamed once, in bounded memory, into memory-mapped token files.

A prepared dataset is a directory (``docs/data.md``)::

    manifest.json          format, spec, source files' identity, settings, split, content hash, token counts
    tokenizer.json         the tokenizer (trained on a seeded sample of the training documents, or the given one)
    tokens.bin             every document's tokens in source order, no separators (the token dtype)
    offsets.bin            int64, documents + 1: document i is tokens[offsets[i]:offsets[i + 1]]
    val-docs.bin           int64: the validation documents' indices, in source order
    val-texts.bin          the validation documents' UTF-8 text, in source order (bits per byte reads it)
    val-text-offsets.bin   int64, validation documents + 1: byte offsets into val-texts.bin
    train-sep<id>.bin      the training stream for separator <id>: training documents in the seeded order, each
                           followed by <id> (what training memory-maps)
    val-sep<id>.bin        the validation stream, likewise
    train-sep<id>-counts.npy   unigram counts of the training stream (the unigram floor)
    streams-sep<id>.json   written last for that separator: its streams are complete

Preparing reads the source twice (:mod:`famlab.datamodules.sources`): a scan (document count, content hash, the
tokenizer's sample) and, once the tokenizer is trained, an encoding pass (``encode_batch`` in batches of
:data:`ENCODE_BATCH_CHARS`, in the Rust tokenizer's own thread pool, while a reader thread parses the next batch).
The streams are then copied out of the memory-mapped ``tokens.bin``. Memory is bounded by the tokenizer's sample,
the batch and the copy chunk, never by the corpus.

The token streams equal what ``load_corpus`` + ``write_token_file`` give for the same corpus: the hold-out
(:func:`famlab.datamodules.sources.hold_out`) and the permutation of each split (``default_rng(seed)
.permutation(len(split))``) depend only on document counts and the seed, and the tokenizer trains on the training
documents in source order when the sample covers them.

Everything is written under a temporary name beside the target and renamed into place last, so a directory with
a ``manifest.json`` is complete; an interrupted prepare (even SIGKILL) leaves only a temporary directory, which
the next prepare of the same target removes before starting again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from typing import IO, Any, Protocol, overload

import numpy as np
import numpy.typing as npt
from famlab.datamodules.errors import DataError
from famlab.datamodules.sources import (
    ReadStats,
    corpus_files,
    file_identity,
    file_stat,
    hf_splits,
    hf_texts,
    hold_out,
    path_documents,
    permutation,
)
from famlab.datamodules.tokenizer import (
    DEFAULT_SAMPLE_BYTES,
    TOKENIZER_FILE,
    DocumentSample,
    TokenizerBundle,
    check_settings,
    load_tokenizer,
    train_tokenizer,
)

FORMAT = "famlab-prepared-1"
MANIFEST = "manifest.json"
ENCODE_BATCH_CHARS = 1 << 20  # characters per encode_batch call: work for every core; its Encodings bound memory
STREAM_CHUNK_TOKENS = 2 << 20  # tokens per copy when writing a stream
Progress = Callable[[str, int, int], None]  # (phase, bytes done, bytes total or 0 when unknown)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (halves the file), else int32."""
    return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.int32)


@dataclass(frozen=True)
class PrepareSettings:
    """What a prepared dataset depends on besides its source.

    Attributes:
        kind: tokenizer kind (``bpe`` / ``wordpiece`` / ``unigram``).
        vocab_size: requested vocabulary size.
        num_sentinels: T5 sentinels.
        tokenizer_path: an existing ``tokenizer.json`` to encode with instead of training one.
        sample_bytes: the tokenizer trains on a seeded sample of at most this many bytes of training documents.
        val_fraction: held-out fraction (an ``hf:`` dataset's own ``validation`` split wins).
        seed: seeds the hold-out, the tokenizer's sample and the document order of the streams.
    """

    kind: str = "bpe"
    vocab_size: int = 8192
    num_sentinels: int = 100
    tokenizer_path: str | None = None
    sample_bytes: int = DEFAULT_SAMPLE_BYTES
    val_fraction: float = 0.05
    seed: int = 0

    def key(self) -> dict[str, object]:
        """The settings a cached dataset is keyed by: a given tokenizer by its content, not its path."""
        split = {"val_fraction": self.val_fraction, "seed": self.seed}
        if self.tokenizer_path is not None:
            data = _read_tokenizer_file(self.tokenizer_path)
            return {"tokenizer_sha256": hashlib.sha256(data).hexdigest(), "num_sentinels": self.num_sentinels} | split
        return {"kind": self.kind, "vocab_size": self.vocab_size, "num_sentinels": self.num_sentinels,
                "sample_bytes": self.sample_bytes} | split


def _read_tokenizer_file(path: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as e:
        raise DataError(f"{path}: no such tokenizer file ({e.strerror})") from None


# -- the prepared dataset ----------------------------------------------------------------------------------------
class _LazyTexts(Sequence[str]):
    """A list of texts read on access: ``text(i)`` gives the ``i``-th (0 <= i < len); indexing and slicing as a
    list's."""

    def text(self, index: int) -> str:
        raise NotImplementedError

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self.text(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.text(index)


class ValTexts(_LazyTexts):
    """The validation documents' texts in source order, read from ``val-texts.bin`` on access (a lazy list)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offsets = _open_array(path / "val-text-offsets.bin", np.int64)

    def __len__(self) -> int:
        return max(0, len(self.offsets) - 1)

    def text(self, index: int) -> str:
        lo, hi = int(self.offsets[index]), int(self.offsets[index + 1])
        with open(self.path / "val-texts.bin", "rb") as f:
            f.seek(lo)
            return f.read(hi - lo).decode("utf-8")


class TrainTexts(_LazyTexts):
    """The training documents in source order, decoded from ``tokens.bin`` on access (a lazy list).

    Decoding gives the text back exactly for byte-level BPE; WordPiece and Unigram normalise (lower-casing, NFKC),
    so their decoded text re-encodes to the same ids but is not the source text. For baselines over token ids (the
    bigram floor of ``famlab eval``), not for anything scored per byte (the validation texts are stored as they are).
    """

    def __init__(self, dataset: PreparedDataset) -> None:
        self.dataset = dataset
        self.tokens = _open_array(dataset.path / "tokens.bin", dataset.dtype)
        self.offsets = _open_array(dataset.path / "offsets.bin", np.int64)
        is_val = np.zeros(len(self.offsets) - 1, dtype=bool)
        is_val[_open_array(dataset.path / "val-docs.bin", np.int64)] = True
        self.docs = np.flatnonzero(~is_val)
        self.tokenizer = dataset.bundle().tokenizer

    def __len__(self) -> int:
        return len(self.docs)

    def text(self, index: int) -> str:
        doc = int(self.docs[index])
        ids = self.tokens[int(self.offsets[doc]) : int(self.offsets[doc + 1])]
        return self.tokenizer.decode(ids.tolist(), skip_special_tokens=False)


class PreparedDataset:
    """An opened prepared dataset (see the module docstring); stands in for a ``Corpus`` where a run needs one.

    Attributes:
        path: the directory.
        manifest: ``manifest.json``.
        name: the corpus spec it was prepared from.
        hash: the content hash (sha256 of the documents in source order and the split).
        val: the validation texts (lazy, :class:`ValTexts`); ``train`` decodes the training documents
            (:class:`TrainTexts`).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.manifest: dict[str, Any] = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DataError(f"{self.path}: not a prepared dataset (no readable {MANIFEST})") from e
        if self.manifest.get("format") != FORMAT:
            raise DataError(f"{self.path}: prepared in format {self.manifest.get('format')!r}, this famlab reads "
                            f"{FORMAT!r}; prepare it again")
        self.name: str = self.manifest["spec"]
        self.hash: str = self.manifest["hash"]
        self.val = ValTexts(self.path)
        self.dtype = np.dtype(self.manifest["tokens"]["dtype"])

    @property
    def train(self) -> TrainTexts:
        """The training documents, decoded on access (:class:`TrainTexts`): what a ``Corpus``'s ``train`` holds."""
        return TrainTexts(self)

    @property
    def seed(self) -> int:
        return int(self.manifest["settings"]["seed"])

    def bundle(self, num_sentinels: int | None = None) -> TokenizerBundle:
        """The dataset's tokenizer (checked for ``num_sentinels`` sentinels, by default the prepared number)."""
        n = self.manifest["settings"]["num_sentinels"] if num_sentinels is None else num_sentinels
        return load_tokenizer(self.path / TOKENIZER_FILE, num_sentinels=n)

    def ready_file(self, separator_id: int) -> Path:
        """Written last by :meth:`ensure_streams`: the streams for ``separator_id`` are complete."""
        return self.path / f"streams-sep{separator_id}.json"

    def stream_files(self, separator_id: int) -> tuple[Path, Path]:
        """``(train, val)`` stream files for ``separator_id``."""
        return self.path / f"train-sep{separator_id}.bin", self.path / f"val-sep{separator_id}.bin"

    def ensure_streams(self, separator_id: int) -> None:
        """Write the streams for ``separator_id`` unless they exist (a copy out of ``tokens.bin``, no tokenizing)."""
        if not self.ready_file(separator_id).exists():
            write_streams(self.path, self.manifest, separator_id)

    def train_counts(self, separator_id: int, vocab_size: int) -> np.ndarray:
        """``(vocab_size,)`` unigram counts of the training stream (separators included), stored at prepare time."""
        self.ensure_streams(separator_id)
        counts = np.load(self.path / f"train-sep{separator_id}-counts.npy")
        out = np.zeros(max(vocab_size, len(counts)), dtype=np.int64)
        out[: len(counts)] = counts
        return out[:vocab_size]

    def keys(self) -> list[dict[str, object]]:
        """The settings keys this dataset answers: those it was prepared with, and "encoded with its tokenizer"."""
        k = self.manifest["key"]
        split = {"val_fraction": k["val_fraction"], "seed": k["seed"]}
        given = {"tokenizer_sha256": self.manifest["tokenizer"]["hash"], "num_sentinels": k["num_sentinels"]}
        return [k, given | split]

    def sources_unchanged(self) -> bool:
        """Whether the source files still have the recorded size, mtime and sampled-block hash (no full read)."""
        recorded = self.manifest["sources"]
        try:
            files = corpus_files(self.name)
        except DataError:
            return False
        if [str(f.resolve()) for f in files] != [r["path"] for r in recorded]:
            return False
        blocks = identity_blocks(len(files))
        return all(file_identity(f, *blocks) == r for f, r in zip(files, recorded, strict=True))


def is_prepared_dir(spec: str | Path) -> bool:
    """Whether ``spec`` names a prepared dataset directory (one with a famlab ``manifest.json``)."""
    spec = str(spec)
    if spec == "wordnet" or spec.startswith("hf:"):
        return False
    manifest = Path(spec).expanduser() / MANIFEST
    if not manifest.is_file():
        return False
    with contextlib.suppress(OSError, ValueError):
        return str(json.loads(manifest.read_text(encoding="utf-8")).get("format", "")).startswith("famlab-prepared")
    return False


def open_prepared(path: str | Path) -> PreparedDataset:
    """Open a prepared dataset directory.

    Raises:
        DataError: not a prepared dataset, or one of another format version.
    """
    return PreparedDataset(Path(path).expanduser())


def _open_array(path: Path, dtype: npt.DTypeLike) -> np.ndarray:
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)  # np.memmap refuses empty files
    return np.memmap(path, dtype=dtype, mode="r")


# -- where a spec is prepared ------------------------------------------------------------------------------------
def identity_blocks(n_files: int) -> tuple[int, int]:
    """``(blocks, block bytes)`` sampled per file, so a directory of many files costs a bounded read."""
    return (8, 1 << 16) if n_files <= 64 else (2, 1 << 12)


def source_stats(spec: str) -> list[dict[str, str | int]]:
    """The cheap identity of a spec's files (path, size, mtime: one ``stat`` each; nothing is read)."""
    return [file_stat(f) for f in corpus_files(spec)]


def prepared_location(spec: str, settings: PrepareSettings, cache_dir: str | Path) -> Path:
    """Where :func:`prepare_corpus` keeps ``spec`` prepared with ``settings`` under ``cache_dir`` (``prepared/``).

    Keyed by the spec, its files' path / size / mtime and the settings; the sampled-block hash is checked against
    the manifest when the dataset is reused. Any rank can compute this without reading the raw text.
    """
    spec = str(spec)
    key = {"format": FORMAT, "spec": spec if spec.startswith("hf:") or spec == "wordnet" else str(Path(spec).resolve()),
           "files": source_stats(spec), "settings": settings.key()}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(spec.rstrip("/")).name if not spec.startswith("hf:") else spec)
    return Path(cache_dir).expanduser() / "prepared" / f"{slug[:40].strip('-.') or 'corpus'}-{digest}"


def prepare_corpus(
    spec: str | Path,
    settings: PrepareSettings,
    *,
    cache_dir: str | Path,
    out: str | Path | None = None,
    progress: Progress | None = None,
) -> PreparedDataset:
    """Prepare ``spec`` (or reuse it, prepared before with the same sources and settings) and open it.

    Args:
        spec: a corpus spec (:mod:`famlab.datamodules.sources`) or a prepared directory (opened as it is).
        settings: the tokenizer and split settings.
        cache_dir: the cache; the dataset goes to :func:`prepared_location` unless ``out`` is given.
        out: write the prepared dataset here instead (must not exist, or be a prepared dataset).
        progress: called with ``(phase, bytes done, bytes total)`` while reading.

    Returns:
        The opened dataset.

    Raises:
        DataError: a bad source (one line naming the file), an empty corpus, bad tokenizer settings; nothing
            half-written is left behind.
    """
    spec = str(spec)
    if is_prepared_dir(spec):
        return open_prepared(spec)
    target = Path(out).expanduser() if out is not None else prepared_location(spec, settings, cache_dir)
    if is_prepared_dir(target):
        found = open_prepared(target)
        if found.sources_unchanged() and settings.key() in found.keys():
            return found
        # the source changed under the same size and mtime (or out= was prepared otherwise): prepare again
        target.unlink() if target.is_symlink() else shutil.rmtree(target)
    elif out is not None and target.exists() and any(target.iterdir()):
        raise DataError(f"{target}: exists and is not a prepared dataset; choose a new directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    tmp = target.parent / f".{target.name}.tmp-{socket.gethostname()}-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        manifest = build(spec, settings, tmp, progress)
        publish(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out is None and settings.tokenizer_path is None:
        link_by_tokenizer(spec, settings, manifest, target, cache_dir)
    return open_prepared(target)


def publish(tmp: Path, target: Path) -> None:
    """Rename the finished ``tmp`` to ``target``; when another process got there first, keep its copy."""
    if target.exists() and not any(target.iterdir()):
        target.rmdir()  # an empty out= directory
    try:
        os.rename(tmp, target)
    except OSError:
        if not is_prepared_dir(target):
            raise
        shutil.rmtree(tmp, ignore_errors=True)  # prepared concurrently: identical content, keep the first


def link_by_tokenizer(spec: str, settings: PrepareSettings, manifest: Mapping[str, object], target: Path,
                      cache_dir: str | Path) -> None:
    """Also file the dataset under the key of "this source encoded with this tokenizer.json", so a run that is
    handed the trained tokenizer by path (every arm of a comparison) finds it instead of encoding again."""
    tokenizer = str(target / TOKENIZER_FILE)
    alias = prepared_location(spec, PrepareSettings(**{**asdict(settings), "tokenizer_path": tokenizer}), cache_dir)
    if alias != target and not alias.exists():
        with contextlib.suppress(OSError):  # a concurrent link, or a filesystem without symlinks: a cache miss later
            alias.symlink_to(target.name)


def remove_stale_temporaries(target: Path) -> None:
    """Remove temporary directories of ``target`` left by prepares on this host whose process is gone."""
    prefix = f".{target.name}.tmp-{socket.gethostname()}-"
    for tmp in target.parent.glob(f".{target.name}.tmp-*"):
        pid = tmp.name[len(prefix) :].split("-")[0] if tmp.name.startswith(prefix) else ""
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:
            pass  # alive, someone else's


# -- building ----------------------------------------------------------------------------------------------------
class Source:
    """A corpus spec read as ``(part, document)`` pairs: part 0 is the corpus (an ``hf:`` dataset's ``train``
    split), part 1 an ``hf:`` dataset's ``validation`` split."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.files = corpus_files(spec)  # checks the path first: one line for a missing / unsupported file
        self.stats = ReadStats()
        self.total_bytes = sum(f.stat().st_size for f in self.files)

    def identity(self) -> list[dict[str, str | int]]:
        blocks = identity_blocks(len(self.files))
        return [file_identity(f, *blocks) for f in self.files]

    def documents(self, *, report: bool, counter: Callable[[int], None] | None) -> Iterator[tuple[int, str]]:
        if not self.spec.startswith("hf:"):
            for doc in path_documents(self.spec, self.stats, report=report, counter=counter):
                yield 0, doc
            return
        train, validation = hf_splits(self.spec)
        for part, rows in ((0, train), (1, validation)):
            for doc in hf_texts(rows or [], self.stats):
                if counter is not None:
                    counter(len(doc))
                yield part, doc


@dataclass
class Scan:
    """What the first pass finds: document counts per part, text bytes, the content hash, the tokenizer sample."""

    parts: list[int] = field(default_factory=lambda: [0, 0])
    text_bytes: int = 0
    cut: int = 0  # documents cut for length (sources.MAX_DOC_BYTES)
    skipped_lines: int = 0  # undecodable lines skipped
    hash: str = ""
    sample: DocumentSample | None = None


class Counter:
    """Bytes read so far, reported to ``progress`` as ``(phase, done, total)``."""

    def __init__(self, phase: str, total: int, progress: Progress | None) -> None:
        self.phase, self.total, self.progress, self.done = phase, total, progress, 0

    def __call__(self, n: int) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.phase, self.done, self.total)


def scan(source: Source, settings: PrepareSettings, progress: Progress | None) -> Scan:
    """Pass 1: count the documents, hash them, and sample the tokenizer's training documents."""
    out = Scan(sample=DocumentSample(settings.sample_bytes, settings.seed) if settings.tokenizer_path is None else None)
    h = hashlib.sha256()
    counter = Counter("scan", source.total_bytes, progress)
    batch: list[str] = []
    for part, doc in source.documents(report=True, counter=counter):
        out.parts[part] += 1
        if out.sample is not None:
            out.sample.add(doc)
        batch.append(doc)
        if len(batch) == 4096:
            out.text_bytes += _hash_batch(h, batch)
            batch = []
    out.text_bytes += _hash_batch(h, batch)
    out.hash = h.hexdigest()
    out.cut, out.skipped_lines = source.stats.cut, source.stats.skipped_lines
    return out


class Hasher(Protocol):
    """What :func:`_hash_batch` uses of a ``hashlib`` hash object."""

    def update(self, data: bytes, /) -> None: ...


def _hash_batch(h: Hasher, batch: list[str]) -> int:
    if not batch:
        return 0
    data = "\0".join(batch).encode("utf-8") + b"\0"
    h.update(data)
    return len(data) - len(batch)


def split_of(parts: list[int], settings: PrepareSettings) -> np.ndarray:
    """``(documents,)`` bool: which documents are validation (an ``hf:`` validation split, else the hold-out)."""
    if parts[1]:
        return np.concatenate([np.zeros(parts[0], dtype=bool), np.ones(parts[1], dtype=bool)])
    return hold_out(parts[0], settings.val_fraction, settings.seed)


def make_tokenizer(
    settings: PrepareSettings, found: Scan, is_val: np.ndarray, out: Path
) -> tuple[TokenizerBundle, int]:
    """Train the tokenizer on the sample's training documents (or copy the given one) into ``out``; returns it and
    the sample's size in bytes (0 for a given tokenizer)."""
    file = out / TOKENIZER_FILE
    if settings.tokenizer_path is not None:
        file.write_bytes(_read_tokenizer_file(settings.tokenizer_path))
        return load_tokenizer(file, num_sentinels=settings.num_sentinels), 0
    check_settings(settings.kind, settings.vocab_size, settings.num_sentinels)
    assert found.sample is not None
    docs = found.sample.documents(keep=~is_val)
    if not docs:  # every sampled document is held out (a tiny corpus): train on them rather than on nothing
        docs = found.sample.documents()
    tok = train_tokenizer(docs, kind=settings.kind, vocab_size=settings.vocab_size,
                          num_sentinels=settings.num_sentinels)
    tok.save(str(file))
    return load_tokenizer(file, num_sentinels=settings.num_sentinels), sum(len(d.encode("utf-8")) for d in docs)


def _batches(source: Source, counter: Counter) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for _, doc in source.documents(report=False, counter=counter):
        batch.append(doc)
        size += len(doc)
        if size >= ENCODE_BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _read_ahead(batches: Iterator[list[str]], depth: int = 2) -> Iterator[list[str]]:
    """``batches`` produced by a reader thread ``depth`` ahead, so parsing overlaps ``encode_batch`` (which
    releases the GIL while the Rust thread pool encodes)."""
    q: queue.Queue[list[str] | BaseException | None] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for batch in batches:
                while not stop.is_set():
                    try:
                        q.put(batch, timeout=0.5)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(None)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            q.put(e)

    thread = threading.Thread(target=produce, daemon=True, name="famlab-prepare-reader")
    thread.start()
    try:
        while (item := q.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


def encode(source: Source, bundle: TokenizerBundle, is_val: np.ndarray, out: Path,
           progress: Progress | None) -> int:
    """Pass 2: encode every document into ``tokens.bin`` / ``offsets.bin``; keep the validation texts. Returns the
    number of documents encoded."""
    dtype = token_dtype(bundle.vocab_size)
    counter = Counter("encode", source.total_bytes, progress)
    n_docs, n_tokens, text_end = 0, 0, 0
    with (open(out / "tokens.bin", "wb") as tokens, open(out / "offsets.bin", "wb") as offsets,
          open(out / "val-texts.bin", "wb") as texts, open(out / "val-text-offsets.bin", "wb") as text_offsets):
        np.zeros(1, dtype=np.int64).tofile(offsets)
        np.zeros(1, dtype=np.int64).tofile(text_offsets)
        for batch in _read_ahead(_batches(source, counter)):
            if n_docs + len(batch) > len(is_val):
                raise DataError(f"{source.spec}: changed while being prepared (more documents than the first read)")
            encodings = bundle.tokenizer.encode_batch(batch, add_special_tokens=False)
            lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
            total = int(lengths.sum())
            np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=dtype, count=total).tofile(tokens)
            (n_tokens + np.cumsum(lengths)).tofile(offsets)
            n_tokens += total
            for i in np.flatnonzero(is_val[n_docs : n_docs + len(batch)]):
                data = batch[i].encode("utf-8")
                texts.write(data)
                text_end += len(data)
                np.array([text_end], dtype=np.int64).tofile(text_offsets)
            n_docs += len(batch)
    np.flatnonzero(is_val).astype(np.int64).tofile(out / "val-docs.bin")
    return n_docs


def build(spec: str, settings: PrepareSettings, out: Path, progress: Progress | None) -> dict[str, Any]:
    """Prepare ``spec`` into the (empty) directory ``out``; returns the manifest, written last."""
    clock = [time.time()]

    def lap() -> float:
        clock.append(time.time())
        return round(clock[-1] - clock[-2], 2)

    source = Source(spec)
    identity = source.identity()
    found = scan(source, settings, progress)
    n_docs = sum(found.parts)
    if not n_docs:
        raise DataError(f"{spec}: empty corpus (no documents)")
    seconds = {"scan": lap()}
    is_val = split_of(found.parts, settings)
    bundle, sample_bytes = make_tokenizer(settings, found, is_val, out)
    found.sample = None  # free the sample before encoding
    seconds["tokenizer"] = lap()
    if encode(source, bundle, is_val, out, progress) != n_docs or source.identity() != identity:
        raise DataError(f"{spec}: changed while being prepared (its files or document count differ between reads)")
    seconds["encode"] = lap()
    n_val = int(is_val.sum())
    manifest = {
        "format": FORMAT, "spec": spec, "sources": identity, "settings": asdict(settings), "key": settings.key(),
        "hash": hashlib.sha256(f"{found.hash}|{n_docs}|{n_val}|{settings.val_fraction}|{settings.seed}".encode())
        .hexdigest(),
        "split": {"documents": n_docs, "train_documents": n_docs - n_val, "val_documents": n_val,
                  "val_from": "validation split" if found.parts[1] else "hold-out",
                  "val_fraction": settings.val_fraction, "seed": settings.seed},
        "text_bytes": found.text_bytes, "source_bytes": source.total_bytes,
        "cut_documents": found.cut, "skipped_lines": found.skipped_lines,
        "tokenizer": {"hash": bundle.hash, "vocab_size": bundle.vocab_size, "sample_bytes": sample_bytes,
                      "sample_limit": settings.sample_bytes, "given": settings.tokenizer_path},
        "tokens": {"dtype": token_dtype(bundle.vocab_size).name,
                   "total": int(_open_array(out / "offsets.bin", np.int64)[-1])},
    }
    write_streams(out, manifest, bundle.special_ids["eos"])
    seconds["streams"] = lap()
    manifest["seconds"] = seconds
    manifest["prepare_seconds"] = round(clock[-1] - clock[0], 1)
    _write_json(out / MANIFEST, manifest)
    return manifest


# -- the streams -------------------------------------------------------------------------------------------------
def document_orders(val_docs: np.ndarray, n_docs: int, seed: int) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Each split's stream order as ``(positions, val_docs or None)``: ``positions`` is the split's seeded
    permutation (``default_rng(seed).permutation(len(split))``, what ``write_token_file`` does with a list) over
    the split's documents in source order. The validation split is ``val_docs`` itself; the training split is every
    other document, never materialised (:func:`train_documents` maps positions to documents), so memory is 4 bytes
    per training document."""
    train = permutation(n_docs - len(val_docs), seed)
    val = val_docs[permutation(len(val_docs), seed)]
    return [(train, val_docs), (val, None)]


def train_documents(positions: np.ndarray, val_docs: np.ndarray) -> np.ndarray:
    """Document indices of training positions: the k-th training document is ``k`` plus the number of validation
    documents before it (``val_docs`` sorted; ``val_docs[i] - i`` training documents precede the i-th)."""
    shifted = val_docs - np.arange(len(val_docs))
    return positions + np.searchsorted(shifted, positions, side="right")


def write_streams(path: Path, manifest: dict[str, Any], separator_id: int) -> None:
    """Write the training and validation streams for ``separator_id`` (and the training unigram counts) by copying
    document slices out of ``tokens.bin``; the ready file last."""
    dtype = np.dtype(manifest["tokens"]["dtype"])
    val_docs = np.fromfile(path / "val-docs.bin", dtype=np.int64)
    orders = document_orders(val_docs, int(manifest["split"]["documents"]), int(manifest["settings"]["seed"]))
    vocab = int(manifest["tokenizer"]["vocab_size"])
    sizes, tag = {}, f"{os.getpid()}-{threading.get_ident()}"
    counts = np.zeros(vocab, dtype=np.int64)
    for name, (order, train_of) in zip(("train", "val"), orders, strict=True):
        file = path / f"{name}-sep{separator_id}.bin"
        tmp = file.with_name(f".{file.name}.{tag}")
        with open(tmp, "wb") as f:
            sizes[name] = copy_documents(path, dtype, order, train_of, separator_id, f,
                                         counts if name == "train" else None)
        os.replace(tmp, file)
    tmp = path / f".train-sep{separator_id}-counts.{tag}.npy"
    np.save(tmp, counts)
    os.replace(tmp, path / f"train-sep{separator_id}-counts.npy")
    _write_json(path / f"streams-sep{separator_id}.json", {"separator_id": separator_id, "tokens": sizes})


STREAM_PART_DOCS = 1 << 18  # documents gathered per part (a few MB of index arrays)
OFFSET_BLOCK = 1 << 17  # offsets read per pread: 1 MiB


def copy_documents(path: Path, dtype: np.dtype, docs: np.ndarray, val_docs: np.ndarray | None, separator_id: int,
                   f: IO[bytes], counts: np.ndarray | None) -> int:
    """Write documents ``docs`` (indices, in this order; training positions when ``val_docs`` is given, mapped by
    :func:`train_documents`) of ``path``'s ``tokens.bin`` to ``f``, each followed by
    ``separator_id``, in chunks of about :data:`STREAM_CHUNK_TOKENS` tokens; add the written tokens to ``counts``.
    Returns the tokens written.

    Documents are read with ``pread``, not through a memory map: the pages a mapping faults in count in the
    process's resident set (and the kernel maps 64 KiB around each fault), so gathering permuted documents through
    one would make most of ``tokens.bin`` resident, growing with the corpus.
    """
    written = 0
    fd = os.open(path / "tokens.bin", os.O_RDONLY)
    offsets_fd = os.open(path / "offsets.bin", os.O_RDONLY)
    try:
        for lo in range(0, len(docs), STREAM_PART_DOCS):
            part = docs[lo : lo + STREAM_PART_DOCS].astype(np.int64)
            if val_docs is not None:
                part = train_documents(part, val_docs)
            starts, lengths = document_spans(offsets_fd, part)
            ends = np.cumsum(lengths + 1)
            cuts = np.searchsorted(ends, np.arange(STREAM_CHUNK_TOKENS, ends[-1], STREAM_CHUNK_TOKENS), side="left")
            for a, b in zip(np.r_[0, cuts + 1], np.r_[cuts + 1, len(part)], strict=True):
                if a >= b:
                    continue
                out = gather(fd, dtype, starts[a:b], lengths[a:b], separator_id)
                out.tofile(f)
                written += len(out)
                if counts is not None:
                    counts += np.bincount(out, minlength=len(counts))[: len(counts)]
    finally:
        os.close(fd)
        os.close(offsets_fd)
    return written


def document_spans(offsets_fd: int, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` in ``tokens.bin`` of documents ``docs`` (any order), read from ``offsets.bin`` one block
    of :data:`OFFSET_BLOCK` entries at a time with ``pread``. A memory map would do, but permuted lookups fault in
    (with the kernel's fault-around) all of ``offsets.bin``, 8 bytes per document of the corpus, as resident memory."""
    order = np.argsort(docs, kind="stable")
    wanted = docs[order]
    starts, ends = np.empty(len(docs), dtype=np.int64), np.empty(len(docs), dtype=np.int64)
    i = 0
    for block in np.unique(wanted // OFFSET_BLOCK):
        first = int(block) * OFFSET_BLOCK
        j = int(np.searchsorted(wanted, first + OFFSET_BLOCK, side="left"))
        entries = int(wanted[j - 1]) - first + 2  # through the end offset of the block's last wanted document
        raw = os.pread(offsets_fd, entries * 8, first * 8)
        table = np.frombuffer(raw, dtype=np.int64)
        at = wanted[i:j] - first
        starts[order[i:j]], ends[order[i:j]] = table[at], table[at + 1]
        i = j
    return starts, ends - starts


def gather(fd: int, dtype: np.dtype, starts: np.ndarray, lengths: np.ndarray, separator_id: int) -> np.ndarray:
    """Tokens ``[starts[i], starts[i] + lengths[i])`` of the open token file ``fd``, each followed by
    ``separator_id``, concatenated."""
    out = np.empty(int(lengths.sum()) + len(lengths), dtype=dtype)
    view = out.data.cast("B")  # the array's own buffer, as bytes
    size, pos = dtype.itemsize, 0
    for start, n in zip(starts.tolist(), lengths.tolist(), strict=True):
        lo, hi = pos * size, (pos + n) * size
        while lo < hi:  # a regular file reads in full; loop in case of a short read
            got = os.preadv(fd, [view[lo:hi]], start * size + lo - pos * size)
            if got <= 0:
                raise DataError(f"{fd}: tokens.bin is shorter than its offsets (truncated?)")
            lo += got
        pos += n + 1
    out[np.cumsum(lengths + 1) - 1] = separator_id
    return out


def _write_json(path: Path, data: Mapping[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
