"""Pieces every command assembles a run from: run directory, provenance, tokenizer, loggers, Trainer.

The only place (with ``cli``) that reads env vars and talks to W&B.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

from famlab.experiments.configuration.compose import flatten, to_plain, to_yaml
from famlab.experiments.configuration.config import Config, ConfigInputError
from famlab.experiments.perf.allocator import keep_freed_memory
from famlab.experiments.plumbing.console import LOG_NAME, heartbeat_seconds, library_output, quiet_libraries
from famlab.experiments.plumbing.internals import stop_console_copy
from famlab.experiments.plumbing.launch_env import inherited_run_dir, publish_run_dir
from famlab.experiments.plumbing.prepare_once import env_rank, wait_for_rank_zero
from famlab.experiments.tracking.wandb_artifacts import (
    log_model_mode,
    log_pretrain_artifacts,
    log_saved_checkpoint,
    use_run_artifacts,
)
from famlab.experiments.tracking.wandb_guard import wandb_mode
from famlab.experiments.tracking.wandb_metrics import define_metrics, x_axis

PACKAGES = ("torch", "lightning", "tokenizers", "wandb", "omegaconf", "torchmetrics", "numpy", "transformers")


def cache_dir(cfg: Config) -> Path:
    """``data.cache_dir``, else ``$FAMLAB_CACHE``, else ``~/.cache/famlab``."""
    path = cfg.data.cache_dir or os.environ.get("FAMLAB_CACHE") or "~/.cache/famlab"
    return Path(path).expanduser()


def run_name(cfg: Config, job: str, task: str | None = None) -> str:
    """Readable run name: ``<family>-<objective>-<size or custom>`` (finetune: ``<family>-ft-<task>``)."""
    if cfg.name:
        return cfg.name
    family = cfg.model.family.value
    if job == "finetune":
        short = Path(task or cfg.data.task).stem.replace(":", "-").replace("/", "-")
        return f"{family}-ft-{short}"
    return f"{family}-{cfg.objective.name}-{cfg.size or 'custom'}"


CREATED_RUN_DIRS: list[Path] = []  # made by this process (with new parents); a run refused on bad input removes them


SETUP_FILES = {"config.yaml", "tokenizer.json"}  # what a run writes before its first step


def remove_empty_run_dirs() -> None:
    """Remove the run directories this process created that hold nothing beyond setup (the run was refused).

    Only directories that did not exist before this process, and only when they hold no more than
    :data:`SETUP_FILES`: a run that trained a step keeps its directory whatever happens after.
    """
    while CREATED_RUN_DIRS:
        path = CREATED_RUN_DIRS.pop()  # innermost first
        if path.is_dir() and {p.name for p in path.iterdir()} <= SETUP_FILES:
            for name in SETUP_FILES:
                (path / name).unlink(missing_ok=True)
            path.rmdir()


def make_run_dir(cfg: Config, name: str) -> Path:
    """Create the run directory (``run_dir`` or ``runs/<name>-<YYYYmmdd-HHMMSS>``).

    An explicit non-empty ``run_dir`` without ``resume`` would be overwritten, so it fails instead.
    """
    if env_rank() != 0:
        # a DDP worker (Lightning relaunches the command per rank; torchrun / SLURM start every rank):
        # rank 0 made and checked the directory and published it (experiments/plumbing/launch_env.py)
        path = Path(inherited_run_dir() or cfg.run_dir or "")
        if not str(path) or str(path) == ".":
            raise ConfigInputError("multi-process runs started by torchrun / SLURM need an explicit run_dir=")
        path.mkdir(parents=True, exist_ok=True)
        return path
    if cfg.run_dir:
        path = Path(cfg.run_dir).expanduser()
        if path.is_dir() and any(path.iterdir()) and cfg.resume == "never":
            raise ConfigInputError(f"run_dir={cfg.run_dir} exists and is not empty; pass resume=auto or a new run_dir")
    else:
        path = Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
        while path.exists():  # two runs started in the same second
            path = path.with_name(path.name + "x")
    try:
        CREATED_RUN_DIRS.extend(p for p in reversed([path, *path.parents]) if not p.exists())  # outermost first
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigInputError(f"run_dir={path} is not writable ({e.strerror})") from None
    publish_run_dir(path)  # inherited by the DDP ranks Lightning launches
    quiet_libraries(path / LOG_NAME)  # banners, tips and third-party warnings: into the run's log, not the console
    return path


def _git_commit() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]  # the repository (experiments/plumbing/run.py)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        return {"commit": commit, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def provenance(**hashes: str | None) -> dict[str, Any]:
    """Git commit, package versions, Python, hardware, plus the given hashes (tokenizer, data)."""
    import torch

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cuda = torch.cuda.is_available()
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    return {
        "git": _git_commit(),
        "versions": versions,
        "python": sys.version.split()[0],
        "hardware": {
            "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "gpus": gpus,
        },
        "command": " ".join(["famlab", *sys.argv[1:]]) if sys.argv else None,
        **hashes,
    }


def write_config(run_dir: Path, cfg: Config, prov: dict[str, Any]) -> dict[str, Any]:
    """Write ``config.yaml`` (resolved config + provenance); return the plain dict that was written."""
    cfg = dataclasses.replace(cfg, provenance=prov)
    if env_rank() == 0:  # only rank 0 writes files
        (run_dir / "config.yaml").write_text(to_yaml(cfg), encoding="utf-8")
    return to_plain(cfg)


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")


class ProgressLine:
    """``prepare: encode 812 / 3,000 MB (27 %), 31.2 MB/s`` on stderr at most every ``every_s`` seconds, the first
    after ``every_s`` (a small corpus prints nothing); rewritten in place on a terminal, plain lines otherwise, at
    most one a minute (``FAMLAB_HEARTBEAT_S``) so a log file holds no more than a heartbeat's worth."""

    def __init__(self, every_s: float = 2.0, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.every_s = every_s if tty else max(every_s, heartbeat_seconds())
        self.started = self.last = time.monotonic()
        self.phase, self.phase_started, self.printed = "", self.started, False

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase != self.phase:
            self.phase, self.phase_started = phase, now
        if now - self.last < self.every_s or now - self.phase_started < 0.5:
            return
        self.last = now
        rate = done / 1e6 / max(now - self.phase_started, 1e-9)
        of = f" / {total / 1e6:,.0f} MB ({100 * done / total:.0f} %)" if total else " MB"
        line = f"prepare: {phase} {done / 1e6:,.0f}{of}, {rate:.1f} MB/s"
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.stream.write(f"\r{line}\033[K" if tty else line + "\n")
        self.stream.flush()
        self.printed = True

    def close(self) -> None:
        """End a line rewritten in place."""
        if self.printed and getattr(self.stream, "isatty", lambda: False)():
            self.stream.write("\n")


def prepare_settings(cfg: Config) -> Any:
    """``datamodules.PrepareSettings`` from ``data.*`` (``data.val_fraction`` None: 0.05)."""
    from famlab.datamodules.prepare import PrepareSettings

    t = cfg.data.tokenizer
    return PrepareSettings(
        kind=t.kind.value, vocab_size=t.vocab_size, num_sentinels=t.num_sentinels, tokenizer_path=t.path,
        sample_bytes=t.sample_bytes, seed=cfg.data.seed,
        val_fraction=cfg.data.val_fraction if cfg.data.val_fraction is not None else 0.05,
    )


@contextlib.contextmanager
def parallel_tokenizers() -> Iterator[None]:
    """Let the Rust tokenizer use every core while preparing data, then restore ``TOKENIZERS_PARALLELISM``.

    ``tokenizers`` reads the variable at each batch call; ``false`` (set by the tests, and for sweep workers)
    would encode on one core. Preparing forks nothing, and tokenizers itself turns its pool off in a process
    forked after using it (a DataLoader worker), so turning it on here is safe.
    """
    before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = before


def prepared_corpus(cfg: Config, out: Path | None = None, progress: Any = None) -> Any:
    """``data.corpus`` as a ``datamodules.PreparedDataset``: a prepared directory opened as it is, a raw spec
    prepared once into the cache (``cache_dir/prepared/``, keyed by its files' identity and ``data.*``) or ``out``.

    Under DDP rank 0 prepares; the other ranks wait for its manifest and open the same directory, reading no raw
    text (they only ``stat`` the source files to find the directory).
    """
    from famlab.datamodules.prepare import MANIFEST, is_prepared_dir, open_prepared, prepare_corpus, prepared_location

    spec = cfg.data.corpus
    if is_prepared_dir(spec):
        return open_prepared(spec)
    settings = prepare_settings(cfg)
    target = out or prepared_location(spec, settings, cache_dir(cfg))
    wait_for_rank_zero(target / MANIFEST, "the prepared corpus", rank=env_rank())
    if env_rank() != 0:
        return open_prepared(target)
    line = progress or ProgressLine()
    try:
        with parallel_tokenizers():
            return prepare_corpus(spec, settings, cache_dir=cache_dir(cfg), out=out, progress=line)
    finally:
        if isinstance(line, ProgressLine):
            line.close()


def get_bundle(cfg: Config, corpus: Any | None, run_dir: Path | None = None) -> Any:
    """The run's tokenizer: a prepared dataset's own (``corpus`` from :func:`prepared_corpus`), else trained once per
    corpus + settings and cached, or ``data.tokenizer.path``.

    Under DDP rank 0 trains it; the other ranks wait for its cached file (``experiments.prepare_once``).

    Copies ``tokenizer.json`` into ``run_dir`` so a later fine-tune or comparison can reuse it.
    """
    from famlab.datamodules import get_tokenizer
    from famlab.datamodules.prepare import PreparedDataset
    from famlab.datamodules.tokenizer import cache_file

    t = cfg.data.tokenizer
    if isinstance(corpus, PreparedDataset) and t.path is None:
        bundle = corpus.bundle(t.num_sentinels)
    else:
        if t.path is None and corpus is not None:  # the other DDP ranks load the tokenizer rank 0 trained
            file = cache_file(corpus, kind=t.kind.value, vocab_size=t.vocab_size, num_sentinels=t.num_sentinels,
                              cache_dir=cache_dir(cfg), sample_bytes=t.sample_bytes, seed=cfg.data.seed)
            wait_for_rank_zero(file, "the tokenizer", rank=env_rank())
        bundle = get_tokenizer(
            corpus,
            kind=t.kind.value,
            vocab_size=t.vocab_size,
            num_sentinels=t.num_sentinels,
            path=t.path,
            cache_dir=cache_dir(cfg),
            **({} if t.path else {"sample_bytes": t.sample_bytes, "seed": cfg.data.seed}),  # training settings only
        )
    if run_dir is not None and env_rank() == 0:
        shutil.copyfile(bundle.path, run_dir / "tokenizer.json")
    return bundle


def token_ids(bundle: Any) -> Any:
    """``objectives.TokenIds`` from a ``datamodules.TokenizerBundle`` (docs/interfaces.md)."""
    from famlab.objectives import TokenIds

    return TokenIds(vocab_size=bundle.vocab_size, sentinel_ids=bundle.sentinel_ids, **bundle.special_ids)


def set_vocab(cfg: Config, vocab_size: int) -> None:
    """Set ``model.vocab_size`` from the tokenizer (0 = unset); a different explicit value is an error."""
    if cfg.model.vocab_size not in (0, vocab_size):
        raise ConfigInputError(
            f"model.vocab_size={cfg.model.vocab_size} does not match the tokenizer's {vocab_size} tokens "
            "(data.tokenizer); set model.vocab_size=0 to take it from the tokenizer"
        )
    cfg.model = dataclasses.replace(cfg.model, vocab_size=vocab_size)  # reruns ModelConfig's checks


def make_loggers(cfg: Config, run_dir: Path, *, job_type: str, name: str, config: dict[str, Any]) -> list[Any]:
    """CSVLogger writing ``<run_dir>/metrics.csv`` and, unless disabled, a WandbLogger.

    The W&B config is the resolved config flattened to dotted keys, logged once at init (nested + flat
    gives duplicate columns in sweeps, wandb #5477). A W&B failure never stops training: warn, go on.
    Every run is its own (``reinit="create_new"``): a fine-tuning grid keeps its runs open until selection,
    and Lightning's ``WandbLogger`` would otherwise reuse the global run still open.
    """
    from famlab.experiments.plumbing.csv_logger import AppendingCSVLogger

    # a resumed run appends to metrics.csv (Lightning's CSVLogger would delete the history)
    loggers: list[Any] = [AppendingCSVLogger(save_dir=str(run_dir), name="", version="")]
    mode = wandb_mode(cfg)
    if mode == "disabled":
        return loggers
    tags = list(dict.fromkeys([cfg.model.family.value, str(cfg.objective.name), cfg.model.pos.value, *cfg.wandb.tags]))
    log_model = log_model_mode(cfg.wandb.log_model)  # a bad value fails before training, naming the key
    save_dir = Path(cfg.wandb.dir) if cfg.wandb.dir else run_dir  # a comparison keeps all its runs in one place
    try:
        from lightning.pytorch.loggers import WandbLogger

        class FlatConfigWandbLogger(WandbLogger):
            """Skips Lightning's ``log_hyperparams``: the module's nested hparams (``optim: {...}``) would add
            a second, nested copy of keys already in the flat config (duplicate columns, wandb #5477).
            With ``wandb.log_model=all`` uploads each checkpoint as it is saved (famlab's own artifacts)."""

            def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
                return None

            def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
                last = Path(checkpoint_callback.dirpath or "") / "last.ckpt"
                if log_model == "all" and job_type == "pretrain" and last.is_file():
                    log_saved_checkpoint(self.experiment, last)

        from famlab.experiments.tracking.wandb_guard import start_wandb
        from lightning.pytorch.utilities import rank_zero_only

        if getattr(rank_zero_only, "rank", 0) != 0:
            return loggers  # only rank 0 logs to W&B (one run per job)
        with library_output():  # wandb.init prints its banners and settings warnings: into the run's log
            logger, note = start_wandb(
                FlatConfigWandbLogger, run_dir, mode, resuming=cfg.resume != "never",
                kwargs=dict(project=cfg.wandb.project, entity=cfg.wandb.entity, name=cfg.wandb.name or name,
                            group=cfg.wandb.group, job_type=job_type, tags=tags, save_dir=str(save_dir),
                            config=flatten(config), reinit="create_new"),
            )
        if note:  # once, on stderr: where the run went and how to upload it
            print(f"famlab: WARNING {note}", file=sys.stderr)
        if logger is not None:
            define_metrics(logger.experiment, job_type, x_axis(cfg.compare.match.value))
            loggers.append(logger)
    except Exception as e:  # noqa: BLE001 - any W&B trouble must not stop training (docs/scale.md)
        message = f"W&B logging disabled for this run ({type(e).__name__}: {e}); CSV metrics still written"
        warnings.warn(message, stacklevel=2)
    return loggers


def precision(cfg: Config) -> str:
    """``trainer.precision``; ``auto`` = bf16-mixed on a CUDA GPU with bf16, else 32-true."""
    if cfg.trainer.precision != "auto":
        return cfg.trainer.precision
    import torch

    cuda = torch.cuda.is_available() and cfg.trainer.accelerator in ("auto", "gpu", "cuda")
    return "bf16-mixed" if cuda and torch.cuda.is_bf16_supported() else "32-true"


def make_trainer(
    cfg: Config,
    run_dir: Path,
    loggers: list[Any],
    *,
    checkpoint_dir: Path,
    monitor: str,
    mode: str,
    max_steps: int = -1,
    max_epochs: int = -1,
    val_check_interval: int | None = None,
    limit_val_batches: int | None = None,
) -> Any:
    """A Lightning Trainer from ``trainer.*``: explicit checkpoint dirpath, last.ckpt (the previous one kept as
    last-prev.ckpt), the reliability callbacks, rich progress bar; glibc malloc tuned for training steps."""
    import lightning as L
    from famlab.experiments.configuration.lightning_check import check_lightning_settings
    from famlab.experiments.plumbing.checkpoints import checkpoint_callback, keep_previous_last
    from famlab.experiments.plumbing.faults import test_hook_callbacks
    from famlab.experiments.plumbing.heartbeat import Heartbeat
    from famlab.experiments.plumbing.reliability import reliability_callbacks
    from lightning.pytorch.callbacks import RichProgressBar

    keep_freed_memory()  # training steps stop re-faulting their activations (experiments/perf/allocator.py)
    t = cfg.trainer
    # the test hook's faults go first, so each reliability callback sees them in the same step
    callbacks: list[Any] = [checkpoint_callback(checkpoint_dir, monitor, mode), *test_hook_callbacks(),
                            *reliability_callbacks(cfg, checkpoint_dir)]
    # no bar (a log file, CI, a comparison's worker): a line a minute instead
    callbacks.append(RichProgressBar(leave=True) if t.progress_bar else Heartbeat(run_dir.name, heartbeat_seconds()))
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
        precision=precision(cfg),
        accumulate_grad_batches=t.accumulate_grad_batches,
        gradient_clip_val=cfg.optim.grad_clip,
        deterministic=t.deterministic,
        logger=loggers,
        callbacks=callbacks,
        enable_progress_bar=t.progress_bar,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,  # datamodules.ResumableSampler owns order and position
        # no_grad instead of inference_mode for evaluation: metric states reset inside trainer.validate()
        # (validate_first) would otherwise be inference tensors that fit's validation cannot update
        inference_mode=False,
        plugins=cluster_plugins(),
    )
    keep_previous_last(trainer)  # every write of last.ckpt first moves the old one to last-prev.ckpt
    return trainer


