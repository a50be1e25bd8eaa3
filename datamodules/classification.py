"""Classification data: tokenized examples (no special tokens) for an injected family collator."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypedDict

import lightning.pytorch as pl
import torch
from famlab.datamodules.sampler import PositionTrackingLoader, ResumableSampler, SamplerStateMixin
from famlab.datamodules.tasks import Example, Task
from famlab.datamodules.tokenizer import TokenizerBundle
from torch.utils.data import DataLoader


class ClassificationItem(TypedDict):
    """One tokenized example, as the family collator receives it (raw token ids, no special tokens)."""

    input_ids: list[int]
    pair_ids: list[int] | None  # the second text of a pair task
    label: int


def tokenize_examples(examples: list[Example], bundle: TokenizerBundle) -> list[ClassificationItem]:
    """Items ``{"input_ids", "pair_ids", "label"}`` with the raw token ids (no special tokens)."""
    tok = bundle.tokenizer
    ids = [e.ids for e in tok.encode_batch([ex.text for ex in examples], add_special_tokens=False)]
    pair_idx = [i for i, ex in enumerate(examples) if ex.text_pair is not None]
    pairs: list[list[int] | None] = [None] * len(examples)
    if pair_idx:
        encoded = tok.encode_batch([examples[i].text_pair for i in pair_idx], add_special_tokens=False)
        for i, enc in zip(pair_idx, encoded, strict=True):
            pairs[i] = enc.ids
    return [{"input_ids": a, "pair_ids": b, "label": ex.label} for a, b, ex in zip(ids, pairs, examples, strict=True)]


class ClassificationDataModule(SamplerStateMixin[ClassificationItem], pl.LightningDataModule):
    """Train / val / test loaders of a ``Task``.

    Training order comes from a ``ResumableSampler`` (shuffled per epoch from ``seed``, position
    saved in checkpoints); validation and test visit every example exactly once, also under DDP.

    Args:
        task: the task (``load_task``).
        bundle: the tokenizer.
        batch_size: examples per batch and rank.
        collate_fn: the family's collator, ``list[item] -> dict[str, Tensor]``.
        seed: training order.
        num_workers: DataLoader workers.
    """

    def __init__(
        self,
        task: Task,
        bundle: TokenizerBundle,
        *,
        batch_size: int,
        collate_fn: Callable[[list[ClassificationItem]], dict[str, torch.Tensor]],
        seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.task, self.bundle = task, bundle
        self.batch_size, self.collate_fn = batch_size, collate_fn
        self.seed, self.num_workers = seed, num_workers
        self.items: dict[str, list[ClassificationItem]] | None = None
        self._train_sampler: ResumableSampler | None = None
        self._pending_state: dict[str, int] | None = None  # see SamplerStateMixin

    @property
    def num_classes(self) -> int:
        return len(self.task.labels)

    def setup(self, stage: str | None = None) -> None:
        """Tokenize every split once."""
        self.tokenized()

    def tokenized(self) -> dict[str, list[ClassificationItem]]:
        """Every split's items, tokenized on the first call."""
        if self.items is None:
            self.items = {s: tokenize_examples(getattr(self.task, s), self.bundle) for s in ("train", "val", "test")}
        return self.items

    def train_dataloader(self) -> DataLoader:
        data = self.tokenized()["train"]
        self._new_train_sampler(ResumableSampler(len(data), shuffle=True, seed=self.seed, drop_last=True))
        return PositionTrackingLoader(data, batch_size=self.batch_size, sampler=self._train_sampler,
                                       collate_fn=self._train_collate(self.collate_fn, self.num_workers),
                                       num_workers=self.num_workers)

    def _eval_loader(self, split: str) -> DataLoader:
        data = self.tokenized()[split]
        sampler = ResumableSampler(len(data), shuffle=False, drop_last=False)
        # A list is a map-style dataset (the loader indexes it); torch's stub asks for a Dataset subclass.
        return DataLoader(data, batch_size=self.batch_size, sampler=sampler,  # type: ignore[arg-type]
                          collate_fn=self.collate_fn, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

