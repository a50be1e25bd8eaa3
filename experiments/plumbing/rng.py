"""Exact resume of randomness: every rank's torch / numpy / python / CUDA RNG states in the checkpoint.

Lightning saves model, optimizer, loop and DataModule state but no RNG states. The training collation stream
(masks, span noise) is the DataModule's own (``datamodules.sampler.CollationStream``); this callback asks for it
and restores the global states the training step draws from (dropout).
"""

from __future__ import annotations

import random
import warnings
from typing import Any, TypedDict

import lightning.pytorch as pl
import numpy as np
import torch
from famlab.experiments.plumbing.collective import dist_info

RNG_KEY = "famlab_rng"  # checkpoint key of the per-rank RNG states


class _GlobalStates(TypedDict):
    torch: torch.Tensor
    numpy: list[Any]  # np.random.get_state() with the key array as a tensor: kind, keys, pos, has_gauss, gauss
    python: list[Any]  # random.getstate(): version, internal state (a list), gauss_next


class GlobalStates(_GlobalStates, total=False):
    """One process's global RNG states (:func:`rng_state`); ``cuda`` when CUDA is initialised."""

    cuda: list[torch.Tensor]


# One rank's entry under RNG_KEY; older checkpoints also hold the rank's collation stream state as "collate".
_RankStates = TypedDict("_RankStates", {"global": GlobalStates})


class RankStates(_RankStates, total=False):
    collate: torch.Tensor | None


def rng_state() -> GlobalStates:
    """torch / numpy / python RNG states as tensors and lists (``torch.load(weights_only=True)`` safe)."""
    numpy_state = np.random.get_state()
    if not isinstance(numpy_state, tuple):  # the legacy tuple whenever the generator is MT19937, as np.random's is
        raise TypeError(f"np.random's generator is {numpy_state['bit_generator']}, not MT19937: its state is not saved")
    kind, keys, pos, has_gauss, gauss = numpy_state
    version, internal, gauss_next = random.getstate()
    state: GlobalStates = {
        "torch": torch.get_rng_state(),
        "numpy": [str(kind), torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)],
        "python": [int(version), list(internal), gauss_next],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: GlobalStates) -> None:
    """Inverse of ``rng_state``."""
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def datamodule(trainer: pl.Trainer) -> pl.LightningDataModule | None:
    """``trainer.datamodule``: Lightning's data connector sets it on every Trainer; the class does not declare it."""
    dm: pl.LightningDataModule | None = getattr(trainer, "datamodule", None)
    return dm


class RNGStateCallback(pl.Callback):
    """Saves every rank's global RNG states in the checkpoint and restores them on resume.

    Also turns on the DataModule's training collation stream (``use_collation_stream``) with the run's seed.
    Checkpoints written before the stream moved into the DataModule kept it here, as ``"collate"`` next to
    ``"global"`` in each rank's entry; such a checkpoint hands it to the DataModule, so it resumes exactly too.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._loaded: list[RankStates | None] | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        use = getattr(datamodule(trainer), "use_collation_stream", None)
        if callable(use):
            use(self.seed)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._loaded is None:
            return
        _, rank, _ = dist_info()
        mine = self._loaded[rank] if rank < len(self._loaded) else None
        if mine is None:
            warnings.warn(f"checkpoint has RNG states for {len(self._loaded)} ranks, not rank {rank}; "
                          "this rank continues with fresh RNG states (resume is not exact)", stacklevel=2)
        else:
            set_rng_state(mine["global"])

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        state: RankStates = {"global": rng_state()}
        ok, _, world = dist_info()
        states: list[RankStates | None] = [None] * world
        if ok and world > 1:
            torch.distributed.all_gather_object(states, state)  # every rank calls save_checkpoint
        else:
            states = [state]
        checkpoint[RNG_KEY] = states

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        # applied in on_train_start: restoring here would be consumed by setup before the first batch
        self._loaded = checkpoint.get(RNG_KEY)
        legacy = [s.get("collate") if s else None for s in self._loaded or []]
        dm = datamodule(trainer)
        if dm is not None and any(x is not None for x in legacy):
            # Lightning restores the DataModule (its own "collate" states) before the callbacks: those win
            if "collate" not in checkpoint.get(type(dm).__qualname__, {}) and hasattr(dm, "use_collation_stream"):
                dm.load_state_dict({"collate": legacy})