def cluster_plugins() -> list[Any]:
    """Under SLURM, Lightning's ``SLURMEnvironment`` supplies rank, world size and the main node, but famlab
    handles SIGUSR1 itself (checkpoint to ``last.ckpt`` as on SIGTERM, then requeue; see
    ``experiments/plumbing/signals.py``), so Lightning's own requeue (an ``hpc_ckpt`` file that ``resume=auto``
    does not read) is off."""
    from lightning.pytorch.plugins.environments import SLURMEnvironment

    return [SLURMEnvironment(auto_requeue=False)] if SLURMEnvironment.detect() else []


def maybe_compile(cfg: Config, module: Any) -> Any:
    """``torch.compile`` the network (inductor) when ``trainer.compile``; eager if compilation fails."""
    if cfg.trainer.compile:
        from famlab.families.compile import compile_network

        compile_network(module.net)  # in place; logs and stays eager on failure
    return module


def wandb_loggers(loggers: list[Any]) -> list[Any]:
    """The WandbLoggers among ``loggers`` (none when W&B is disabled or failed to start)."""
    from lightning.pytorch.loggers import WandbLogger

    return [logger for logger in loggers if isinstance(logger, WandbLogger)]


def wandb_pretrain_results(cfg: Config, loggers: list[Any], run_dir: Path, results: dict[str, Any]) -> None:
    """Evaluation results into the run's W&B summary, tokenizer + checkpoint artifacts; never raises."""
    from famlab.experiments.tracking.wandb_metrics import pretrain_summary, record_summary

    record_summary(loggers, pretrain_summary(results))
    for logger in wandb_loggers(loggers):
        try:
            log_pretrain_artifacts(logger.experiment, run_dir, mode=log_model_mode(cfg.wandb.log_model),
                                   final_step=int(results["steps"]))
        except Exception as e:  # noqa: BLE001 - W&B trouble never stops a run (docs/scale.md)
            warnings.warn(f"W&B artifacts not logged ({type(e).__name__}: {e})", stacklevel=2)


