"""The process group seen from one rank, and scalar reductions every rank calls together.

The reliability callbacks decide collectively (skip a step, stop on a signal) so that all ranks take the same
branch: a rank that checkpoints alone, or skips an optimizer step alone, deadlocks or desynchronises DDP.
"""

from __future__ import annotations

import torch


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
