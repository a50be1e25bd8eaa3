"""WHERE tokens come from: corpora, tokenizers, packing, classification tasks, LightningDataModules.

Imports neither ``families`` nor ``objectives``: the objective's / family's collator is injected.
"""

from datamodules.classification import ClassificationDataModule, tokenize_examples
from datamodules.corpus import Corpus, load_corpus
from datamodules.errors import DataError
from datamodules.pretrain import BlockDataset, PretrainDataModule, token_dtype, write_token_file
from datamodules.sampler import PositionTrackingLoader, ResumableSampler
from datamodules.tasks import Example, Task, load_task
from datamodules.tokenizer import SPECIAL_TOKENS, TokenizerBundle, get_tokenizer, load_tokenizer, sentinel_token

__all__ = [
    "SPECIAL_TOKENS", "BlockDataset", "ClassificationDataModule", "Corpus", "DataError", "Example",
    "PositionTrackingLoader", "PretrainDataModule", "ResumableSampler", "Task", "TokenizerBundle",
    "get_tokenizer", "load_corpus", "load_task", "load_tokenizer", "sentinel_token", "token_dtype",
    "tokenize_examples", "write_token_file",
]  # fmt: skip