def wandb_use_pretrained(loggers: list[Any], source_dir: Path | None, ckpt: Path | None) -> None:
    """Declare the pretraining run a fine-tune or probe starts from (W&B lineage); never raises."""
    if source_dir is None:
        return
    for logger in wandb_loggers(loggers):
        try:
            use_run_artifacts(logger.experiment, source_dir, ckpt)
        except Exception as e:  # noqa: BLE001 - W&B trouble never stops a run (docs/scale.md)
            warnings.warn(f"W&B lineage not recorded ({type(e).__name__}: {e})", stacklevel=2)


def close_wandb(loggers: list[Any]) -> None:
    """Finish the W&B run so the offline files are complete before the next run starts."""
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        if isinstance(logger, WandbLogger):
            try:
                logger.experiment.finish()
            except Exception:  # noqa: BLE001
                pass


def stop_console_capture(loggers: list[Any]) -> None:
    """Stop copying the console into W&B runs that stay open while other runs train (a fine-tuning grid).

    wandb copies every write to stdout / stderr into each open run's console log; a run kept open for its
    test scores would collect the next runs' output. wandb has no public call for this
    (``experiments/plumbing/internals.py``).
    """
    for logger in wandb_loggers(loggers):
        try:
            stop_console_copy(logger.experiment)
        except Exception:  # noqa: BLE001 - W&B trouble never stops a run (docs/scale.md)
            pass
