"""Evaluation follows the network's device: every tensor an evaluation step builds lands where the network sits.

A GPU is not needed to check this. The network stays on the CPU while the default device is ``meta``
(``torch.device("meta")`` as a context): a tensor built without an explicit device lands on ``meta``, where it
holds no data, so the step either raises or returns a ``meta`` tensor. A ``TorchDispatchMode`` records the device of
every tensor every aten op returns; a step passes when it returns the same value as outside the context and every
tensor it made is on the network's device (here the CPU). On a GPU the same stray tensor would be a CPU tensor fed to
a CUDA network: an error, or a silent host round trip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
import torch
from famlab.experiments.configuration.compose import family_settings
from famlab.experiments.plumbing.eval_device import eval_device
from famlab.experiments.steps.init import default_pooling
from famlab.experiments.steps.probe import features
from famlab.families import ModelConfig, build_network
from famlab.objectives import ClassificationCollator, TokenIds
from famlab.objectives.evaluation import byte_score, length_extrapolation
from famlab.objectives.zeroshot import BigramLM, Item, Scorer
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

IDS = TokenIds(vocab_size=512, pad=0, unk=1, cls=2, sep=3, mask=4, bos=5, eos=6, r=7, x=8, s=9,
               sentinel_ids=[511 - i for i in range(20)])
TEXTS = ["a cat sat", "the dog ran far away from home, and further still", "élan ✓"]
ITEMS = [Item("the ___ sat on the mat", ("cat", "dog", "a big bird"), 0), Item("it was ___", ("good", "bad"), 1)]


def _encode(text: str) -> list[int]:
    """One id per UTF-8 byte, past the specials and below the sentinels."""
    return [10 + b for b in text.encode("utf-8")]


def _net(family: str) -> torch.nn.Module:
    """A tiny network of `family` with the preset's block choices, built on the CPU."""
    torch.manual_seed(0)
    settings = {k: v for k, v in family_settings(family).items() if k != "dropout"}
    return build_network(ModelConfig(**{**settings, "family": family, "vocab_size": IDS.vocab_size, "dim": 32,
                                        "num_layers": 2, "num_heads": 2, "max_seq_len": 64, "dropout": 0.0})).eval()


class _Devices(TorchDispatchMode):
    """The device types of every tensor an aten op returned while active."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.seen |= {t.device.type for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}
        return out


@contextmanager
def _stray_tensors_on_meta() -> Iterator[_Devices]:
    """Default device `meta`: a tensor built without `device=` has no data; yields the devices of every result."""
    with torch.device("meta"), _Devices() as devices:
        yield devices


def _on_net_device(step: Callable[[], Any]) -> tuple[Any, Any]:
    """`(step(), step() under :func:`_stray_tensors_on_meta`)`, the second checked to have made tensors on the CPU
    (the network's device) only."""
    expected = step()
    with _stray_tensors_on_meta() as devices:
        got = step()
    assert devices.seen == {"cpu"}, f"tensors off the network's device: {devices.seen - {'cpu'}}"
    return expected, got


@pytest.mark.parametrize("family,objective", [("gpt", "clm"), ("gpt", "ul2"), ("gpt", "span"), ("t5", "span"),
                                              ("t5", "prefix_lm"), ("bert", "mlm")])
def test_byte_score_builds_every_tensor_on_the_networks_device(family, objective):
    """Bits per byte (causal, one-span, T5's decoder) and BERT's pseudo-log-likelihood, chunked and batched."""
    net = _net(family)
    expected, got = _on_net_device(lambda: byte_score(net, TEXTS, _encode, IDS, objective=objective, max_len=16))
    assert got.value == expected.value and got.num_tokens == expected.num_tokens and math.isfinite(got.value)


@pytest.mark.parametrize("family,objective,rule", [("gpt", "clm", "full"), ("gpt", "clm", "span"),
                                                   ("gpt", "span", "full"), ("gpt", "prefix_lm", "full"),
                                                   ("t5", "span", "full"), ("t5", "prefix_lm", "full"),
                                                   ("t5", "ul2", "full"), ("bert", "mlm", "full")])
def test_zero_shot_scoring_builds_every_tensor_on_the_networks_device(family, objective, rule):
    """Every family's cloze rule (causal with its KV cache, sentinel, continuation, pseudo-log-likelihood)."""
    net = _net(family)
    scorer = Scorer(net, _encode, IDS, objective=objective, rule=rule)
    expected, got = _on_net_device(lambda: [scorer.score(item) for item in ITEMS])
    assert [s.log_prob for s in got] == [s.log_prob for s in expected]
    assert all(math.isfinite(lp) for s in got for lp in s.log_prob)


def test_the_bigram_floor_builds_every_tensor_on_its_device():
    """The add-k bigram floor is scored by the same code, on the device its counts sit on."""
    bigram = BigramLM.fit([_encode(t) for t in TEXTS], IDS.vocab_size, separator=IDS.eos)
    scorer = Scorer(bigram, _encode, IDS)
    expected, got = _on_net_device(lambda: [scorer.score(item) for item in ITEMS])
    assert [s.log_prob for s in got] == [s.log_prob for s in expected]


@pytest.mark.parametrize("family,objective", [("gpt", "clm"), ("gpt", "prefix_lm"), ("t5", "span"), ("t5", "ul2"),
                                              ("bert", "mlm")])
def test_length_extrapolation_builds_every_tensor_on_the_networks_device(family, objective):
    """The validation loss at 1x, 2x, 4x: blocks collated on the CPU, then every tensor on the network's device."""
    net = _net(family)
    tokens = np.random.default_rng(0).integers(10, 400, size=500)  # a memory-mapped stream is a NumPy array
    expected, got = _on_net_device(lambda: length_extrapolation(net, tokens, IDS, objective=objective,
                                                                train_seq_len=16, max_tokens=500, batch_size=4))
    assert got == expected and all(p.loss is not None for p in got)


@pytest.mark.parametrize("family", ["bert", "gpt", "t5"])
def test_probe_features_build_every_tensor_on_the_networks_device(family):
    """The probe's pooled features, batched; only the features go back to the CPU (NumPy) for the regression."""
    net = _net(family)
    items = [{"input_ids": _encode(t), "pair_ids": None, "label": i % 2} for i, t in enumerate(TEXTS * 3)]
    collate = ClassificationCollator(family, IDS, max_len=32)
    expected, got = _on_net_device(lambda: features(net, family, items, collate, default_pooling(family),
                                                    batch_size=4))
    assert got.shape == (len(items), 32)
    np.testing.assert_array_equal(got, expected)


def test_eval_device_mirrors_the_runs_accelerator():
    """CUDA where the run's accelerator could train there and a GPU is visible; the CPU for a CPU run."""
    cuda = torch.cuda.is_available()
    gpu = "cuda" if cuda else "mps" if torch.backends.mps.is_available() else "cpu"
    assert eval_device("cpu").type == "cpu"
    assert eval_device("auto").type == eval_device("gpu").type == gpu
    assert eval_device("cuda").type == ("cuda" if cuda else "cpu")
