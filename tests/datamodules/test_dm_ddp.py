"""ResumableSampler under a real 2-process gloo group: rank and world size come from torch.distributed."""

from __future__ import annotations

import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from famlab.datamodules import ResumableSampler


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        train = ResumableSampler(101, shuffle=True, seed=9, drop_last=True)
        train.set_epoch(1)
        evaluation = ResumableSampler(101, shuffle=False, drop_last=False)
        sizes = torch.tensor([len(train)])
        dist.all_reduce(sizes, op=dist.ReduceOp.MAX)  # equal shards: max == own length on every rank
        result = {"train": list(train), "eval": list(evaluation), "max_len": int(sizes)}
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


# in the fast loop (`-m "not slow"`): the cheapest real 2-process group in the suite (no training)
def test_gloo_shards_are_disjoint_equal_and_cover(tmp_path):
    """Two gloo ranks: training shards disjoint and equal (remainder dropped), eval shards cover every index once."""
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    train = [r["train"] for r in ranks]
    assert len(train[0]) == len(train[1]) == 50 == ranks[0]["max_len"]
    assert not set(train[0]) & set(train[1])
    single = ResumableSampler(101, shuffle=True, seed=9, rank=0, world_size=1)
    single.set_epoch(1)
    order = list(single)[:100]
    assert train[0] == order[0::2] and train[1] == order[1::2]  # one global permutation, interleaved
    assert sorted(ranks[0]["eval"] + ranks[1]["eval"]) == list(range(101))
