"""The streaming prepare: the same token streams as the in-memory path, bounded memory, caching, interruption."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from famlab.datamodules import DataError, get_tokenizer, load_corpus, sources, write_token_file
from famlab.datamodules import prepare as prep
from famlab.datamodules.prepare import PrepareSettings, prepare_corpus
from famlab.datamodules.tokenizer import DocumentSample

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon "
         "phi chi psi omega river stone cloud apple orange quiet loud swift slow bright").split()
SETTINGS = PrepareSettings(kind="bpe", vocab_size=400, num_sentinels=4, val_fraction=0.1, seed=3)


def write_corpus(path: Path, n_bytes: int, *, seed: int = 0, blank_lines: bool = True) -> Path:
    """Generated text: documents of 1-6 lines of random words, separated by blank lines (or one per line)."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        written = 0
        while written < n_bytes:
            lines = [" ".join(rng.choices(WORDS, k=rng.randint(3, 14))) for _ in range(rng.randint(1, 6))]
            doc = ("\n".join(lines) + "\n\n") if blank_lines else " ".join(lines) + "\n"
            f.write(doc)
            written += len(doc)
    return path


def old_streams(spec: str, settings: PrepareSettings, tokenizer: Path, tmp: Path) -> tuple[np.ndarray, np.ndarray]:
    """The in-memory path: load_corpus + write_token_file (train and val, each in its seeded order)."""
    corpus = load_corpus(spec, val_fraction=settings.val_fraction, seed=settings.seed)
    bundle = get_tokenizer(corpus, path=tokenizer, num_sentinels=settings.num_sentinels, cache_dir=tmp)
    eos = bundle.special_ids["eos"]
    out = []
    for split, docs in (("train", corpus.train), ("val", corpus.val)):
        write_token_file(docs, bundle, tmp / f"old-{split}.bin", separator_id=eos, seed=settings.seed)
        out.append(np.fromfile(tmp / f"old-{split}.bin", dtype=np.uint16))
    return out[0], out[1]


def new_streams(prepared: prep.PreparedDataset) -> tuple[np.ndarray, np.ndarray]:
    eos = prepared.bundle().special_ids["eos"]
    train, val = prepared.stream_files(eos)
    return np.fromfile(train, dtype=np.uint16), np.fromfile(val, dtype=np.uint16)


@pytest.mark.parametrize("blank_lines", [True, False])
def test_prepared_streams_equal_the_in_memory_path(tmp_path, blank_lines):
    """Same held-out documents, same seeded order, same tokens; the tokenizer trained on the training documents."""
    f = write_corpus(tmp_path / "c.txt", 60_000, blank_lines=blank_lines)
    prepared = prepare_corpus(f, SETTINGS, cache_dir=tmp_path / "cache")
    old_train, old_val = old_streams(str(f), SETTINGS, prepared.path / "tokenizer.json", tmp_path)
    train, val = new_streams(prepared)
    assert np.array_equal(train, old_train) and np.array_equal(val, old_val) and len(val) > 100
    corpus = load_corpus(str(f), val_fraction=SETTINGS.val_fraction, seed=SETTINGS.seed)
    assert list(prepared.val) == corpus.val and len(prepared.val) == len(corpus.val)
    sample = DocumentSample(SETTINGS.sample_bytes, SETTINGS.seed)
    for doc in corpus.train:
        sample.add(doc)
    assert sample.documents() == corpus.train  # the tokenizer's sample covers the corpus: the old path's input
    m = prepared.manifest
    assert m["tokenizer"]["sample_bytes"] == sum(len(d.encode()) for d in corpus.train)
    assert m["split"]["val_documents"] == len(corpus.val) and m["split"]["train_documents"] == len(corpus.train)
    counts = prepared.train_counts(prepared.bundle().special_ids["eos"], prepared.bundle().vocab_size)
    assert np.array_equal(counts, np.bincount(old_train, minlength=len(counts)))


def test_a_directory_of_formats_equals_the_in_memory_path(tmp_path):
    """.txt, .jsonl, .gz and .parquet files of one directory, in sorted order, as load_corpus reads them."""
    import gzip

    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    write_corpus(d / "a.txt", 8_000, seed=1)
    rows = [{"text": " ".join(random.Random(i).choices(WORDS, k=12))} for i in range(150)]
    (d / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with gzip.open(d / "sub" / "c.txt.gz", "wt") as g:
        g.write(write_corpus(tmp_path / "c.txt", 8_000, seed=2).read_text())
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.table({"text": [r["text"] + " parquet" for r in rows]}), d / "sub" / "d.parquet")
    prepared = prepare_corpus(d, SETTINGS, cache_dir=tmp_path / "cache")
    old_train, old_val = old_streams(str(d), SETTINGS, prepared.path / "tokenizer.json", tmp_path)
    train, val = new_streams(prepared)
    assert np.array_equal(train, old_train) and np.array_equal(val, old_val)
    texts = load_corpus(str(d), val_fraction=0.0).train
    assert any(t.endswith(" parquet") for t in texts) and texts[-1].endswith(" parquet")


