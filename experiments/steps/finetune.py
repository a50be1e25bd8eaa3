"""``famlab finetune``: a pretrained run / checkpoint / Hugging Face model / scratch network on a task.

``init`` decides where the model config, weights and tokenizer come from:
- a run directory (``config.yaml`` + ``tokenizer.json`` + ``checkpoints/last.ckpt``) or one of its
  checkpoints: model config and tokenizer from the run; presets or overrides that contradict the
  run's model config fail naming the keys;
- ``hf:<name or local dir>``: weights through ``famlab.families.from_hf`` and the model's own tokenizer;
- ``scratch``: the model from the presets (the no-pretraining baseline), tokenizer trained on the corpus.

One fine-tune per ``finetune.seeds`` entry: the best checkpoint by ``finetune.monitor`` is tested once;
``results.json`` holds each seed's ``test/acc``, ``test/f1``, ``test/mcc``, their mean and std, and the
majority-class baseline on the same test split. With one seed the run directory holds ``metrics.csv``
and ``checkpoints/``; with several, each seed has its own ``seed-<k>/`` below it.

Resume (``resume=auto``): every job (grid point x seed) records its outcome in ``job.json`` beside its
``metrics.csv`` when it finishes. A resumed fine-tune skips recorded jobs, continues an interrupted one
from its ``checkpoints/last.ckpt`` exactly as a resumed pretraining does (``experiments.reliability``),
and starts the others afresh; selection and the test read then run as in an uninterrupted fine-tune.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TypedDict

import lightning as L
from famlab.datamodules import ClassificationDataModule, load_corpus
from famlab.datamodules.tasks import Task
from famlab.datamodules.tokenizer import TokenizerBundle
from famlab.experiments.analysis.results import FinetuneResult
from famlab.experiments.configuration.compose import to_plain
from famlab.experiments.configuration.config import (
    ConfigInputError,
    FinetuneConfig,
    with_values,
)
from famlab.experiments.configuration.plans import FinetuneData, FinetunePlan, TrainerSetup
from famlab.experiments.configuration.run_files import LAST_CKPT, RESULTS
from famlab.experiments.configuration.specs import global_batch
from famlab.experiments.plumbing.collective import from_rank_zero
from famlab.experiments.plumbing.data_cache import get_bundle, token_ids, with_vocab
from famlab.experiments.plumbing.loggers import identity_tags, make_loggers
from famlab.experiments.plumbing.prepare_once import env_rank
from famlab.experiments.plumbing.provenance import provenance
from famlab.experiments.plumbing.reliability import (
    AppendingCSVLogger,
    Preempted,
    PreemptionCallback,
    SignalLatch,
    check_checkpoint_matches,
    check_resumed_config,
    resolve_resume,
    save_last,
)
from famlab.experiments.plumbing.rundir import RunDir, make_run_dir, task_run_name, write_config, write_json
from famlab.experiments.plumbing.trainer import make_trainer
from famlab.experiments.plumbing.world import check_world, per_device_batch, planned_world
from famlab.experiments.steps.init import (
    Init,
    default_pooling,
    hf_bundle,
    hf_network,
    load_network,
    load_task_for,
    with_dropout,
)
from famlab.experiments.tracking.wandb_loggers import close_wandb, stop_console_capture, wandb_use_pretrained
from famlab.experiments.tracking.wandb_metrics import record_selection
from famlab.families.config import ModelConfig
from famlab.objectives import ClassificationCollator, ClassifierModule, OptimSettings
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import Logger

log = logging.getLogger("famlab")
METRICS = ("test/acc", "test/f1", "test/mcc")
JOB_FILE = "job.json"  # a finished job's outcome, beside its metrics.csv; a resumed fine-tune skips the job


class JobRecord(TypedDict):
    """One finished job's outcome (its ``job.json``)."""

    lr: float
    head_lr: float
    seed: int
    val: float  # the best validation score (``finetune.monitor``); nan if never validated
    best: str  # its checkpoint
    steps: int
    test: dict[str, float] | None  # test/acc, test/f1, test/mcc; None until tested after selection


