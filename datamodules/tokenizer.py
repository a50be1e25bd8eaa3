"""Tokenizers: trained with ``tokenizers`` on a corpus, cached by (corpus hash, settings), or loaded from a file.

Every tokenizer famlab trains has the special tokens of ``docs/interfaces.md`` at ids 0-9
(``[PAD] [UNK] [CLS] [SEP] [MASK] [BOS] [EOS] [R] [X] [S]``) and ``num_sentinels`` sentinels
``<extra_id_i>`` at the top of the vocabulary, ``<extra_id_0>`` last (as T5). Encoding never adds
special tokens by itself: the objectives' collators build each family's format.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from famlab.datamodules.errors import DataError
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIAL_TOKENS = {
    "pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]",
    "bos": "[BOS]", "eos": "[EOS]", "r": "[R]", "x": "[X]", "s": "[S]",
}  # fmt: skip
KINDS = ("bpe", "wordpiece", "unigram")
TOKENIZER_FILE = "tokenizer.json"  # a trained tokenizer's file, in the cache, a prepared dataset and a run directory
# Bytes of documents a tokenizer trains on (``data.tokenizer.sample_bytes``): BPE / WordPiece / Unigram statistics
# settle long before a multi-GB corpus is read, while training time and memory grow with the sample.
DEFAULT_SAMPLE_BYTES = 200_000_000


class TrainingDocuments(Protocol):
    """What a tokenizer trains on: a ``Corpus`` or a ``PreparedDataset`` (its ``train`` documents and content
    ``hash``)."""

    @property
    def train(self) -> Sequence[str]: ...

    @property
    def hash(self) -> str: ...


class DocumentSample:
    """A seeded sample of a stream of documents of at most ``budget`` UTF-8 bytes, in bounded memory.

    Priority sampling: each document draws a uniform key from ``numpy.random.default_rng(seed)``, in stream order,
    and the sample keeps the documents with the smallest keys while their bytes fit the budget (a max-heap on the
    key; a document whose key exceeds the largest evicted one is skipped without being kept). When the whole stream
    fits, the sample is the whole stream. :meth:`documents` returns the sample in stream order.
    """

    def __init__(self, budget: int, seed: int) -> None:
        self.budget, self.rng = budget, np.random.default_rng(seed)
        self.heap: list[tuple[float, int, str]] = []  # (-key, index, text)
        self.bytes, self.threshold, self.seen = 0, 2.0, 0
        self.keys, self.key_pos = np.zeros(0), 0

    def add(self, doc: str) -> None:
        """Offer the next document of the stream."""
        if self.key_pos == len(self.keys):
            self.keys, self.key_pos = self.rng.random(65536), 0
        key = float(self.keys[self.key_pos])
        self.key_pos += 1
        index, self.seen = self.seen, self.seen + 1
        if key >= self.threshold:
            return
        heapq.heappush(self.heap, (-key, index, doc))
        self.bytes += len(doc.encode("utf-8"))
        while self.bytes > self.budget:
            neg, _, dropped = heapq.heappop(self.heap)
            self.bytes -= len(dropped.encode("utf-8"))
            self.threshold = min(self.threshold, -neg)

    def documents(self, keep: Iterable[bool] | None = None) -> list[str]:
        """The sampled documents in stream order; ``keep[i]`` (indexable by stream position) drops document i."""
        chosen = sorted((index, doc) for _, index, doc in self.heap)
        if keep is not None:
            chosen = [(i, d) for i, d in chosen if keep[i]]  # type: ignore[index]
        return [doc for _, doc in chosen]

    def indices(self) -> list[int]:
        """Stream positions of the sampled documents, in order."""
        return sorted(index for _, index, _ in self.heap)


def sentinel_token(i: int) -> str:
    """The name of sentinel ``i`` (T5's ``<extra_id_i>``)."""
    return f"<extra_id_{i}>"


@dataclass
class TokenizerBundle:
    """A tokenizer with the ids every objective needs.

    Attributes:
        tokenizer: the ``tokenizers.Tokenizer``.
        path: its ``tokenizer.json``.
        hash: sha256 of ``tokenizer.json``.
        vocab_size: real vocabulary size, added tokens included.
        special_ids: ids of ``pad unk cls sep mask bos eos r x s``.
        sentinel_ids: ``sentinel_ids[i]`` is the id of ``<extra_id_i>``.
    """

    tokenizer: Tokenizer
    path: Path
    hash: str
    vocab_size: int
    special_ids: dict[str, int]
    sentinel_ids: list[int]


def get_tokenizer(
    corpus: TrainingDocuments | None,
    *,
    kind: str = "bpe",
    vocab_size: int = 8192,
    num_sentinels: int = 100,
    path: str | Path | None = None,
    cache_dir: str | Path,
    sample_bytes: int = DEFAULT_SAMPLE_BYTES,
    seed: int = 0,
) -> TokenizerBundle:
    """Train (once per corpus and settings, then reuse from ``cache_dir``) or load a tokenizer.

    Args:
        corpus: the corpus to train on (its training split); unused when ``path`` is given.
        kind: ``bpe`` (byte-level, GPT-2), ``wordpiece`` (lower-cased, BERT) or ``unigram`` (T5).
        vocab_size: requested size including special tokens and sentinels (Unigram/BPE may stop
            short on a small corpus; ``TokenizerBundle.vocab_size`` is the real size).
        num_sentinels: number of ``<extra_id_i>`` tokens.
        path: an existing ``tokenizer.json`` to load instead of training; it must contain every
            special token and the requested sentinels.
        cache_dir: where trained tokenizers are cached, under ``tokenizers/``.
        sample_bytes: train on a seeded sample of at most this many bytes of training documents
            (:class:`DocumentSample`; all of them when they fit, as a prepared dataset does).
        seed: seeds the sample.

    Raises:
        DataError: unknown kind, too small a vocabulary, unreadable ``path`` or missing special tokens.
    """
    if path is not None:
        return load_tokenizer(path, num_sentinels=num_sentinels)
    if corpus is None:
        raise DataError(f"tokenizer: need a corpus to train on or a path to a {TOKENIZER_FILE}")
    check_settings(kind, vocab_size, num_sentinels)
    file = cache_file(corpus, kind=kind, vocab_size=vocab_size, num_sentinels=num_sentinels, cache_dir=cache_dir,
                      sample_bytes=sample_bytes, seed=seed)
    if not file.exists():
        sample = DocumentSample(sample_bytes, seed)
        for doc in corpus.train:
            sample.add(doc)
        docs = sample.documents()
        tok = train_tokenizer(docs, kind=kind, vocab_size=vocab_size, num_sentinels=num_sentinels)
        file.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename, so a concurrent reader (another rank or run) never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=file.parent, suffix=".tmp")
        os.close(fd)
        tok.save(tmp)
        os.replace(tmp, file)
    return load_tokenizer(file, num_sentinels=num_sentinels)


