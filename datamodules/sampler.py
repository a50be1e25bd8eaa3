"""A sampler whose order is a pure function of (seed, epoch, rank) and whose position is saved.

Why not Lightning's ``DistributedSampler`` or a shuffled ``DataLoader``: resuming those mid-epoch
replays a fresh shuffle or loses the position (Lightning resumes mid-epoch from a fresh shuffle), and
``DistributedSampler`` pads shards with duplicated samples, which biases evaluation metrics.
"""

from __future__ import annotations

import collections
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Sampler

ItemT = TypeVar("ItemT")  # one sample of a dataset, as the collator receives it
BatchT = TypeVar("BatchT")


def dist_rank_world() -> tuple[int, int]:
    """(rank, world size) of the initialised default process group, else (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class ResumableSampler(Sampler[int]):
    """Indices ``0 .. num_samples-1`` for this rank, in an order that depends only on (seed, epoch, rank).

    With ``shuffle`` the global order is a permutation drawn from ``(seed, epoch)``; otherwise it is
    ``0, 1, 2, ...``. Rank ``r`` of ``W`` takes every ``W``-th index starting at ``r``. With
    ``drop_last`` (training) the global order is first cut to a multiple of ``W`` so every rank has
    the same number of samples (DDP needs equal step counts); without it (evaluation) every sample is
    used exactly once and shards may differ in length by one — never padded with duplicates.

    The position (samples of the current epoch already consumed) is saved by ``state_dict``; after
    ``load_state_dict`` the next iteration resumes right after it. ``position`` counts the indices
    handed out, which equals what the training loop consumed when the DataLoader has no workers; a
    ``PositionTrackingLoader`` sets it from the batches actually consumed.

    Args:
        num_samples: size of the dataset.
        shuffle: permute the order per epoch.
        seed: seed of the permutation.
        drop_last: cut the global order to a multiple of the world size (equal shards).
        rank: this process's rank; default from ``torch.distributed`` at iteration time.
        world_size: number of ranks; default from ``torch.distributed`` at iteration time.
    """

    def __init__(
        self,
        num_samples: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self.num_samples = num_samples
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self._rank = rank
        self._world_size = world_size
        self.epoch = 0
        self.position = 0  # samples of this epoch consumed so far
        self._start = 0  # where the next __iter__ begins (set by load_state_dict / set_position)

    @property
    def rank(self) -> int:
        return dist_rank_world()[0] if self._rank is None else self._rank

    @property
    def world_size(self) -> int:
        return dist_rank_world()[1] if self._world_size is None else self._world_size

    def indices(self, epoch: int | None = None) -> np.ndarray:
        """This rank's full index list for ``epoch`` (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        if self.shuffle:
            # SeedSequence of (seed, epoch): the same order on every machine and for every world size.
            order = np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
        else:
            order = np.arange(self.num_samples)
        world = self.world_size
        if self.drop_last:
            order = order[: (self.num_samples // world) * world]
        return order[self.rank :: world]

    def __len__(self) -> int:
        world, rank = self.world_size, self.rank
        if self.drop_last:
            return self.num_samples // world
        return len(range(rank, self.num_samples, world))

    def __iter__(self) -> Iterator[int]:
        order = self.indices()
        start, self._start = self._start, 0
        self.position = start
        for index in order[start:]:
            self.position += 1
            yield int(index)

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its beginning, unless it is the epoch a loaded state resumes."""
        if epoch != self.epoch:
            self.epoch = epoch
            self._start = 0
            self.position = 0

    def set_position(self, position: int) -> None:
        """Make the next iteration of this epoch begin after ``position`` samples."""
        self._start = self.position = position

    def state_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.seed = int(state["seed"])
        self.epoch = int(state["epoch"])
        self.set_position(int(state["position"]))


class PositionTrackingLoader(DataLoader):
    """A DataLoader that tells its ``ResumableSampler`` how many samples the consumer has taken.

    With workers, the sampler runs ahead of the training loop (prefetching); the position saved in
    a checkpoint must be what the loop consumed, so it is set here as each batch is handed out.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Every new iterator draws a base seed for worker processes from ``generator``, the global torch RNG when
        # none is given. Main-process loading never uses that seed, but the draw moves the global RNG (dropout):
        # a resumed run creates its iterator after its RNG states are restored, where an uninterrupted run
        # creates one only at epoch starts, so the two would part from the first resumed step on.
        if not kwargs.get("num_workers") and kwargs.get("generator") is None:
            kwargs["generator"] = torch.Generator()
        super().__init__(*args, **kwargs)

    @property
    def resumable_sampler(self) -> ResumableSampler:
        """The sampler whose position this loader tracks."""
        if not isinstance(self.sampler, ResumableSampler):
            raise TypeError(f"PositionTrackingLoader needs a ResumableSampler, got {type(self.sampler).__name__}")
        return self.sampler

    # DataLoader.__iter__ is typed to return its _BaseDataLoaderIter; a generator over it is an iterator all the
    # same, which is all that for-loops and Lightning's fetchers ask of a loader.
    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        sampler, batch_size = self.resumable_sampler, self.batch_size
        if batch_size is None:
            raise TypeError("PositionTrackingLoader needs a batch_size (it counts the samples of each batch)")
        start, total = sampler._start, len(sampler)
        for k, batch in enumerate(super().__iter__(), 1):
            sampler.position = min(start + k * batch_size, total)
            yield batch

    # Lightning saves and restores a loader that has these (and warns on mid-epoch resume otherwise);
    # the state is the sampler's, the same that the DataModule's own state_dict carries.
    def state_dict(self) -> dict[str, int]:
        return self.resumable_sampler.state_dict()

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        self.resumable_sampler.load_state_dict(state)


class CollationStream(Generic[ItemT]):
    """Runs a collate function on its own torch RNG state and remembers the state before each call.

    Why a stream of its own: Lightning prefetches one batch ahead, so batch k+1 is collated (masks drawn)
    before step k runs its dropout. Saving the global RNG at a step boundary therefore cannot reproduce both
    the next batch's masks and the next step's dropout on resume. The resume point of the stream is its state
    before the oldest batch collated but not yet trained on (``started`` marks a batch as being trained on).

    Args:
        fn: the collator (``list[sample] -> batch``).
        state: the torch RNG state (``torch.Generator.get_state()``) the stream starts from.
    """

    def __init__(self, fn: Callable[[list[ItemT]], dict[str, torch.Tensor]], state: torch.Tensor) -> None:
        self.fn, self.state = fn, state
        self.pending: collections.deque[torch.Tensor] = collections.deque()  # pre-call states, not yet trained

    def __call__(self, items: list[ItemT]) -> dict[str, torch.Tensor]:
        self.pending.append(self.state)
        outer = torch.get_rng_state()
        torch.set_rng_state(self.state)
        try:
            return self.fn(items)
        finally:
            self.state = torch.get_rng_state()
            torch.set_rng_state(outer)

    def started(self) -> None:
        """The oldest collated batch is now being trained on."""
        if self.pending:
            self.pending.popleft()

    def resume_state(self) -> torch.Tensor:
        """The state to restart from: before the oldest collated-but-untrained batch, else the current one."""
        return self.pending[0] if self.pending else self.state


def collation_seed_state(seed: int, rank: int) -> torch.Tensor:
    """The state a rank's collation stream starts from in a fresh run (distinct per rank)."""
    return torch.Generator().manual_seed(seed * 1000 + rank + 12345).get_state()


class SamplerStateMixin(Generic[ItemT]):
    """``state_dict`` / ``load_state_dict`` of a DataModule whose train loader uses a ``ResumableSampler``.

    Lightning restores DataModule state before the train loader exists, so a state that arrives early is kept
    in ``_pending_state`` and applied when the loader builds its sampler (``_new_train_sampler``).

    After :meth:`use_collation_stream` the train loader collates on a :class:`CollationStream` per rank (main-process
    loading only: workers collate in their own processes with their own seeds), and the state carries every rank's
    stream position under ``"collate"``.
    """

    _train_sampler: ResumableSampler | None = None
    _pending_state: dict[str, int] | None = None
    _collation_seed: int | None = None
    _collation: CollationStream[ItemT] | None = None
    _collation_loaded: list[torch.Tensor | None] | None = None  # per rank, restored before the loader exists

    def _new_train_sampler(self, sampler: ResumableSampler) -> ResumableSampler:
        """Adopt ``sampler`` as the train sampler, applying a state restored before it existed."""
        self._train_sampler = sampler
        if self._pending_state is not None:
            sampler.load_state_dict(self._pending_state)
            self._pending_state = None
        return sampler

    def use_collation_stream(self, seed: int) -> None:
        """Collate training batches on an RNG stream of their own (seeded from ``seed`` and the rank), saved
        in this DataModule's ``state_dict`` so that a resumed run draws the same corruption (exact resume)."""
        self._collation_seed = seed

    def _train_collate(self, fn: Callable[[list[ItemT]], dict[str, torch.Tensor]],
                       num_workers: int) -> Callable[[list[ItemT]], dict[str, torch.Tensor]]:
        """``fn``, or ``fn`` on this rank's collation stream (see :meth:`use_collation_stream`)."""
        self._collation = None
        if self._collation_seed is None or num_workers > 0:
            return fn
        rank, _ = dist_rank_world()
        loaded, self._collation_loaded = self._collation_loaded, None
        start = loaded[rank] if loaded is not None and rank < len(loaded) else None
        if loaded is not None and start is None:
            warnings.warn(f"checkpoint has collation RNG states for {len(loaded)} ranks, not rank {rank}; this "
                          "rank starts a fresh stream (resume is not exact)", stacklevel=2)
        self._collation = CollationStream(fn, start if start is not None else collation_seed_state(
            self._collation_seed, rank))
        return self._collation

    def on_before_batch_transfer(self, batch: BatchT, dataloader_idx: int) -> BatchT:
        """Lightning's hook for every batch it is about to use: a training batch leaves the stream's pending list."""
        trainer = getattr(self, "trainer", None)
        if self._collation is not None and trainer is not None and trainer.training:
            self._collation.started()
        return batch

    def _collation_states(self) -> list[torch.Tensor | None]:
        """Every rank's stream resume state, rank order (all ranks call this together, as Lightning's save does)."""
        mine = self._collation.resume_state() if self._collation is not None else None
        rank, world = dist_rank_world()
        if world == 1:
            return [mine]
        states: list[torch.Tensor | None] = [None] * world
        dist.all_gather_object(states, mine)
        return states

    def state_dict(self) -> dict[str, object]:
        """The training sampler's (seed, epoch, position) and the collation streams, saved in Lightning checkpoints."""
        if self._train_sampler is not None:
            state: dict[str, object] = {"train_sampler": self._train_sampler.state_dict()}
        else:
            state = {"train_sampler": self._pending_state} if self._pending_state else {}
        if self._collation is not None:
            state["collate"] = self._collation_states()
        elif self._collation_loaded is not None:
            state["collate"] = list(self._collation_loaded)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("collate") is not None:
            self._collation_loaded = list(state["collate"])  # applied when the train loader is built
        sampler_state = state.get("train_sampler")
        if not sampler_state:
            return
        if self._train_sampler is not None:
            self._train_sampler.load_state_dict(sampler_state)
        else:
            self._pending_state = dict(sampler_state)  # applied when the train loader is built