def majority_baseline(task: Task) -> dict[str, str | float]:
    """Predict the training split's most frequent label for every test example."""
    from sklearn.metrics import f1_score, matthews_corrcoef

    label = Counter(e.label for e in task.train).most_common(1)[0][0]
    y_true = [e.label for e in task.test]
    y_pred = [label] * len(y_true)
    return {
        "label": task.labels[label],
        "test/acc": sum(t == label for t in y_true) / max(1, len(y_true)),
        "test/f1": float(f1_score(y_true, y_pred, average="macro", labels=list(range(len(task.labels))),
                                  zero_division=0)),
        "test/mcc": float(matthews_corrcoef(y_true, y_pred)),
    }


@dataclasses.dataclass(frozen=True)
class GridPoint:
    """One fine-tuning hyper-parameter setting of the grid (``finetune.lr_grid`` x ``finetune.head_lr_grid``)."""

    lr: float
    head_lr: float

    @property
    def name(self) -> str:
        return f"lr{self.lr:g}-head{self.head_lr:g}"


def grid_points(ft: FinetuneConfig) -> list[GridPoint]:
    """The grid in a fixed order: body lr major, head lr minor; a missing head lr is 10 x the body lr."""
    lrs = list(ft.lr_grid) if ft.lr_grid is not None else [ft.lr]
    points = []
    for lr in lrs:
        default_head = ft.head_lr if ft.head_lr is not None else 10 * lr
        heads_ = list(ft.head_lr_grid) if ft.head_lr_grid is not None else [default_head]
        points += [GridPoint(float(lr), float(h)) for h in heads_]
    return list(dict.fromkeys(points))


def select_point(val: dict[GridPoint, dict[str, float]], mode: str) -> GridPoint:
    """The grid point with the best mean validation score over seeds (``max`` or ``min``); ties: the first."""
    def mean(p: GridPoint) -> float:
        return statistics.fmean(val[p].values())

    best = max(val, key=mean) if mode == "max" else min(val, key=mean)
    return next(p for p in val if mean(p) == mean(best))


def finetune(cfg: FinetunePlan, init: Init) -> FinetuneResult:
    """Fine-tune every grid point x seed, select on validation, test the selected models once.

    Protocol (the same for a pretrained and a from-scratch network): every (body lr, head lr) pair of the grid
    is trained for every ``finetune.seeds`` entry, keeping each run's best checkpoint by ``finetune.monitor``;
    the pair with the best mean validation score over seeds is selected; only that pair's checkpoints are
    evaluated on the test split. Returns the results written to ``results.json``.
    """
    started = time.time()
    if cfg.resume not in ("never", "auto"):
        raise ConfigInputError(f"resume={cfg.resume}: a fine-tune resumes each of its jobs from that job's own "
                               f"{LAST_CKPT}; use resume=auto with run_dir=<the fine-tune's run directory>")
    model, has_pooler = settle_model(cfg.model, cfg.finetune.dropout, init)
    cfg = with_values(cfg, {"model": model})
    # a global batch the ranks cannot share fails before anything is written
    batches(cfg.finetune, cfg.data.batch_size, cfg.trainer)
    task = load_task_for(cfg.data)
    name = task_run_name(cfg.name, cfg.model.family.value, "finetune", task.name)
    run_dir = make_run_dir(cfg.run_dir, cfg.resume, name)
    bundle = finetune_bundle(cfg.data, init, run_dir)
    if init.kind == "scratch":  # a network from scratch: the vocabulary of the tokenizer trained for it
        cfg = with_vocab(cfg, bundle.vocab_size)
    if bundle.vocab_size > cfg.model.vocab_size:  # HF T5 pads its embedding to 32128 > 32100 tokens: fine
        raise ConfigInputError(
            f"model.vocab_size={cfg.model.vocab_size} is smaller than the tokenizer's {bundle.vocab_size} tokens"
        )
    family = cfg.model.family.value
    pooling = cfg.finetune.pooling.value if cfg.finetune.pooling else default_pooling(family, has_pooler)
    if cfg.resume == "auto":
        check_resumed_config(run_dir, to_plain(cfg))  # skipping recorded jobs under other settings would mix results
        if RunDir(run_dir).is_finished():
            print(f"famlab: {run_dir} is done ({RESULTS}); nothing to resume", file=sys.stderr)
            return FinetuneResult.from_json(RunDir(run_dir).results_data())
    written = write_config(run_dir, cfg, provenance(tokenizer_hash=bundle.hash, init=cfg.init, task=task.name))
    grid = _Grid(_Job(cfg, init, task, bundle, pooling, written), run_dir)
    chosen = grid.run()
    results = grid.result(chosen, started)
    if env_rank() == 0:  # the other ranks' files are rank 0's
        grid.drop_unselected(chosen)
        write_json(RunDir(run_dir).results_file, results.to_json())
    return results


