"""WHERE tokens come from: corpora, tokenizers, packing, classification tasks, LightningDataModules.

Imports neither ``families`` nor ``objectives``: the objective's / family's collator is injected
(``docs/architecture.md``).
Names are loaded lazily (PEP 562), so ``from famlab.datamodules import ResumableSampler`` does not pay for
importing Lightning (seconds of CPU on a small machine, per DDP worker process; docs/results.md, Speed).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "ClassificationDataModule": "classification", "tokenize_examples": "classification",
    "Corpus": "corpus", "load_corpus": "corpus",
    "DataError": "errors",
    "BlockDataset": "pretrain", "PretrainDataModule": "pretrain", "token_dtype": "prepare",
    "write_token_file": "pretrain",
    "PrepareSettings": "prepare", "PreparedDataset": "prepare", "is_prepared_dir": "prepare",
    "open_prepared": "prepare", "prepare_corpus": "prepare", "prepared_location": "prepare",
    "PositionTrackingLoader": "sampler", "ResumableSampler": "sampler",
    "Example": "tasks", "Task": "tasks", "load_task": "tasks",
    "SPECIAL_TOKENS": "tokenizer", "TokenizerBundle": "tokenizer", "get_tokenizer": "tokenizer",
    "load_tokenizer": "tokenizer", "sentinel_token": "tokenizer",
}  # fmt: skip
__all__ = [
    "SPECIAL_TOKENS", "BlockDataset", "ClassificationDataModule", "Corpus", "DataError", "Example",
    "PositionTrackingLoader", "PrepareSettings", "PreparedDataset", "PretrainDataModule", "ResumableSampler", "Task",
    "TokenizerBundle", "get_tokenizer", "is_prepared_dir", "load_corpus", "load_task", "load_tokenizer",
    "open_prepared", "prepare_corpus", "prepared_location", "sentinel_token", "token_dtype", "tokenize_examples",
    "write_token_file",
]  # fmt: skip

if TYPE_CHECKING:
    from famlab.datamodules.classification import ClassificationDataModule, tokenize_examples
    from famlab.datamodules.corpus import Corpus, load_corpus
    from famlab.datamodules.errors import DataError
    from famlab.datamodules.prepare import (
        PreparedDataset,
        PrepareSettings,
        is_prepared_dir,
        open_prepared,
        prepare_corpus,
        prepared_location,
        token_dtype,
    )
    from famlab.datamodules.pretrain import BlockDataset, PretrainDataModule, write_token_file
    from famlab.datamodules.sampler import PositionTrackingLoader, ResumableSampler
    from famlab.datamodules.tasks import Example, Task, load_task
    from famlab.datamodules.tokenizer import (
        SPECIAL_TOKENS,
        TokenizerBundle,
        get_tokenizer,
        load_tokenizer,
        sentinel_token,
    )


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'datamodules' has no attribute '{name}'")
    value = getattr(importlib.import_module(f"famlab.datamodules.{_EXPORTS[name]}"), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
