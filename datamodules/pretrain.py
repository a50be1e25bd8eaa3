"""Packed pretraining data: memory-mapped token files (a prepared dataset's streams, or token files written from a
``Corpus`` in memory), cut into fixed-length blocks."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from famlab.datamodules.corpus import Corpus
from famlab.datamodules.errors import DataError
from famlab.datamodules.prepare import PreparedDataset, token_dtype
from famlab.datamodules.sampler import PositionTrackingLoader, ResumableSampler, SamplerStateMixin, dist_rank_world
from famlab.datamodules.tokenizer import TokenizerBundle
from torch.utils.data import DataLoader, Dataset

ENCODE_CHUNK = 8192  # documents per encode_batch call: bounds memory, keeps Rust-side parallelism


class SeededCollate:
    """Run a (random) collator under an RNG seeded by (seed, batch content), leaving the global RNG untouched.

    Validation batches are corrupted by the objective's collator (masking, span noise). Drawing that noise
    from the training RNG would make every evaluation see different corruption — validation loss and the
    unigram floor would wander between checks, and a resumed run would diverge from an uninterrupted one.
    Seeding from the batch content gives the same corruption for the same blocks at every evaluation, in
    every run, on every rank, with or without workers.
    """

    def __init__(self, collate_fn: Callable[[list[torch.Tensor]], dict[str, torch.Tensor]], seed: int) -> None:
        self.collate_fn, self.seed = collate_fn, seed

    def __call__(self, samples: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        digest = hashlib.sha256(samples[0].numpy().tobytes()).digest()
        key = (int.from_bytes(digest[:8], "little") + self.seed) % (2**63)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(key)
            return self.collate_fn(samples)


def write_token_file(docs: list[str], bundle: TokenizerBundle, path: Path, *, separator_id: int, seed: int) -> int:
    """Tokenize ``docs`` in a seeded order, each followed by ``separator_id``, into a flat binary file.

    Returns:
        The number of tokens written.
    """
    order = np.random.default_rng(seed).permutation(len(docs))
    dtype = token_dtype(bundle.vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    total = 0
    with open(tmp, "wb") as f:
        for lo in range(0, len(order), ENCODE_CHUNK):
            chunk = [docs[i] for i in order[lo : lo + ENCODE_CHUNK]]
            encodings = bundle.tokenizer.encode_batch(chunk, add_special_tokens=False)
            ids = [tok for enc in encodings for tok in (*enc.ids, separator_id)]
            arr = np.asarray(ids, dtype=dtype)
            arr.tofile(f)
            total += arr.size
    os.replace(tmp, path)  # atomic: another rank never reads half a file
    return total


class BlockDataset(Dataset):
    """Consecutive ``block_len`` slices of a token stream; the remainder is dropped.

    Args:
        tokens: 1-D token ids (a memory map).
        block_len: tokens per sample.
        num_blocks: use only the first ``num_blocks`` blocks (default: all).
    """

    def __init__(self, tokens: np.ndarray, block_len: int, num_blocks: int | None = None) -> None:
        self.tokens = tokens
        self.block_len = block_len
        full = len(tokens) // block_len
        self.num_blocks = full if num_blocks is None else min(num_blocks, full)

    def __len__(self) -> int:
        return self.num_blocks

    def __getitem__(self, index: int) -> torch.Tensor:
        lo = index * self.block_len
        return torch.from_numpy(np.asarray(self.tokens[lo : lo + self.block_len], dtype=np.int64))  # (block_len,)


class PretrainDataModule(SamplerStateMixin[torch.Tensor], pl.LightningDataModule):
    """Packed blocks of a corpus for any pretraining objective.

    With a :class:`~famlab.datamodules.prepare.PreparedDataset` the data module memory-maps its streams for
    ``separator_id`` (written once from its ``tokens.bin`` when that separator is new to it) and reads the unigram
    counts stored with them: nothing is tokenized and no raw text is read. With a ``Corpus`` in memory it tokenizes
    train and val into ``cache_dir/tokens/<key>/`` (the same streams).

    Args:
        corpus: the prepared dataset (``prepare_corpus``), or a corpus in memory (``load_corpus``).
        bundle: the tokenizer (``get_tokenizer``; a prepared dataset's own, ``PreparedDataset.bundle()``).
        block_len: tokens per sample (the objective's raw block length).
        batch_size: samples per batch and rank.
        collate_fn: the objective's collator, ``list[Tensor(block_len)] -> dict[str, Tensor]``.
        separator_id: token appended after every document (e.g. ``[EOS]``).
        cache_dir: a ``Corpus``'s token files go to ``cache_dir/tokens/<key>/``.
        seed: order of documents in the token file (a prepared dataset's own seed) and of the block shuffle.
        shuffle: permute training blocks per epoch (a pure function of (seed, epoch)).
        num_workers: DataLoader workers.
        val_batches: use only the first ``val_batches * batch_size`` validation blocks (all if None).
    """

    def __init__(
        self,
        corpus: Corpus | PreparedDataset,
        bundle: TokenizerBundle,
        *,
        block_len: int,
        batch_size: int,
        collate_fn: Callable[[list[torch.Tensor]], dict[str, torch.Tensor]],
        separator_id: int,
        cache_dir: str | Path,
        seed: int = 0,
        shuffle: bool = False,
        num_workers: int = 0,
        val_batches: int | None = None,
    ) -> None:
        super().__init__()
        if block_len < 1 or batch_size < 1:
            raise DataError(f"block_len={block_len} and batch_size={batch_size} must be positive")
        self.corpus, self.bundle = corpus, bundle
        self.block_len, self.batch_size = block_len, batch_size
        self.collate_fn, self.separator_id = collate_fn, separator_id
        self.seed, self.shuffle = seed, shuffle
        self.num_workers, self.val_batches = num_workers, val_batches
        self.prepared = corpus if isinstance(corpus, PreparedDataset) else None
        if self.prepared is not None:
            if bundle.hash != self.prepared.manifest["tokenizer"]["hash"]:
                raise DataError(f"{self.prepared.path}: was prepared with another tokenizer than {bundle.path}")
            self.token_dir = self.prepared.path
        else:
            key = hashlib.sha256(f"{corpus.hash}|{bundle.hash}|{separator_id}|{seed}".encode()).hexdigest()[:20]
            self.token_dir = Path(cache_dir) / "tokens" / key
        self.train_tokens: np.ndarray | None = None
        self.val_tokens: np.ndarray | None = None
        self._train_sampler: ResumableSampler | None = None
        self._pending_state: dict[str, int] | None = None  # see SamplerStateMixin
        self._counts: np.ndarray | None = None

    # -- files -----------------------------------------------------------------------------------
    @property
    def ready_file(self) -> Path:
        """Written last by :meth:`prepare_data`: its presence means the token files are complete."""
        if self.prepared is not None:
            return self.prepared.ready_file(self.separator_id)
        return self.token_dir / "meta.json"

    def token_files(self) -> tuple[Path, Path]:
        """``(train, val)`` token files."""
        if self.prepared is not None:
            return self.prepared.stream_files(self.separator_id)
        return self.token_dir / "train.bin", self.token_dir / "val.bin"

    def prepare_data(self) -> None:
        """Write the token files once (skipped when they exist): a prepared dataset's streams for this separator,
        or a ``Corpus`` tokenized."""
        if isinstance(self.corpus, PreparedDataset):  # self.prepared
            self.corpus.ensure_streams(self.separator_id)
            return
        meta = self.token_dir / "meta.json"
        if meta.exists():
            return
        sizes = {}
        for split, docs in (("train", self.corpus.train), ("val", self.corpus.val)):
            sizes[split] = write_token_file(
                docs, self.bundle, self.token_dir / f"{split}.bin", separator_id=self.separator_id, seed=self.seed
            )
        info = {"dtype": token_dtype(self.bundle.vocab_size).name, "corpus": self.corpus.hash,
                "tokenizer": self.bundle.hash, "separator_id": self.separator_id, "seed": self.seed, "tokens": sizes}
        tmp = meta.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(info, indent=1))
        os.replace(tmp, meta)  # written last: its presence means both token files are complete

    def setup(self, stage: str | None = None) -> None:
        """Open the token files as memory maps and check there is enough data for one batch."""
        self.token_streams()

    def token_streams(self) -> tuple[np.ndarray, np.ndarray]:
        """The ``(train, val)`` token streams, memory maps opened (and checked) on the first call."""
        if self.train_tokens is not None and self.val_tokens is not None:
            return self.train_tokens, self.val_tokens
        if not self.ready_file.exists():
            self.prepare_data()
        dtype = token_dtype(self.bundle.vocab_size)
        train_file, val_file = self.token_files()
        self.train_tokens = train = self._open(train_file, dtype)
        self.val_tokens = val = self._open(val_file, dtype)
        _, world = dist_rank_world()
        blocks = len(train) // self.block_len
        if blocks // world < self.batch_size:
            raise DataError(
                f"corpus {self.corpus.name} too small: {len(train)} training tokens make {blocks} blocks "
                f"of block_len={self.block_len}, fewer than one batch (batch_size={self.batch_size} x {world} ranks)"
            )
        if len(val) < self.block_len:
            raise DataError(
                f"corpus {self.corpus.name}: validation split has {len(val)} tokens "
                f"({len(self.corpus.val)} documents), fewer than one block of block_len={self.block_len}"
            )
        return train, val

    @staticmethod
    def _open(path: Path, dtype: np.dtype) -> np.ndarray:
        if path.stat().st_size == 0:
            return np.zeros(0, dtype=dtype)  # np.memmap refuses empty files
        return np.memmap(path, dtype=dtype, mode="r")

    # -- datasets --------------------------------------------------------------------------------
    @property
    def num_train_blocks(self) -> int:
        """Number of ``block_len`` blocks in the training split (before sharding)."""
        train, _ = self.token_streams()
        return len(train) // self.block_len

    def train_token_counts(self) -> np.ndarray:
        """Unigram counts ``(V,)`` of the training token stream (separators included)."""
        train, _ = self.token_streams()
        if self._counts is None and self.prepared is not None:
            self._counts = self.prepared.train_counts(self.separator_id, self.bundle.vocab_size)
        if self._counts is None:
            self._counts = np.bincount(np.asarray(train), minlength=self.bundle.vocab_size)
        return self._counts

    def train_dataloader(self) -> DataLoader:
        train, _ = self.token_streams()
        dataset = BlockDataset(train, self.block_len)
        self._new_train_sampler(ResumableSampler(len(dataset), shuffle=self.shuffle, seed=self.seed, drop_last=True))
        return PositionTrackingLoader(
            dataset, batch_size=self.batch_size, sampler=self._train_sampler,
            collate_fn=self._train_collate(self.collate_fn, self.num_workers),
            num_workers=self.num_workers, drop_last=True, persistent_workers=False,
        )

    def val_dataloader(self) -> DataLoader:
        _, val = self.token_streams()
        num = None if self.val_batches is None else self.val_batches * self.batch_size
        dataset = BlockDataset(val, self.block_len, num)
        # Sequential, every block once, shards uneven rather than padded with duplicates.
        sampler = ResumableSampler(len(dataset), shuffle=False, drop_last=False)
        return DataLoader(dataset, batch_size=self.batch_size, sampler=sampler,
                          collate_fn=SeededCollate(self.collate_fn, self.seed), num_workers=self.num_workers)

