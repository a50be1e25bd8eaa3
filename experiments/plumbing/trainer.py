"""The Lightning ``Trainer`` of every fit: precision, checkpoints, the reliability callbacks, progress, cluster
plugins; ``torch.compile`` of the training step when ``trainer.compile``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from famlab.experiments.configuration.config import GPU_ACCELERATORS, TrainerConfig
from famlab.experiments.configuration.plans import TrainerSetup
from famlab.experiments.perf.allocator import keep_freed_memory
from famlab.experiments.plumbing.console import heartbeat_seconds, progress_bar
from famlab.experiments.plumbing.launch_env import note_world
from famlab.experiments.plumbing.world import planned_world

if TYPE_CHECKING:
    from famlab.objectives import PretrainModule
    from lightning.fabric.plugins.environments import ClusterEnvironment
    from lightning.pytorch import Callback, Trainer
    from lightning.pytorch.loggers import Logger
    from lightning.pytorch.plugins import CheckpointIO, LayerSync, Precision

    TrainerPlugin = Precision | ClusterEnvironment | CheckpointIO | LayerSync  # what Trainer(plugins=[...]) takes


def precision(t: TrainerSetup) -> str:
    """``trainer.precision``; ``auto`` = bf16-mixed on a CUDA GPU with bf16, else 32-true."""
    if t.precision != "auto":
        return t.precision
    import torch

    return "bf16-mixed" if trains_on_cuda(t) and torch.cuda.is_bf16_supported() else "32-true"


def trains_on_cuda(t: TrainerSetup) -> bool:
    """Whether this run's training device is a CUDA GPU (one is visible and ``trainer.accelerator`` allows it)."""
    import torch

    return torch.cuda.is_available() and t.accelerator in GPU_ACCELERATORS


def fp32_matmul_precision(t: TrainerSetup) -> str:
    """On a CUDA run, let fp32 matmuls use TF32 (``torch.set_float32_matmul_precision("high")``; torch's default
    ``highest`` leaves Ampere and later GPUs' tensor cores idle for them); elsewhere leave torch's setting.
    Returns the setting now in force. bf16-mixed runs most matmuls in bf16 anyway; this covers the ones autocast
    keeps in fp32 and 32-true runs."""
    import torch

    if trains_on_cuda(t):
        torch.set_float32_matmul_precision("high")
    return torch.get_float32_matmul_precision()


def tune_process(t: TrainerSetup) -> None:
    """Process-wide settings of a training process: glibc malloc keeps freed memory, so training steps stop
    re-faulting their activations (experiments/perf/allocator.py); TF32 for fp32 matmuls on a CUDA run."""
    keep_freed_memory()
    fp32_matmul_precision(t)


def syncs_batchnorm(t: TrainerSetup) -> bool:
    """A fine-tune's standardising head (BatchNorm) sees the global batch's statistics under DDP, as on one device.
    torch's SyncBatchNorm runs on GPUs only, so a CPU (gloo) DDP run standardises per rank (docs/scale.md)."""
    return trains_on_cuda(t) and planned_world(t) > 1


def make_trainer(
    t: TrainerSetup, run_dir: Path, loggers: Sequence[Logger], *, seed: int, grad_clip: float | None,
    checkpoint_dir: Path, monitor: str, mode: str, max_steps: int = -1, max_epochs: int = -1,
    val_check_interval: int | None = None, limit_val_batches: int | None = None,
) -> Trainer:
    """A Lightning Trainer from ``trainer.*``, the run's ``seed`` and ``optim.grad_clip``: last.ckpt (and
    last-prev.ckpt), reliability callbacks, progress."""
    import lightning as L
    from famlab.experiments.configuration.lightning_check import check_lightning_settings
    from famlab.experiments.plumbing.checkpoints import checkpoint_callback, keep_previous_last
    from famlab.experiments.plumbing.faults import test_hook_callbacks
    from famlab.experiments.plumbing.heartbeat import Heartbeat
    from famlab.experiments.plumbing.reliability import reliability_callbacks
    from lightning.pytorch.callbacks import RichProgressBar

    tune_process(t)
    # the test hook's faults go first, so each reliability callback sees them in the same step
    callbacks: list[Callback] = [checkpoint_callback(checkpoint_dir, monitor, mode), *test_hook_callbacks(),
                            *reliability_callbacks(t, seed, checkpoint_dir)]
    bar = progress_bar(t.progress_bar)  # a bar only on a terminal; else (a log file, a worker) a line a minute
    callbacks.append(RichProgressBar(leave=True) if bar else Heartbeat(run_dir.name, heartbeat_seconds()))
    trainer = L.Trainer(
        default_root_dir=str(run_dir),
        max_steps=max_steps,
        max_epochs=max_epochs,
        val_check_interval=val_check_interval,
        check_val_every_n_epoch=None if val_check_interval else 1,
        limit_val_batches=limit_val_batches if limit_val_batches is not None else 1.0,
        log_every_n_steps=t.log_every_n_steps,
        accelerator=t.accelerator,
        devices=check_lightning_settings(t)["devices"],
        strategy=t.strategy,
        num_nodes=t.num_nodes,
        precision=precision(t),  # type: ignore[arg-type]  # one of Lightning's values (lightning_check.py)
        accumulate_grad_batches=t.accumulate_grad_batches,
        gradient_clip_val=grad_clip,
        deterministic=t.deterministic,
        logger=loggers,
        callbacks=callbacks,
        enable_progress_bar=bar,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,  # datamodules.ResumableSampler owns order and position
        # no_grad instead of inference_mode for evaluation: metric states reset inside trainer.validate()
        # (validate_first) would otherwise be inference tensors that fit's validation cannot update
        inference_mode=False,
        sync_batchnorm=syncs_batchnorm(t),
        plugins=cluster_plugins(),
    )
    note_world(trainer.world_size)  # a failure after fit is still reported as one rank's (plumbing/rank_failure.py)
    keep_previous_last(trainer)  # every write of last.ckpt first moves the old one to last-prev.ckpt
    return trainer


def cluster_plugins() -> list[TrainerPlugin]:
    """Under SLURM, Lightning's ``SLURMEnvironment`` supplies rank, world size and the main node, but famlab
    handles SIGUSR1 itself (checkpoint to ``last.ckpt`` as on SIGTERM, then requeue; see
    ``experiments/plumbing/signals.py``), so Lightning's own requeue (an ``hpc_ckpt`` file that ``resume=auto``
    does not read) is off."""
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def maybe_compile(t: TrainerConfig, module: PretrainModule) -> PretrainModule:
    """When ``trainer.compile``: ``torch.compile`` (inductor) the whole training loss, network and objective in one
    graph (``PretrainModule.compile_step``); eager from the first call that fails, with a warning naming the error."""
    if t.compile:
        module.compile_step()
    return module