def settle_model(model: ModelConfig, dropout: float | None, init: Init) -> tuple[ModelConfig, bool]:
    """The model that fine-tunes (``model``, or an hf: model's own config; with ``finetune.dropout`` when set), and
    whether it brings a trained pooler (a Hugging Face BERT)."""
    hf_pooler = None
    if init.kind == "hf":
        # the family (and so the run name) is only known once the model is loaded; fail early if it cannot be
        net0, hf_pooler = hf_network(init.hf or "")
        model = net0.config
    if dropout is not None:  # the fine-tune's model: config.yaml records the dropout it trains with
        model = dataclasses.replace(model, dropout=dropout)
    return model, init.kind == "hf" and hf_pooler is not None


def batches(ft: FinetuneConfig, data_batch_size: int, t: TrainerSetup) -> tuple[int, int]:
    """``(global, per device)``: ``finetune.batch_size`` (else ``data.batch_size``) is the global batch (every rank,
    one optimizer step); each rank loads its share per micro-batch (:func:`famlab.experiments.plumbing.world.
    per_device_batch`), so a fine-tune trains the same recipe on any number of devices."""
    size, key = global_batch(ft, data_batch_size)
    return size, per_device_batch(size, planned_world(t), t.accumulate_grad_batches, key)


def finetune_bundle(data: FinetuneData, init: Init, run_dir: Path) -> TokenizerBundle:
    """The model's tokenizer: an hf: model's own, a run's (``data.tokenizer``, which the run's settings set), or one
    trained on ``data.corpus`` for a scratch network."""
    if init.kind == "hf":
        return hf_bundle(init.hf or "", run_dir)
    if init.kind == "run":
        return get_bundle(data, None, run_dir)
    corpus = load_corpus(data.corpus, val_fraction=0.05, seed=data.seed)
    return get_bundle(data, corpus, run_dir)


def _finish_wandb(loggers: list[Logger], *, selected: bool, point: str, test: dict[str, float] | None = None,
                  step: int | None = None) -> None:
    """Record a job's selection outcome in its W&B run and close the run."""
    try:
        record_selection(loggers, selected=selected, point=point, test=test, step=step)
    finally:
        close_wandb(loggers)


