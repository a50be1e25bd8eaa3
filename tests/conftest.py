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