def cache_file(corpus: TrainingDocuments, *, kind: str, vocab_size: int, num_sentinels: int, cache_dir: str | Path,
               sample_bytes: int = DEFAULT_SAMPLE_BYTES, seed: int = 0) -> Path:
    """Where :func:`get_tokenizer` caches the tokenizer trained on ``corpus`` with these settings (a sample that
    covers the whole training split does not depend on ``sample_bytes`` or ``seed``, so it keeps the short key)."""
    key = f"{kind}-v{vocab_size}-s{num_sentinels}-{corpus.hash[:16]}"
    if sum(len(doc) for doc in corpus.train) > sample_bytes // 4:  # may not fit (chars are 1-4 bytes): a sample
        key += f"-b{sample_bytes}-r{seed}"
    return Path(cache_dir) / "tokenizers" / key / TOKENIZER_FILE


def check_settings(kind: str, vocab_size: int, num_sentinels: int) -> None:
    """Refuse an unknown ``kind``, a negative ``num_sentinels`` or a ``vocab_size`` below :func:`min_vocab_size`.

    Raises:
        DataError: naming the setting.
    """
    if kind not in KINDS:
        raise DataError(f"tokenizer kind '{kind}' is not one of {', '.join(KINDS)}")
    minimum = min_vocab_size(kind, num_sentinels)
    if vocab_size < minimum:
        raise DataError(f"vocab_size={vocab_size} too small for {kind} with {num_sentinels} sentinels (min {minimum})")
    if num_sentinels < 0:
        raise DataError(f"num_sentinels={num_sentinels} must be >= 0")