class _Grid:
    """One fine-tune's grid: every (grid point, seed) job trained or, on resume, read back; the selected point's
    models tested; every job's W&B run closed with its selection outcome.

    With a grid, each job's W&B run stays open until selection, so the selected point's test scores land in the
    run that trained the model (one id, one .wandb file, one `wandb sync`) and the others say they lost. Jobs
    skipped on resume finished in an earlier process: their W&B runs are closed and get no selection.
    """

    def __init__(self, job: _Job, run_dir: Path) -> None:
        self.job, self.run_dir = job, run_dir
        self.points, self.seeds = grid_points(job.cfg.finetune), list(job.cfg.finetune.seeds)
        k = job.cfg.finetune.select_seeds
        self.selecting = self.seeds if k is None or len(self.points) == 1 else self.seeds[:k]  # train at every point
        self.val: dict[GridPoint, dict[str, float]] = {}
        self.best: dict[tuple[GridPoint, int], str] = {}
        self.per_seed: dict[str, dict[str, float]] = {}
        self.last: tuple[int, Path] | None = None  # the latest finished job's step and last.ckpt (named if stopped)
        self.held: dict[tuple[GridPoint, int], tuple[list[Logger], int]] = {}

    def run(self) -> GridPoint:
        """Train every job, select the point on validation, test it (a one-point grid tested as it trained)."""
        try:
            with SignalLatch() as latch:  # a stop signal outside the jobs' training steps stops at the next boundary
                for point in self.points:
                    self.val[point] = {}
                    for seed in self.selecting:
                        self.stop_if_requested(latch)
                        self.train(point, seed, latch)
                self.agree()
                chosen = select_point(self.val, self.job.mode)
                for seed in self.seeds[len(self.selecting):]:  # the seeds that did not select: chosen point only
                    self.stop_if_requested(latch)
                    self.train(chosen, seed, latch)
                self.agree()
                if len(self.points) > 1:  # the test split is read once, after selection, by the selected point only
                    self.test_selected(chosen, latch)
        except Preempted as e:
            e.run_dir = self.run_dir  # the fine-tune resumes as a whole; the checkpoint is one job's
            raise
        finally:  # a run stopped part-way (preemption, non-finite loss) leaves no W&B run open
            for loggers, _ in self.held.values():
                close_wandb(loggers)
        return chosen

    def agree(self) -> None:
        """Under DDP: every rank takes rank 0's validation scores and best checkpoints, so all select the same point
        and test the checkpoint files rank 0 kept (each rank's own ``ModelCheckpoint`` record need not name them)."""
        self.val, self.best = from_rank_zero((self.val, self.best))

    def stop_if_requested(self, latch: SignalLatch) -> None:
        if latch.requested():
            step, checkpoint = self.last if self.last is not None else (0, None)
            raise Preempted(step, checkpoint, signum=latch.signum)

    def train(self, point: GridPoint, seed: int, latch: SignalLatch) -> None:
        """Fit one job, or read its ``job.json`` under ``resume=auto``; note its validation score and checkpoint."""
        grid_name = point if len(self.points) > 1 else None
        seed_name = seed if len(self.seeds) > 1 else None
        seed_dir = _seed_dir(self.run_dir, grid_name, seed_name)
        name = "-".join([self.run_dir.name, *([point.name] if grid_name else []),
                         *([f"s{seed}"] if seed_name is not None else [])])  # seed 0 named too
        record = _read_job(seed_dir) if self.job.cfg.resume == "auto" else None
        if record is not None:
            print(f"famlab: fine-tuning job {name} is done ({seed_dir / JOB_FILE}); skipped", file=sys.stderr)
        else:
            record, loggers = self.job.fit(point, seed, seed_dir, name, test_now=len(self.points) == 1, latch=latch)
            if record["test"] is None:
                self.held[point, seed] = loggers, record["steps"]
            else:  # a one-point grid: tested already, nothing left to wait for
                _finish_wandb(loggers, selected=True, point=point.name)
        self.val[point][str(seed)], self.best[point, seed] = record["val"], record["best"]
        self.last = (record["steps"], RunDir(seed_dir).last_checkpoint)
        if record["test"] is not None:
            self.per_seed[str(seed)] = record["test"]

    def test_selected(self, chosen: GridPoint, latch: SignalLatch) -> None:
        """Test the chosen point's best checkpoint per seed; close every held W&B run with its outcome."""
        for seed in self.seeds:
            self.stop_if_requested(latch)
            self.per_seed[str(seed)] = test = self.job.test(chosen, seed, self.best[chosen, seed])
            if (chosen, seed) in self.held:
                loggers, step = self.held.pop((chosen, seed))
                _finish_wandb(loggers, selected=True, point=chosen.name, test=test, step=step)
        for key in list(self.held):
            loggers, step = self.held.pop(key)
            _finish_wandb(loggers, selected=False, point=chosen.name, step=step)

    def drop_unselected(self, chosen: GridPoint) -> None:
        if len(self.points) > 1:
            for point in self.points:
                if point != chosen:
                    for seed in self.selecting:
                        _drop_checkpoints(Path(self.best[point, seed]).parent)

    def rule(self) -> str:
        """The selection rule in words, as the report states it."""
        ft = self.job.cfg.finetune
        best = "highest" if self.job.mode == "max" else "lowest"
        if self.selecting == self.seeds:
            return f"{best} mean {ft.monitor} over seeds"
        over = (f"mean {ft.monitor} over seeds {', '.join(str(s) for s in self.selecting)}" if len(self.selecting) > 1
                else f"{ft.monitor} of seed {self.selecting[0]}")
        return (f"{best} {over} (finetune.select_seeds={len(self.selecting)}; the other seeds train at the selected "
                "point only)")

    def result(self, chosen: GridPoint, started: float) -> FinetuneResult:
        """The fine-tune's results: the grid's validation scores, the selection, the test scores per seed."""
        job, per_seed, val = self.job, self.per_seed, self.val
        assert job.cfg.init is not None  # parse_init refused a missing init= before the fine-tune began
        return FinetuneResult(
            family=job.family,
            init=job.cfg.init,
            task=job.task.name,
            num_classes=len(job.task.labels),
            sizes={"train": len(job.task.train), "val": len(job.task.val), "test": len(job.task.test)},
            pooling=job.pooling,
            grid=[{"lr": p.lr, "head_lr": p.head_lr, "val": val[p],
                   "val_mean": statistics.fmean(val[p][str(s)] for s in self.selecting)} for p in self.points],
            selected={"lr": chosen.lr, "head_lr": chosen.head_lr},
            selection=self.rule(),
            seeds=per_seed,
            mean={k: statistics.fmean(s[k] for s in per_seed.values()) for k in METRICS},
            std={k: statistics.stdev([s[k] for s in per_seed.values()]) if len(per_seed) > 1 else 0.0
                 for k in METRICS},
            majority=majority_baseline(job.task),
            wall_s=round(time.time() - started, 1),
        )


