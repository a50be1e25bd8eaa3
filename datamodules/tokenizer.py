"""Tokenizers: trained with ``tokenizers`` on a corpus, cached by (corpus hash, settings), or loaded from a file.

Every tokenizer famlab trains has the special tokens of ``docs/interfaces.md`` at ids 0-9
(``[PAD] [UNK] [CLS] [SEP] [MASK] [BOS] [EOS] [R] [X] [S]``) and ``num_sentinels`` sentinels
``<extra_id_i>`` at the top of the vocabulary, ``<extra_id_0>`` last (as T5). Encoding never adds
special tokens by itself: the objectives' collators build each family's format.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from famlab.datamodules.corpus import Corpus
from famlab.datamodules.errors import DataError
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIAL_TOKENS = {
    "pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]",
    "bos": "[BOS]", "eos": "[EOS]", "r": "[R]", "x": "[X]", "s": "[S]",
}  # fmt: skip
KINDS = ("bpe", "wordpiece", "unigram")


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
    corpus: Corpus | None,
    *,
    kind: str = "bpe",
    vocab_size: int = 8192,
    num_sentinels: int = 100,
    path: str | Path | None = None,
    cache_dir: str | Path,
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

    Raises:
        DataError: unknown kind, too small a vocabulary, unreadable ``path`` or missing special tokens.
    """
    if path is not None:
        return load_tokenizer(path, num_sentinels=num_sentinels)
    if corpus is None:
        raise DataError("tokenizer: need a corpus to train on or a path to a tokenizer.json")
    if kind not in KINDS:
        raise DataError(f"tokenizer kind '{kind}' is not one of {', '.join(KINDS)}")
    minimum = min_vocab_size(kind, num_sentinels)
    if vocab_size < minimum:
        raise DataError(f"vocab_size={vocab_size} too small for {kind} with {num_sentinels} sentinels (min {minimum})")
    if num_sentinels < 0:
        raise DataError(f"num_sentinels={num_sentinels} must be >= 0")
    file = cache_file(corpus, kind=kind, vocab_size=vocab_size, num_sentinels=num_sentinels, cache_dir=cache_dir)
    if not file.exists():
        tok = train_tokenizer(corpus.train, kind=kind, vocab_size=vocab_size, num_sentinels=num_sentinels)
        file.parent.mkdir(parents=True, exist_ok=True)
        # Write then rename, so a concurrent reader (another rank or run) never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=file.parent, suffix=".tmp")
        os.close(fd)
        tok.save(tmp)
        os.replace(tmp, file)
    return load_tokenizer(file, num_sentinels=num_sentinels)


def cache_file(corpus: Corpus, *, kind: str, vocab_size: int, num_sentinels: int, cache_dir: str | Path) -> Path:
    """Where :func:`get_tokenizer` caches the tokenizer trained on ``corpus`` with these settings."""
    key = f"{kind}-v{vocab_size}-s{num_sentinels}-{corpus.hash[:16]}"
    return Path(cache_dir) / "tokenizers" / key / "tokenizer.json"


def min_vocab_size(kind: str, num_sentinels: int) -> int:
    """Smallest ``vocab_size`` a ``kind`` tokenizer can be trained with: special tokens, sentinels and a base
    alphabet (byte-level BPE needs its 256 bytes)."""
    return len(SPECIAL_TOKENS) + num_sentinels + (256 if kind == "bpe" else 64)


def train_tokenizer(docs: list[str], *, kind: str, vocab_size: int, num_sentinels: int) -> Tokenizer:
    """Train a ``kind`` tokenizer: specials at ids 0-9, then the learned vocabulary, then sentinels."""
    specials = list(SPECIAL_TOKENS.values())
    learned = vocab_size - num_sentinels
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
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    # Added tokens take the next free ids: adding <extra_id_{n-1}> ... <extra_id_0> puts <extra_id_0> on top.
    tok.add_special_tokens([sentinel_token(i) for i in reversed(range(num_sentinels))])
    return tok


def load_tokenizer(path: str | Path, *, num_sentinels: int = 100) -> TokenizerBundle:
    """Load a ``tokenizer.json`` and check that it has every special token and ``num_sentinels`` sentinels."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such tokenizer file")
    data = path.read_bytes()
    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception on bad JSON
        raise DataError(f"{path}: not a tokenizers tokenizer.json ({str(e).splitlines()[0][:120]})") from e
    missing = [t for t in SPECIAL_TOKENS.values() if tok.token_to_id(t) is None]
    absent = [i for i in range(num_sentinels) if tok.token_to_id(sentinel_token(i)) is None]
    if absent:
        missing.append(f"{len(absent)} sentinels ({sentinel_token(absent[0])} ... {sentinel_token(absent[-1])})")
    if missing:
        raise DataError(f"{path}: tokenizer lacks special tokens: {', '.join(missing)}")
    return TokenizerBundle(
        tokenizer=tok,
        path=path,
        hash=hashlib.sha256(data).hexdigest(),
        vocab_size=tok.get_vocab_size(with_added_tokens=True),
        special_ids={key: tok.token_to_id(t) for key, t in SPECIAL_TOKENS.items()},
        sentinel_ids=[tok.token_to_id(sentinel_token(i)) for i in range(num_sentinels)],
    )