def min_vocab_size(kind: str, num_sentinels: int) -> int:
    """Smallest ``vocab_size`` a ``kind`` tokenizer can be trained with: special tokens, sentinels and a base
    alphabet (byte-level BPE needs its 256 bytes)."""
    return len(SPECIAL_TOKENS) + num_sentinels + (256 if kind == "bpe" else 64)


def train_tokenizer(docs: list[str], *, kind: str, vocab_size: int, num_sentinels: int) -> Tokenizer:
    """Train a ``kind`` tokenizer: specials at ids 0-9, then the learned vocabulary, then sentinels."""
    specials = list(SPECIAL_TOKENS.values())
    learned = vocab_size - num_sentinels
    trainer: trainers.Trainer
    if kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=learned, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    elif kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=SPECIAL_TOKENS["unk"]))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(vocab_size=learned, special_tokens=specials, show_progress=False)
    else:
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=learned, special_tokens=specials, unk_token=SPECIAL_TOKENS["unk"], show_progress=False
        )
    try:
        tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception
        # Unigram keeps every character of the corpus as a piece, so a corpus with many distinct characters (CJK,
        # emoji, mixed scripts) needs more than min_vocab_size's base alphabet: say how much, in one line.
        if kind != "unigram" or "not large enough" not in str(e):
            raise
        least = len(unigram_characters(tok, docs)) + num_sentinels
        raise DataError(f"vocab_size={vocab_size} too small for a unigram tokenizer on this corpus: its "
                        f"{least - num_sentinels} distinct characters and {num_sentinels} sentinels need "
                        f"vocab_size >= {least}; raise data.tokenizer.vocab_size") from e
    # Added tokens take the next free ids: adding <extra_id_{n-1}> ... <extra_id_0> puts <extra_id_0> on top.
    tok.add_special_tokens([sentinel_token(i) for i in reversed(range(num_sentinels))])
    return tok


def unigram_characters(tok: Tokenizer, docs: list[str]) -> set[str]:
    """The characters a unigram trainer must keep as pieces: those of ``docs`` after ``tok``'s normalizer and
    pre-tokenizer (the word-start marker included)."""
    chars: set[str] = set()
    for doc in docs:
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(doc)):
            chars.update(word)
    return chars


def load_tokenizer(path: str | Path, *, num_sentinels: int = 100) -> TokenizerBundle:
    """Load a ``tokenizer.json`` and check that it has every special token and ``num_sentinels`` sentinels."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such tokenizer file")
    data = path.read_bytes()
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception on bad JSON
        raise DataError(f"{path}: not a tokenizers {TOKENIZER_FILE} ({str(e).splitlines()[0][:120]})") from e
    special = {key: tok.token_to_id(t) for key, t in SPECIAL_TOKENS.items()}
    sentinels = [tok.token_to_id(sentinel_token(i)) for i in range(num_sentinels)]
    missing = [SPECIAL_TOKENS[key] for key, i in special.items() if i is None]
    absent = [i for i, sentinel in enumerate(sentinels) if sentinel is None]
    if absent:
        missing.append(f"{len(absent)} sentinels ({sentinel_token(absent[0])} ... {sentinel_token(absent[-1])})")
    if missing:
        raise DataError(f"{path}: tokenizer lacks special tokens: {', '.join(missing)}")
    return TokenizerBundle(
        tokenizer=tok,
        path=path,
        hash=hashlib.sha256(data).hexdigest(),
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        special_ids={key: i for key, i in special.items() if i is not None},  # all of them: checked above
        sentinel_ids=[i for i in sentinels if i is not None],
    )
