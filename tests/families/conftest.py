"""Fixtures for the families tests: tiny configs (dim 32, 2 layers) for every family."""

from collections.abc import Callable

import pytest
import torch
from famlab.families import ModelConfig, build_network

VOCAB = 61


def tiny(family: str = "gpt", **overrides: object) -> ModelConfig:
    """A tiny config: dim 32, 4 heads, 2 layers, no dropout."""
    args: dict[str, object] = dict(
        family=family, vocab_size=VOCAB, dim=32, num_heads=4, num_layers=2, max_seq_len=64, dropout=0.0
    )
    args.update(overrides)
    return ModelConfig(**args)  # type: ignore[arg-type]


def run(net: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None = None, dec: torch.Tensor | None = None):
    """Forward any family: T5 decodes ``dec`` (default: ``ids``); returns the NetworkOutput."""
    if net.family == "t5":
        return net(ids, mask, decoder_input_ids=ids if dec is None else dec)
    return net(ids, mask)


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every test here on one torch thread (the shared fixture in tests/conftest.py)."""


@pytest.fixture
def make_net() -> Callable[..., torch.nn.Module]:
    """``make_net(family, **overrides)``: a seeded tiny network in eval mode."""

    def make(family: str = "gpt", seed: int = 0, **overrides: object) -> torch.nn.Module:
        torch.manual_seed(seed)
        return build_network(tiny(family, **overrides)).eval()

    return make
