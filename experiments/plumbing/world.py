"""How many ranks a run trains on, known before any process starts, and the per-device batch that keeps a preset's
global batch on any number of them.

A preset's ``data.batch_size`` and ``finetune.batch_size`` are *global*: the examples of one optimizer step summed
over every rank and micro-batch. A run on ``W`` ranks with ``trainer.accumulate_grad_batches=A`` gives each rank
``batch / (W * A)`` per micro-batch, so ``famlab pretrain gpt small`` trains the same recipe on 1, 2 or 8 GPUs
(nanoGPT and litgpt derive accumulation from the world size the same way). A batch the ranks cannot share evenly
is refused in one line, naming the keys.

:func:`planned_world` mirrors what Lightning will start from ``trainer.devices`` / ``trainer.num_nodes`` on this
machine (``auto`` on a CUDA machine means every visible GPU; on a CPU, one process), so a plan and ``--dry-run``
can price it; at fit time the trainer's own ``world_size`` is checked against it.
"""

from __future__ import annotations

import os

from famlab.experiments.configuration.compare_defaults import visible_gpus
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.plans import TrainerSetup


def devices_per_node(t: TrainerSetup) -> int:
    """The processes Lightning starts on one node for ``trainer.devices``: a count, the length of an id list, every
    visible GPU for ``auto`` / ``-1`` on a GPU machine, one process for ``auto`` on a CPU."""
    text = str(t.devices).strip()
    gpus = len(visible_gpus(t.accelerator))
    if text in ("auto", "-1"):
        return max(1, gpus) if text == "auto" or gpus else (os.cpu_count() or 1)
    if text.lstrip("-").isdigit():
        return int(text)
    return len([i for i in text.strip("[]").split(",") if i.strip()])


def planned_world(t: TrainerSetup) -> int:
    """Ranks the run will train on: processes per node times ``trainer.num_nodes``."""
    return devices_per_node(t) * t.num_nodes


def per_device_batch(global_batch: int, world: int, accumulate: int, key: str) -> int:
    """The micro-batch each rank loads so that one optimizer step sees ``global_batch`` examples.

    Raises:
        ConfigInputError: ``global_batch`` is not a multiple of ``world * accumulate`` (naming ``key``).
    """
    share = world * accumulate
    if global_batch % share:
        raise ConfigInputError(
            f"{key}={global_batch} is the global batch (all ranks, one optimizer step) and cannot be shared by "
            f"{world} rank(s) x trainer.accumulate_grad_batches={accumulate}: use a multiple of {share}")
    return global_batch // share


def check_world(planned: int, actual: int) -> None:
    """At fit time: the trainer's world equals the one the per-device batch was computed for."""
    if planned != actual:
        raise ConfigInputError(
            f"the run was planned for {planned} rank(s) (trainer.devices x trainer.num_nodes) but the launcher "
            f"started {actual}: set trainer.devices and trainer.num_nodes to what the launcher gives")