def _seed_dir(run_dir: Path, point: GridPoint | None, seed: int | None) -> Path:
    path = run_dir if point is None else run_dir / point.name
    path = path if seed is None else path / f"seed-{seed}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _read_job(seed_dir: Path) -> JobRecord | None:
    """The outcome a finished job recorded in ``job.json``, or None (not started, interrupted, or unreadable)."""
    try:
        record: JobRecord = json.loads((seed_dir / JOB_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and {"val", "best", "steps", "test"} <= set(record) else None


def _write_job(seed_dir: Path, record: JobRecord) -> None:
    """Write ``job.json`` whole or not at all (a stop mid-write must not leave a record a resume would trust)."""
    tmp = seed_dir / f"{JOB_FILE}.tmp"
    write_json(tmp, record)
    os.replace(tmp, seed_dir / JOB_FILE)


def _callbacks(trainer: L.Trainer) -> list[Callback]:
    """``trainer.callbacks``: Lightning's callback connector sets it on the instance; the class does not declare it."""
    callbacks: list[Callback] = vars(trainer)["callbacks"]
    return callbacks


def _drop_checkpoints(checkpoint_dir: Path) -> None:
    """Checkpoints of a grid point that was not selected are never read again (their metrics.csv stays)."""
    for ckpt in checkpoint_dir.glob("*.ckpt"):
        ckpt.unlink()


class _Job:
    """What every fit and test of one fine-tuning command shares: config, task, tokenizer, pooling."""

    def __init__(self, cfg: FinetunePlan, init: Init, task: Task, bundle: TokenizerBundle, pooling: str,
                 written: dict) -> None:
        self.cfg, self.init, self.task, self.bundle = cfg, init, task, bundle
        self.pooling, self.written = pooling, written
        self.family = cfg.model.family.value
        ft = cfg.finetune
        self.world = planned_world(cfg.trainer)  # what the per-device batch is computed for
        self.batch_size, self.device_batch = batches(ft, cfg.data.batch_size, cfg.trainer)
        steps_per_epoch = math.ceil(len(task.train) / self.batch_size)  # optimizer steps: the global batch
        self.total = ft.max_steps or ft.epochs * steps_per_epoch
        self.val_every = ft.val_every or (max(1, min(steps_per_epoch, self.total // 4)) if ft.max_steps else None)
        self.mode = "min" if ft.monitor.endswith("loss") else "max"

    def module(self, point: GridPoint) -> ClassifierModule:
        cfg, ft = self.cfg, self.cfg.finetune
        net, pooler = load_network(cfg.model, self.init)
        net = with_dropout(net, cfg.model.dropout)  # an hf: model arrives with its own config's dropout
        optim = OptimSettings(
            lr=point.lr, betas=(cfg.optim.betas[0], cfg.optim.betas[1]), eps=cfg.optim.eps,
            weight_decay=ft.weight_decay, warmup_steps=int(ft.warmup_ratio * self.total), max_steps=self.total,
            min_lr_ratio=0.0,
        )
        return ClassifierModule(
            net, len(self.task.labels), optim, pooling=self.pooling, head_dropout=ft.head_dropout,
            standardize=ft.standardize, head_lr=point.head_lr, pooler_state=pooler,
        )

    def datamodule(self, seed: int) -> ClassificationDataModule:
        collate = ClassificationCollator(self.family, token_ids(self.bundle), self.cfg.data.max_len)
        return ClassificationDataModule(self.task, self.bundle, batch_size=self.device_batch, collate_fn=collate,
                                        seed=seed, num_workers=self.cfg.data.num_workers)

    def fit(
        self, point: GridPoint, seed: int, seed_dir: Path, name: str, test_now: bool, latch: SignalLatch
    ) -> tuple[JobRecord, list[Logger]]:
        """Train one (grid point, seed), or continue it from its ``last.ckpt`` under ``resume=auto``; record its
        outcome (best validation score, its checkpoint, the steps, the test scores if ``test_now``) and return it
        with the job's loggers, whose W&B run is left open for :func:`finetune` to finish."""
        cfg, ft = self.cfg, self.cfg.finetune
        L.seed_everything(seed, workers=True, verbose=False)
        module, dm = self.module(point), self.datamodule(seed)
        ckpt_path = resolve_resume(cfg.resume, RunDir(seed_dir).checkpoint_dir)
        if ckpt_path is not None:
            check_checkpoint_matches(ckpt_path, module)
            print(f"famlab: fine-tuning job {name} resumes from {ckpt_path}", file=sys.stderr)
        config = {**self.written, "finetune_seed": seed, "finetune.lr": point.lr, "finetune.head_lr": point.head_lr}
        loggers = make_loggers(cfg.wandb, seed_dir, job_type="finetune", name=name, config=config,
                               tags=identity_tags(cfg.model, cfg.objective), resume=cfg.resume,
                               match=cfg.compare.match)
        try:
            wandb_use_pretrained(loggers, self.init.run_dir, self.init.checkpoint)  # lineage: pretraining -> fine-tune
            trainer = make_trainer(
                cfg.trainer, seed_dir, loggers, seed=cfg.seed, grad_clip=cfg.optim.grad_clip,
                checkpoint_dir=RunDir(seed_dir).checkpoint_dir, monitor=ft.monitor, mode=self.mode,
                max_steps=self.total, max_epochs=-1 if ft.max_steps else ft.epochs,
                val_check_interval=self.val_every, limit_val_batches=None,
            )
            check_world(self.world, trainer.world_size)
            trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
            # a signal after the last step boundary let the job finish: the fine-tune stops before the next one
            preemption = next(c for c in _callbacks(trainer) if isinstance(c, PreemptionCallback))
            latch.note(preemption.signal)
            if preemption.saved is None or preemption.saved[0] != trainer.global_step:
                # last.ckpt is only rewritten with a new best one: make it the final step, so a job stopped before
                # its job.json is written resumes without training again
                save_last(trainer, RunDir(seed_dir).checkpoint_dir)
            callback = trainer.checkpoint_callback
            assert isinstance(callback, ModelCheckpoint)  # make_trainer's first checkpoint callback
            record: JobRecord = {
                "lr": point.lr, "head_lr": point.head_lr, "seed": seed,
                "val": float(callback.best_model_score) if callback.best_model_score is not None else math.nan,
                "best": str(callback.best_model_path), "steps": int(trainer.global_step), "test": None,
            }
            if test_now:  # a one-point grid: selection is trivial, so test with this run's loggers (W&B included)
                result = trainer.test(module, datamodule=dm, ckpt_path="best", verbose=False)[0]
                record["test"] = {k: float(result[k]) for k in METRICS if k in result}
        except BaseException:
            close_wandb(loggers)  # a stopped job's W&B files are complete; it resumes from its last.ckpt
            raise
        stop_console_capture(loggers)  # the run stays open: the next runs' console output is not its own
        if env_rank() == 0:
            _write_job(seed_dir, record)
        return record, loggers

    def test(self, point: GridPoint, seed: int, checkpoint: str) -> dict[str, float]:
        """Test the selected point's best checkpoint of ``seed``; the scores are appended to its metrics.csv."""
        seed_dir = Path(checkpoint).parent.parent
        module, dm = self.module(point), self.datamodule(seed)
        loggers = [AppendingCSVLogger(save_dir=str(seed_dir), name="", version="")]
        cfg = self.cfg
        trainer = make_trainer(cfg.trainer, seed_dir, loggers, seed=cfg.seed, grad_clip=cfg.optim.grad_clip,
                               checkpoint_dir=RunDir(seed_dir).checkpoint_dir, monitor=cfg.finetune.monitor,
                               mode=self.mode, max_steps=self.total)
        result = trainer.test(module, datamodule=dm, ckpt_path=checkpoint, verbose=False)[0]
        return {k: float(result[k]) for k in METRICS if k in result}
