"""The process group seen from one rank, and scalar reductions every rank calls together.

The reliability callbacks decide collectively (skip a step, stop on a signal) so that all ranks take the same
branch: a rank that checkpoints alone, or skips an optimizer step alone, deadlocks or desynchronises DDP.
Each decision read on the host is a device sync on a GPU (the host waits for the step's queued kernels), so the
per-step ones travel together: :func:`any_over_ranks` reduces several flags in one all-reduce and one read.
"""

from __future__ import annotations

from typing import TypeVar

import torch

T = TypeVar("T")


def dist_info() -> tuple[bool, int, int]:
    """(process group initialised, rank, world size); ``(False, 0, 1)`` in a single process."""
    ok = torch.distributed.is_available() and torch.distributed.is_initialized()
    return ok, torch.distributed.get_rank() if ok else 0, torch.distributed.get_world_size() if ok else 1


def all_reduce_scalar(value: float, op: str) -> float:
    """The ``"min"`` or ``"max"`` of a scalar over ranks (the value itself in one process)."""
    ok, _, world = dist_info()
    if not ok or world == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    if torch.distributed.get_backend() == "nccl":
        t = t.cuda()
    reduce_op = torch.distributed.ReduceOp.MIN if op == "min" else torch.distributed.ReduceOp.MAX
    torch.distributed.all_reduce(t, op=reduce_op)
    return float(t.item())


def any_over_ranks(flags: torch.Tensor) -> list[bool]:
    """Per element of the 1-D 0/1 tensor ``flags``, whether any rank set it: one MAX all-reduce (on the GPU under
    NCCL, on the CPU under gloo) and one host read, whatever the number of flags."""
    ok, _, world = dist_info()
    if ok and world > 1:
        flags = flags.to("cuda" if torch.distributed.get_backend() == "nccl" else "cpu", torch.float32)
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
    return [value > 0 for value in flags.tolist()]


def from_rank_zero(value: T) -> T:
    """Rank 0's ``value`` on every rank (pickled over the process group); ``value`` itself in one process. Every rank
    calls it at the same point."""
    ok, _, world = dist_info()
    if not ok or world == 1:
        return value
    shared: list[object] = [value]
    torch.distributed.broadcast_object_list(shared, src=0)
    return shared[0]  # type: ignore[return-value]  # what rank 0 sent: a T
