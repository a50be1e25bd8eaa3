"""Fixtures for the objectives tests: a token-id layout like the one famlab's tokenizers use."""

from collections.abc import Callable

import pytest
import torch
from famlab.experiments.configuration.compose import family_settings
from famlab.families import ModelConfig, build_network
from famlab.objectives import TokenIds


def _make_ids(vocab_size: int = 1000, num_sentinels: int = 100) -> TokenIds:
    """The fixed layout of docs/interfaces.md: specials 0..9, sentinels counting down from the top."""
    return TokenIds(
        vocab_size=vocab_size,
        pad=0,
        unk=1,
        cls=2,
        sep=3,
        mask=4,
        bos=5,
        eos=6,
        r=7,
        x=8,
        s=9,
        sentinel_ids=[vocab_size - 1 - i for i in range(num_sentinels)],
    )


@pytest.fixture
def make_ids() -> Callable[..., TokenIds]:
    return _make_ids


@pytest.fixture
def ids() -> TokenIds:
    return _make_ids()




@pytest.fixture
def tiny_net() -> Callable[..., torch.nn.Module]:
    """A real tiny network of a family from `families` (dim 32, 2 layers, dropout 0), with the family's faithful
    block choices (famlab.families.faithful, as `famlab pretrain <family>` composes them; test_fixtures.py)."""

    def build(family: str, vocab_size: int = 1000, seed: int = 0, **overrides) -> torch.nn.Module:
        torch.manual_seed(seed)
        settings = dict(
            family=family, vocab_size=vocab_size, dim=32, num_layers=2, num_heads=2, max_seq_len=64, dropout=0.0
        )
        settings.update({k: v for k, v in family_settings(family).items() if k != "dropout"})  # as the preset
        settings.update(overrides)
        return build_network(ModelConfig(**settings))

    return build
