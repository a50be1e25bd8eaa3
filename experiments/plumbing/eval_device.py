"""Where everything after training runs: evaluation, scoring, probe features, on the device that trained.

Lightning's ``Strategy.teardown()`` moves the LightningModule to the CPU once ``fit`` returns
(``lightning/pytorch/strategies/strategy.py``), and a network loaded from a checkpoint starts on the CPU; without a
move back, bits per byte, zero-shot scoring, length extrapolation and probe features of a GPU run would run on the
CPU. Every evaluation step moves its network to :func:`eval_device` and builds its inputs on the network's device.
Under a comparison's worker, ``CUDA_VISIBLE_DEVICES`` already restricts the process to the worker's GPUs, so
``cuda`` is the worker's first one.
"""

from __future__ import annotations

import torch
from famlab.experiments.configuration.config import GPU_ACCELERATORS


def eval_device(accelerator: str) -> torch.device:
    """The device a run with ``trainer.accelerator=accelerator`` trained on, for its evaluation: ``cuda`` when the
    accelerator is ``auto`` / ``gpu`` / ``cuda`` and CUDA is available, ``mps`` where Lightning's ``auto`` / ``gpu`` /
    ``mps`` picks Apple's GPU, else ``cpu``."""
    if accelerator in GPU_ACCELERATORS and torch.cuda.is_available():
        return torch.device("cuda")
    if accelerator in ("auto", "gpu", "mps") and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
