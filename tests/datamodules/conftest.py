"""Small shared fixtures: a slice of the bundled corpus and a tokenizer trained on it."""

from __future__ import annotations

import pytest
from famlab.datamodules import Corpus, TokenizerBundle, get_tokenizer, load_corpus


@pytest.fixture(scope="session")
def wordnet_corpus() -> Corpus:
    return load_corpus("wordnet")


@pytest.fixture(scope="session")
def small_corpus(wordnet_corpus: Corpus) -> Corpus:
    train, val = wordnet_corpus.train[:3000], wordnet_corpus.val[:300]
    return Corpus(train=train, val=val, name="wordnet-small", hash=f"small-{wordnet_corpus.hash}")


@pytest.fixture(scope="session")
def small_bundle(small_corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> TokenizerBundle:
    return get_tokenizer(small_corpus, kind="bpe", vocab_size=600, num_sentinels=20,
                         cache_dir=tmp_path_factory.mktemp("tok"))