@pytest.mark.slow
def test_bundled_corpus_streams_and_tokenizer_equal_the_in_memory_path(tmp_path):
    """The bundled default: the same tokenizer trained, the same token streams, the same validation texts."""
    settings = PrepareSettings(kind="bpe", vocab_size=2048, num_sentinels=100, val_fraction=0.05, seed=0)
    prepared = prepare_corpus("wordnet", settings, cache_dir=tmp_path / "cache")
    corpus = load_corpus("wordnet")
    trained = get_tokenizer(corpus, kind="bpe", vocab_size=2048, num_sentinels=100, cache_dir=tmp_path)
    assert trained.hash == prepared.bundle().hash
    old_train, old_val = old_streams("wordnet", settings, prepared.path / "tokenizer.json", tmp_path)
    train, val = new_streams(prepared)
    assert np.array_equal(train, old_train) and np.array_equal(val, old_val)
    assert prepared.val[:100] == corpus.val[:100]


def test_a_cached_prepare_reads_no_text_and_notices_a_changed_source(tmp_path, monkeypatch):
    """The second prepare finds the directory by stat alone; a same-size, same-mtime edit is caught by the sampled
    blocks' hash and prepared again."""
    f = write_corpus(tmp_path / "c.txt", 20_000)
    first = prepare_corpus(f, SETTINGS, cache_dir=tmp_path / "cache")

    def no_read(*args, **kwargs):
        raise AssertionError("the cached prepare read the corpus")

    with monkeypatch.context() as m:
        m.setattr(prep, "path_documents", no_read)
        started = time.perf_counter()
        again = prepare_corpus(str(f), SETTINGS, cache_dir=tmp_path / "cache")
        assert time.perf_counter() - started < 1.0
    assert again.path == first.path
    stat = f.stat()
    data = f.read_bytes()
    f.write_bytes(data.replace(b"alpha", b"ALPHA", 1))  # same size
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = prepare_corpus(f, SETTINGS, cache_dir=tmp_path / "cache")
    assert changed.path == first.path and changed.hash != first.hash


def test_a_given_tokenizer_finds_the_dataset_prepared_with_it(tmp_path, monkeypatch):
    """A comparison hands every arm the trained tokenizer by path: that finds the same prepared directory."""
    f = write_corpus(tmp_path / "c.txt", 20_000)
    first = prepare_corpus(f, SETTINGS, cache_dir=tmp_path / "cache")
    copy = tmp_path / "tokenizer.json"
    copy.write_bytes((first.path / "tokenizer.json").read_bytes())
    monkeypatch.setattr(prep, "path_documents", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))
    given = PrepareSettings(**{**SETTINGS.__dict__, "tokenizer_path": str(copy)})
    assert prepare_corpus(f, given, cache_dir=tmp_path / "cache").path.resolve() == first.path.resolve()


def test_over_long_lines_are_cut_and_documented(tmp_path, monkeypatch):
    """A file without a newline is not one document in memory: it comes in MAX_DOC_BYTES pieces."""
    monkeypatch.setattr(sources, "MAX_DOC_BYTES", 4096)
    monkeypatch.setattr(sources, "READ_BLOCK", 1024)
    f = tmp_path / "one-line.txt"
    f.write_text(" ".join(random.Random(0).choices(WORDS, k=6000)) + " é" * 3000)  # no newline; 2-byte chars
    docs = load_corpus(str(f), val_fraction=0.0).train
    assert len(docs) > 10 and all(len(d.encode()) <= 4096 for d in docs)
    assert "".join(docs).replace(" ", "") == f.read_text().replace(" ", "")
    prepared = prepare_corpus(f, SETTINGS, cache_dir=tmp_path / "cache")
    assert prepared.manifest["cut_documents"] == len(docs) - 1
    assert prepared.manifest["split"]["documents"] == len(docs)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "directory has no .txt or .jsonl files"),
        (b"", "empty corpus"),
        (b"\xff\xfe\x00\x01\n\x89PNG\n", "no UTF-8 text (2 of 2 lines undecodable"),
        (b'{"text": "ok"}\nnot json\n', "line 2: not JSON"),
    ],
)
def test_bad_sources_fail_in_one_line_and_leave_nothing(tmp_path, content, fragment):
    """Each bad source is one DataError naming the file; no directory (complete or temporary) is left."""
    if content is None:
        spec = tmp_path / "empty"
        spec.mkdir()
    else:
        spec = tmp_path / ("bad.jsonl" if content.startswith(b"{") else "bad.txt")
        spec.write_bytes(content)
    with pytest.raises(DataError) as err:
        prepare_corpus(spec, SETTINGS, cache_dir=tmp_path / "cache")
    assert fragment in str(err.value) and "\n" not in str(err.value)
    assert not any((tmp_path / "cache" / "prepared").glob("*")) if (tmp_path / "cache" / "prepared").exists() else True


