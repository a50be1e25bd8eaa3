"""Per-step host syncs of the reliability callbacks: one all-reduce and no scalar reads per optimizer step carry
both the non-finite decision and the stop-signal decision, and every rank still takes the same branch.

CPU stand-ins for a GPU's syncs: two gloo ranks, the collectives counted as they are called, and the host reads
a GPU would sync on (`.item()`, `bool(tensor)`: aten `_local_scalar_dense`) counted by a `TorchDispatchMode`.
"""

from __future__ import annotations

import json
import signal
import sys
import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from famlab.experiments.libraries.internals import TorchDispatchMode
from famlab.experiments.plumbing.nonfinite import NonFiniteCallback
from famlab.experiments.plumbing.signals import PreemptionCallback

STEPS, NAN_STEP, SIGNAL_STEP = 4, 2, 3  # rank 0 gets a NaN gradient at step 2, rank 1 a stop signal before step 3


class _HostReads(TorchDispatchMode):
    """Counts aten ``_local_scalar_dense`` (``.item()``, ``bool(t)``, ``float(t)``): a device sync on a GPU."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.count += func.overloadpacket.__name__ == "_local_scalar_dense"
        return func(*args, **(kwargs or {}))


def _steps(rank: int, tmp: Path) -> dict[str, object]:
    """STEPS optimizer steps of a linear model through the two callbacks' per-step hooks (as Lightning calls
    them); returns per step (skipped, stop agreed) and the counts of all-reduces and host reads in the hooks."""
    torch.manual_seed(0)
    module = torch.nn.Linear(4, 1)
    preemption = PreemptionCallback(tmp)
    nonfinite = NonFiniteCallback(max_bad_steps=3, checkpoint_dir=tmp, preemption=preemption)
    trainer = SimpleNamespace(global_step=0)  # what the hooks read of the Trainer
    steps, reads = [], _HostReads()
    for step in range(1, STEPS + 1):
        loss = module(torch.randn(8, 4)).pow(2).mean()
        with reads:
            nonfinite.on_before_backward(trainer, module, loss)
        loss.backward()
        if rank == 0 and step == NAN_STEP:
            module.weight.grad.fill_(float("nan"))
        if rank == 1 and step == SIGNAL_STEP:
            preemption.signal = signal.SIGTERM  # what its handler records
        with reads, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the skipped step's warning
            nonfinite.on_before_optimizer_step(trainer, module, None)
        skipped = module.weight.grad is None
        trainer.global_step = step
        with reads:
            stop = preemption._stop_agreed(step)
        steps.append([skipped, stop])
        module.zero_grad(set_to_none=True)
    return {"steps": steps, "reads": reads.count}


def _rank(rank: int, world: int, tmp: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=world)
    calls = Counter()
    real = dist.all_reduce

    def counted(*args, **kwargs):  # the real collective, counted
        calls["all_reduce"] += 1
        return real(*args, **kwargs)

    dist.all_reduce = counted
    try:
        out = _steps(rank, Path(tmp))
    finally:
        dist.all_reduce = real
        dist.destroy_process_group()
    (Path(tmp) / f"rank{rank}.json").write_text(json.dumps({**out, "all_reduce": calls["all_reduce"]}))


@pytest.mark.slow  # two spawned processes importing famlab
@pytest.mark.skipif(sys.platform == "win32", reason="gloo file store")
def test_two_ranks_agree_on_skips_and_stops_with_one_collective_per_step(tmp_path):
    mp.spawn(_rank, args=(2, str(tmp_path)), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    expected = [[step == NAN_STEP, step >= SIGNAL_STEP] for step in range(1, STEPS + 1)]
    for r, result in enumerate(results):
        assert result["steps"] == expected, f"rank {r}"  # both skip rank 0's NaN step, both stop at rank 1's signal
        assert result["all_reduce"] == STEPS, f"rank {r}: one all-reduce per step for both decisions"
        assert result["reads"] == 0, f"rank {r}: a scalar read per check"


def test_one_process_reads_no_scalar_per_check_and_stops_on_its_own_signal(tmp_path):
    out = _steps(1, tmp_path)  # as rank 1: the signal is its own
    assert out["steps"] == [[False, False], [False, False], [False, True], [False, True]]
    assert out["reads"] == 0
