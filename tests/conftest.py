"""Shared test settings: no W&B server, no hub downloads, deterministic CPU torch."""

import os

import pytest

from tests.skip_gate import register

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config: pytest.Config) -> None:
    register(config)  # in CI, a skip not on tests/skips_allowed.txt fails the run


@pytest.fixture
def one_thread():
    """Tiny networks run faster on one torch thread than on two oversubscribed ones (the CI box has 2 cores), and
    the same from run to run; a test module asks for it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    """A BPE tokenizer (vocabulary 400, 10 sentinels) trained on 60 lines of one template sentence: enough words for
    tiny networks to generate, fill, score and export (a module-wide fixture; the corpus lives in its own folder)."""
    from famlab.datamodules import get_tokenizer, load_corpus

    root = tmp_path_factory.mktemp("tok")
    text = root / "corpus.txt"
    text.write_text("\n".join(f"the cat number {i} sat on the mat and looked at the dog" for i in range(60)))
    return get_tokenizer(load_corpus(str(text), val_fraction=0.1), kind="bpe", vocab_size=400, num_sentinels=10,
                         cache_dir=root)
