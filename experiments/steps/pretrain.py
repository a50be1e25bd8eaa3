"""``famlab pretrain``: corpus -> tokenizer -> network + objective -> Lightning fit -> run directory."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import lightning as L
import numpy as np
import torch
from famlab.datamodules import PretrainDataModule
from famlab.datamodules.prepare import PreparedDataset
from famlab.datamodules.tokenizer import TokenizerBundle
from famlab.experiments.analysis.results import ByteScore, PretrainResult
from famlab.experiments.configuration.budget import step_cost
from famlab.experiments.configuration.config import ObjectiveConfig, OptimConfig, TrainerConfig
from famlab.experiments.configuration.plans import PretrainData, PretrainPlan
from famlab.experiments.configuration.specs import (
    arm_objective,
    objective_name,
    objective_settings,
    optim_settings,
)
from famlab.experiments.perf.hardware import peak_flops, precision_dtype
from famlab.experiments.plumbing.data_cache import cache_dir, get_bundle, prepared_corpus, token_ids, with_vocab
from famlab.experiments.plumbing.eval_device import eval_device
from famlab.experiments.plumbing.loggers import identity_tags, make_loggers
from famlab.experiments.plumbing.prepare_once import env_rank, wait_for_rank_zero
from famlab.experiments.plumbing.provenance import provenance
from famlab.experiments.plumbing.reliability import (
    NonFiniteError,
    Preempted,
    check_checkpoint_matches,
    resolve_resume,
    save_last,
)
from famlab.experiments.plumbing.rundir import RunDir, make_run_dir, pretrain_run_name, write_config, write_json
from famlab.experiments.plumbing.trainer import make_trainer, maybe_compile, precision, trains_on_cuda
from famlab.experiments.plumbing.world import check_world, per_device_batch, planned_world
from famlab.experiments.tracking.wandb_loggers import close_wandb, wandb_pretrain_results
from famlab.families import Network, build_network
from famlab.families.config import ModelConfig
from famlab.objectives import Objective, PretrainModule, TokenIds
from famlab.objectives.evaluation import length_extrapolation
from lightning.pytorch.loggers import Logger


class LengthRecord(TypedDict):
    """One length of ``results.json``'s ``length_extrapolation`` (:func:`length_points`)."""

    seq_len: int
    loss: float | None  # None where the length cannot be scored
    reason: str | None  # why not


def unigram_log_probs(counts: np.ndarray) -> torch.Tensor:
    """``(V,)`` log-probabilities of the training split's unigram model (add-one smoothed, so finite)."""

    smoothed = torch.as_tensor(counts, dtype=torch.float64) + 1.0
    return (smoothed / smoothed.sum()).log().float()


def length_points(net: Network, val_tokens: np.ndarray, ids: TokenIds, objective: ObjectiveConfig, data: PretrainData
                  ) -> dict[str, LengthRecord]:
    """Validation loss at 1x, 2x and 4x the training length, for the report and sweep summaries.

    `None` with a reason where the position scheme cannot reach that length (learned / sinusoidal positions
    beyond `model.max_seq_len`). At most 16k validation tokens per length keep this to seconds at tiny scale.
    """
    points = length_extrapolation(
        net, torch.as_tensor(val_tokens[:16_384].astype("int64")), ids, objective=objective_name(objective),
        train_seq_len=data.seq_len, max_tokens=16_384, seed=data.seed, **objective_settings(objective),
    )
    return {f"{p.multiple}x": {"seq_len": p.seq_len, "loss": p.loss, "reason": p.reason} for p in points}


