"""Kernel launches of one training step at the `small` preset's shapes, counted without a GPU.

A `TorchDispatchMode` counts every aten operator of the objective's loss, forward and backward, on meta tensors
(shapes propagate, nothing is computed). With the CUDA choices forced (`dispatch.as_device("cuda")`) a GPT (clm)
or T5 (span) step issues no more operators than the dense reference (`dispatch.reference_only()`), about twice at
most being the bound; the CPU choices (the fused LM loss in 1,024-column slices and 16 MiB row chunks) issue far
more at these shapes, which on a GPU would each be a launch.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager

import pytest
import torch
from famlab.experiments.configuration.compose import compose
from famlab.experiments.libraries.internals import TorchDispatchMode
from famlab.experiments.perf.bench import token_ids
from famlab.families import build_network
from famlab.families.kernels import dispatch
from famlab.objectives import make_objective

MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm"})


class _OpCounter(TorchDispatchMode):
    """Counts each aten operator by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _small_step(family: str) -> tuple[torch.nn.Module, object, dict[str, torch.Tensor]]:
    """The `small` preset's network (on meta), objective and one batch of its shapes (on meta)."""
    cfg = compose([family, "small"], []).cfg
    vocab = cfg.data.tokenizer.vocab_size
    with torch.device("meta"):
        net = build_network(dataclasses.replace(cfg.model, vocab_size=vocab)).train()
    objective = make_objective(cfg.objective.name, token_ids(vocab), seq_len=cfg.data.seq_len, family=family,
                               generator=torch.Generator().manual_seed(0))
    raw = torch.randint(10, vocab - 100, (cfg.data.batch_size, objective.raw_block_len))
    return net, objective, {k: v.to("meta") for k, v in objective.collate(list(raw)).items()}


def _count(family: str, choices: AbstractContextManager[None]) -> Counter[str]:
    net, objective, batch = _small_step(family)
    with choices, _OpCounter() as counter:
        objective.loss(net, batch).loss.backward()  # type: ignore[attr-defined]
    return counter.ops


def _paths() -> Iterator[tuple[str, AbstractContextManager[None]]]:
    yield "cuda", dispatch.as_device("cuda")
    yield "reference", dispatch.reference_only()


@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_a_cuda_step_at_small_shapes_issues_about_the_reference_operator_count(family: str) -> None:
    counts = {name: _count(family, ctx) for name, ctx in _paths()}
    cuda, reference = (sum(counts[n].values()) for n in ("cuda", "reference"))
    assert 0 < cuda <= reference <= 2 * cuda  # the device-neutral kernels only merge operations
    assert sum(counts["cuda"][m] for m in MATMULS) <= sum(counts["reference"][m] for m in MATMULS)


@pytest.mark.slow  # ~15 s: the CPU path runs thousands of operators
@pytest.mark.parametrize(("family", "factor", "matmul_factor"), [("gpt", 10, 5), ("t5", 2, 1.5)])
def test_the_cpu_choices_at_small_shapes_issue_far_more_operators(family: str, factor: float,
                                                                  matmul_factor: float) -> None:
    """The CPU's fused LM loss slices a 16k vocabulary into 16 matmuls per 256-row chunk: GPT's 16,384 rows make
    1,024 such slices forward (and as many backward), T5's shorter targets a quarter of that."""
    cpu = _count(family, dispatch.as_device("cpu"))
    reference = _count(family, dispatch.reference_only())
    assert sum(cpu.values()) > factor * sum(reference.values())
    assert sum(cpu[m] for m in MATMULS) > matmul_factor * sum(reference[m] for m in MATMULS)