def test_undecodable_lines_are_counted_in_the_manifest(tmp_path):
    f = tmp_path / "mixed.txt"
    f.write_bytes(b"good line one\n\xff\xfe bad\nanother good line\n")
    with pytest.warns(UserWarning, match=r"mixed.txt: skipped 1 of 3 lines .*line 2, byte offset 14"):
        prepared = prepare_corpus(f, PrepareSettings(kind="wordpiece", vocab_size=200, num_sentinels=2,
                                                     val_fraction=0.0), cache_dir=tmp_path / "cache")
    assert prepared.manifest["skipped_lines"] == 1 and prepared.manifest["split"]["documents"] == 2


MEMORY_SCRIPT = textwrap.dedent("""
    import resource, sys
    from famlab.datamodules import prepare as prep
    prep.ENCODE_BATCH_CHARS = 1 << 18
    s = prep.PrepareSettings(kind="bpe", vocab_size=400, num_sentinels=4, sample_bytes=500_000)
    prep.prepare_corpus(sys.argv[1], s, cache_dir=sys.argv[2])
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""")


def _peak_kib(corpus: Path, cache: Path) -> int:
    out = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(corpus), str(cache)], capture_output=True,
                         text=True, timeout=600, check=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "true"})
    return int(out.stdout.split()[-1])


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_corpus(tmp_path):
    """Preparing 4x the text needs no more memory: the growth is far below the added text (the in-memory path
    holds every document, and its token lists)."""
    n = 3_000_000
    small = _peak_kib(write_corpus(tmp_path / "small.txt", n), tmp_path / "c1")
    large = _peak_kib(write_corpus(tmp_path / "large.txt", 4 * n, seed=1), tmp_path / "c2")
    assert large / small < 1.25, (small, large)
    assert (large - small) * 1024 < 0.5 * 3 * n, (small, large)


KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    from famlab.datamodules import prepare as prep, sources
    prep.ENCODE_BATCH_CHARS = 1 << 14
    prep.STREAM_CHUNK_TOKENS = 1 << 12
    sources.READ_BLOCK = 4096  # ~100 progress calls per pass, each slowed down: the prepare takes seconds
    s = prep.PrepareSettings(tokenizer_path=sys.argv[3], num_sentinels=4, val_fraction=0.1, seed=3)
    print("go", flush=True)
    prep.prepare_corpus(sys.argv[1], s, cache_dir=sys.argv[2], progress=lambda *a: time.sleep(0.03))
""")


def test_a_prepare_killed_at_any_point_restarts_to_the_same_result(tmp_path):
    """SIGKILL at random points: never a directory that looks complete unless it is; the next prepare removes the
    leftovers and gives what an uninterrupted prepare gives."""
    f = write_corpus(tmp_path / "c.txt", 200_000)
    reference = prepare_corpus(f, SETTINGS, cache_dir=tmp_path / "ref")
    tokenizer = reference.path / "tokenizer.json"
    given = PrepareSettings(tokenizer_path=str(tokenizer), num_sentinels=4, val_fraction=0.1, seed=3)
    cache = tmp_path / "cache"
    target = prep.prepared_location(str(f), given, cache)
    rng, interrupted = random.Random(0), 0
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(f), str(cache), str(tokenizer)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "go"
        time.sleep(rng.uniform(0.0, 2.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        interrupted += any(cache.glob("prepared/.*"))
        if target.exists():
            assert (target / "manifest.json").is_file()  # renamed into place only when complete
            break
    assert interrupted  # at least one kill landed mid-prepare
    result = prepare_corpus(f, given, cache_dir=cache)
    assert [p.name for p in cache.glob("prepared/.*")] == []  # the killed prepares' temporary directories are gone
    assert result.hash == reference.hash
    for a, b in zip(new_streams(result), new_streams(reference), strict=True):
        assert np.array_equal(a, b)


def test_document_spans_reads_any_order_of_documents_block_by_block(tmp_path, monkeypatch):
    """The pread lookup of document spans equals indexing the offsets table, for permuted, repeated and edge
    documents, with blocks smaller than the table."""
    monkeypatch.setattr(prep, "OFFSET_BLOCK", 7)
    offsets = np.cumsum(np.r_[0, np.random.default_rng(0).integers(0, 9, 100)]).astype(np.int64)
    (tmp_path / "offsets.bin").write_bytes(offsets.tobytes())
    docs = np.r_[np.random.default_rng(1).permutation(100), [0, 99, 6, 7, 6]].astype(np.int64)
    fd = os.open(tmp_path / "offsets.bin", os.O_RDONLY)
    try:
        starts, lengths = prep.document_spans(fd, docs)
    finally:
        os.close(fd)
    assert np.array_equal(starts, offsets[docs]) and np.array_equal(lengths, offsets[docs + 1] - offsets[docs])