def pretrain(
    cfg: PretrainPlan, *, job_name: str | None = None, evaluate: Callable[[Path], ByteScore | None] | None = None
) -> PretrainResult:
    """Run one pretraining job; returns the results written to ``results.json``.

    ``evaluate(run_dir)``, when given, scores the finished run (a comparison's bits per byte) while its
    W&B run is still open; its result is stored as ``byte_score`` and in the W&B summary.
    """
    started = time.time()
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    run_dir = make_run_dir(cfg.run_dir, cfg.resume, job_name or pretrain_run_name(
        cfg.name, cfg.model.family.value, str(cfg.objective.name), cfg.size))
    cfg, corpus, bundle, objective, dm = prepare_data(cfg, run_dir)
    module = make_module(cfg.model, cfg.optim, cfg.trainer, objective, dm)
    num_params = sum(p.numel() for p in module.net.parameters())
    written = write_config(run_dir, cfg, provenance(tokenizer_hash=bundle.hash, data_hash=corpus.hash))
    loggers = make_loggers(cfg.wandb, run_dir, job_type="pretrain", name=run_dir.name, config=written,
                           tags=identity_tags(cfg.model, cfg.objective), resume=cfg.resume,
                           match=cfg.compare.match)
    trainer = make_trainer(
        cfg.trainer, run_dir, loggers, seed=cfg.seed, grad_clip=cfg.optim.grad_clip,
        checkpoint_dir=RunDir(run_dir).checkpoint_dir,
        monitor="val/loss",
        mode="min",
        max_steps=cfg.trainer.max_steps,
        max_epochs=cfg.trainer.max_epochs,
        val_check_interval=min(cfg.trainer.val_check_interval, max(1, dm.num_train_blocks // cfg.data.batch_size)),
        limit_val_batches=cfg.trainer.limit_val_batches,
    )
    first, setup_s = fit(cfg.trainer, cfg.resume, trainer, module, dm, run_dir, loggers, started)
    assert module.flops_per_step is not None  # make_module set it from step_cost
    results = PretrainResult(
        family=cfg.model.family.value,
        objective=cfg.objective.name,
        run_dir=str(run_dir),
        steps=int(trainer.global_step),
        num_params=int(num_params),
        first=first,
        final={k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")},
        budget={"tokens": module.tokens_seen, "flops": module.flops_seen, "flops_per_step": module.flops_per_step},
        wall_s=round(time.time() - started, 1),
        setup_s=round(setup_s, 1),
        cpu_s=round(time.process_time(), 1),
        threads=torch.get_num_threads(),
    )
    if trainer.is_global_zero:
        # fit's teardown left the network on the CPU: evaluate it on the device it trained on
        net = module.net.to(eval_device(cfg.trainer.accelerator))
        assert dm.val_tokens is not None  # prepare_data set the data module up for fitting
        results.length_extrapolation = length_points(net, dm.val_tokens, token_ids(bundle), cfg.objective, cfg.data)
        if evaluate is not None:
            results.byte_score = evaluate(run_dir)
        write_json(RunDir(run_dir).results_file, results.to_json())
        wandb_pretrain_results(cfg.wandb, loggers, run_dir, results.to_json())
    close_wandb(loggers)
    return results


def prepare_data(cfg: PretrainPlan, run_dir: Path
                 ) -> tuple[PretrainPlan, PreparedDataset, TokenizerBundle, Objective, PretrainDataModule]:
    """The config with ``model.vocab_size`` from the tokenizer (what the rest of the run reads), the prepared corpus
    (``data.corpus`` prepared once into the cache by rank 0, or a prepared directory), its tokenizer, the objective
    and the data module, its token streams memory-mapped (the streams for the objective's separator written by rank 0
    if new) and set up for fitting."""
    corpus = prepared_corpus(cfg.data)
    bundle = get_bundle(cfg.data, corpus, run_dir)
    cfg = with_vocab(cfg, bundle.vocab_size)
    objective = arm_objective(cfg, token_ids(bundle))
    return cfg, corpus, bundle, objective, data_module(cfg.data, cfg.trainer, objective, corpus, bundle)


def data_module(data: PretrainData, t: TrainerConfig, objective: Objective, corpus: PreparedDataset,
                bundle: TokenizerBundle) -> PretrainDataModule:
    """The data module of ``corpus`` encoded with ``bundle`` in ``objective``'s blocks and batches, its streams
    written by rank 0 if new and set up for fitting: a corpus too small for a batch fails here."""
    dm = PretrainDataModule(
        corpus,
        bundle,
        block_len=objective.raw_block_len,
        batch_size=device_batch(data.batch_size, t),
        collate_fn=objective.collate,
        separator_id=objective.separator_id,
        cache_dir=cache_dir(data),
        seed=data.seed,
        shuffle=data.shuffle,
        num_workers=data.num_workers,
        val_batches=data.val_batches,
    )
    wait_for_rank_zero(dm.ready_file, "the token files", rank=env_rank())  # DDP: rank 0 writes, the other ranks load
    if env_rank() == 0:
        dm.prepare_data()  # the streams for this separator, once; also needed for the unigram floor below
    dm.setup("fit")
    return dm


def device_batch(batch_size: int, t: TrainerConfig) -> int:
    """Each rank's micro-batch: the global ``data.batch_size`` over ranks and accumulation
    (:mod:`famlab.experiments.plumbing.world`), so the recipe is the same on any number of devices."""
    return per_device_batch(batch_size, planned_world(t), t.accumulate_grad_batches, "data.batch_size")


def make_module(model: ModelConfig, optim: OptimConfig, t: TrainerConfig, objective: Objective,
                dm: PretrainDataModule) -> PretrainModule:
    """The ``PretrainModule`` around a new network: the unigram floor of the training split, the FLOPs of one
    micro-batch (budget/flops x-axis) and the device's peak (perf/mfu); compiled if ``trainer.compile``."""
    net = build_network(model)
    flops_per_step = step_cost(model, objective, dm.batch_size).flops  # one rank's micro-batch
    peak, _ = peak_flops(torch.device("cuda" if trains_on_cuda(t) else "cpu"), size=1024, repeats=3,
                         dtype=precision_dtype(precision(t)))  # GPU datasheet peak at the run's dtype
    module = PretrainModule(
        net, objective, optim_settings(optim, t.max_steps),
        unigram_log_probs=unigram_log_probs(dm.train_token_counts()), flops_per_step=flops_per_step,
        peak_flops=peak if peak == peak else None,  # NaN: a GPU with no datasheet entry -> no perf/mfu
    )
    return maybe_compile(t, module)


def fit(
    t: TrainerConfig, resume: str, trainer: L.Trainer, module: PretrainModule, dm: PretrainDataModule, run_dir: Path,
    loggers: list[Logger], started: float
) -> tuple[dict[str, float], float]:
    """Train to ``trainer.max_steps`` (resuming under ``resume=``); returns the validation metrics before training
    (``trainer.validate_first``, a fresh run only) and the setup time in seconds."""
    check_world(planned_world(t), trainer.world_size)  # the per-device batch assumed this world
    ckpt_path = resolve_resume(resume, RunDir(run_dir).checkpoint_dir)
    if ckpt_path is not None:
        check_checkpoint_matches(ckpt_path, module)
    setup_s = time.time() - started
    first: dict[str, float] = {}
    if t.validate_first and ckpt_path is None:
        first = {k: float(v) for k, v in trainer.validate(module, datamodule=dm, verbose=False)[0].items()}
    try:
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    except (Preempted, NonFiniteError):
        close_wandb(loggers)  # the checkpoint is written; finish the W&B run so its files are complete
        raise
    if trainer.global_step % int(trainer.val_check_interval):  # steps after the last validation: checkpoint them,
        save_last(trainer, RunDir(run_dir).checkpoint_dir)  # since fine-tunes, export and generate read last.ckpt
    if trainer.global_step != t.max_steps:  # a silently short run would be reported as complete
        planned = t.max_steps
        raise RuntimeError(f"training stopped at step {trainer.global_step}, planned trainer.max_steps={planned}")
    return first, setup_s
