"""ResumableSampler: a pure function of (seed, epoch, rank); resume position; DDP shards."""

from __future__ import annotations

import torch
from famlab.datamodules import PositionTrackingLoader, ResumableSampler
from torch.utils.data import DataLoader


def test_order_is_a_pure_function_of_seed_and_epoch():
    """Two samplers with the same seed agree on every epoch; epochs and seeds differ from each other."""
    a, b = ResumableSampler(100, seed=1), ResumableSampler(100, seed=1)
    orders = []
    for epoch in range(3):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        orders.append(list(a))
        assert orders[-1] == list(b)
        assert sorted(orders[-1]) == list(range(100))
    assert orders[0] != orders[1] != orders[2]
    assert list(ResumableSampler(100, seed=2)) != orders[0]
    assert list(ResumableSampler(10, shuffle=False)) == list(range(10))


def test_resume_continues_after_the_saved_position():
    """A sampler restored from state mid-epoch yields exactly the rest of the interrupted epoch."""
    s = ResumableSampler(50, seed=7)
    s.set_epoch(2)
    full = list(s)
    s.set_epoch(2)  # same epoch: restart from the beginning after a full pass
    it = iter(s)
    first = [next(it) for _ in range(17)]
    state = s.state_dict()
    assert state == {"seed": 7, "epoch": 2, "position": 17}
    fresh = ResumableSampler(50, seed=0)
    fresh.load_state_dict(state)
    fresh.set_epoch(2)  # Lightning calls set_epoch on the resumed epoch: the position must survive
    assert first + list(fresh) == full
    fresh.set_epoch(3)
    assert len(list(fresh)) == 50  # the next epoch is complete


def test_ddp_training_shards_are_disjoint_equal_and_drop_the_remainder():
    """Training shards (drop_last) are disjoint, equal in size, and cover all but < world_size samples."""
    shards = [list(ResumableSampler(103, seed=3, rank=r, world_size=4)) for r in range(4)]
    assert [len(s) for s in shards] == [25] * 4
    flat = [i for s in shards for i in s]
    assert len(set(flat)) == 100 and set(flat) <= set(range(103))
    assert len(ResumableSampler(103, rank=0, world_size=4)) == 25


def test_ddp_eval_shards_cover_every_sample_once_without_padding():
    """Evaluation shards (no drop_last) together contain every index exactly once; sizes may differ by one."""
    shards = [list(ResumableSampler(103, shuffle=False, drop_last=False, rank=r, world_size=4)) for r in range(4)]
    assert sorted(i for s in shards for i in s) == list(range(103))
    assert [len(s) for s in shards] == [26, 26, 26, 25]
    assert [len(ResumableSampler(103, drop_last=False, rank=r, world_size=4)) for r in range(4)] == [26, 26, 26, 25]


def test_tracking_loader_saves_consumed_position_with_workers():
    """With a prefetching worker the saved position is what the consumer took, not what the sampler handed out."""
    data = list(range(40))
    sampler = ResumableSampler(40, seed=5)
    loader = PositionTrackingLoader(data, batch_size=4, sampler=sampler, num_workers=1, prefetch_factor=4)
    it = iter(loader)
    taken = [next(it) for _ in range(3)]
    assert sampler.state_dict()["position"] == 12
    resumed = ResumableSampler(40)
    resumed.load_state_dict(sampler.state_dict())
    rest = list(DataLoader(data, batch_size=4, sampler=resumed))
    everything = torch.cat(taken + rest).tolist()
    sampler.set_epoch(0)
    assert everything == list(ResumableSampler(40, seed=5))
    del it
