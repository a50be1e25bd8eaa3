"""What each config command reads, as types: the part of the config a step takes.

Each command that composes a config (``pretrain``, ``finetune``, ``probe``, ``compare``, ``sweep``, ``prepare``)
hands it on as one of the plans below, and every function a plan's section goes to takes that section as one of the
views below (or less). A view is a :class:`typing.Protocol` of read-only properties: the config's frozen dataclasses
satisfy it as they are, and the type checker (``.ci/typecheck``) refuses a step that reads a key its plan does not
name, or hands a section on to a function that wants more of it. So what a command reads follows from these types:
:mod:`famlab.experiments.configuration.reads` derives each command's keys from them, for ``famlab <command> --help``
and for refusing an override the command would ignore; ``tests/experiments/test_keys_read.py`` records the keys each
command's code reads and checks that every key a plan names is read by some setting of the command.

A view's property typed as a config section (``ModelConfig``, ``TrainerConfig``) is that whole section read;
one typed as another view is the keys that view names.
"""

from __future__ import annotations

from dataclasses import Field
from typing import Any, ClassVar, Protocol

from famlab.experiments.configuration.config import (
    CompareConfig,
    CompareMatch,
    DataConfig,
    FinetuneConfig,
    ObjectiveConfig,
    OptimConfig,
    Pooling,
    SweepConfig,
    TokenizerConfig,
    TrainerConfig,
    WandbConfig,
)
from famlab.families.config import ModelConfig

# --- the data section, by what reads it


class Cached(Protocol):
    """Where prepared corpora, tokenizers and downloaded tasks are cached (``data.cache_dir``)."""

    @property
    def cache_dir(self) -> str | None: ...


class SeqLen(Protocol):
    """The pretraining sample length an objective is built for."""

    @property
    def seq_len(self) -> int: ...


class TokenizerData(Cached, Protocol):
    """A run's tokenizer: trained once per corpus and settings (seeded), or ``data.tokenizer.path``."""

    @property
    def tokenizer(self) -> TokenizerConfig: ...
    @property
    def seed(self) -> int: ...


class CorpusData(TokenizerData, Protocol):
    """A corpus prepared once and its tokenizer trained once (``famlab prepare``; pretraining; the tokenizer of a
    fine-tune from scratch)."""

    @property
    def corpus(self) -> str: ...
    @property
    def val_fraction(self) -> float | None: ...


class PretrainData(CorpusData, SeqLen, Protocol):
    """The data section as pretraining reads it: the corpus and how it is cut and batched."""

    @property
    def batch_size(self) -> int: ...
    @property
    def shuffle(self) -> bool: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def val_batches(self) -> int | None: ...


class SplitData(Protocol):
    """How a task without a split column is split."""

    @property
    def val_fraction(self) -> float | None: ...
    @property
    def test_fraction(self) -> float: ...
    @property
    def seed(self) -> int: ...


class TaskData(SplitData, Cached, Protocol):
    """A task file, its columns and split (``famlab.datamodules.load_task``), and the classifier's input length."""

    @property
    def task(self) -> str: ...
    @property
    def text_column(self) -> str: ...
    @property
    def text_pair_column(self) -> str | None: ...
    @property
    def label_column(self) -> str: ...
    @property
    def split_column(self) -> str: ...
    @property
    def max_len(self) -> int: ...


class ProbeData(TaskData, TokenizerData, Protocol):
    """The data section as a probe reads it: the task, and the tokenizer the run being probed trained."""


class FinetuneData(ProbeData, CorpusData, Protocol):
    """The data section as a fine-tune reads it: the task, its batches, and the corpus a scratch model's tokenizer
    is trained on."""

    @property
    def batch_size(self) -> int: ...
    @property
    def num_workers(self) -> int: ...


# --- the other sections, where a command reads part of one


class Accelerator(Protocol):
    """The device a model trains and is evaluated on (``trainer.accelerator``)."""

    @property
    def accelerator(self) -> str: ...


class TrainerSetup(Accelerator, Protocol):
    """How a Lightning Trainer runs, not how long: a fine-tune takes these from ``trainer.*`` and its budget and
    validation schedule from ``finetune.*`` (``trainer.max_steps`` and the like are pretraining's)."""

    @property
    def devices(self) -> int | str: ...
    @property
    def strategy(self) -> str: ...
    @property
    def num_nodes(self) -> int: ...
    @property
    def precision(self) -> str: ...
    @property
    def accumulate_grad_batches(self) -> int: ...
    @property
    def deterministic(self) -> bool: ...
    @property
    def log_every_n_steps(self) -> int: ...
    @property
    def max_bad_steps(self) -> int: ...
    @property
    def progress_bar(self) -> bool: ...


class AdamShape(Protocol):
    """What a fine-tune takes from ``optim.*``: AdamW's betas and epsilon and the gradient clip (its rates and
    schedule are ``finetune.*``)."""

    @property
    def betas(self) -> list[float]: ...
    @property
    def eps(self) -> float: ...
    @property
    def grad_clip(self) -> float | None: ...


class ProbeSettings(Protocol):
    """The linear probe's settings in ``finetune.*``."""

    @property
    def pooling(self) -> Pooling | None: ...
    @property
    def probe_seeds(self) -> list[int]: ...
    @property
    def probe_c_grid(self) -> list[float]: ...


class ObjectiveName(Protocol):
    """The objective a run was pretrained with, for its W&B tags."""

    @property
    def name(self) -> str | None: ...


class Matched(Protocol):
    """The budget a comparison matches (``compare.match``): the x-axis of a run's W&B charts."""

    @property
    def match(self) -> CompareMatch: ...


# --- the plans: what each command's step takes


class Recorded(Protocol):
    """A config ``config.yaml`` records whole (a dataclass), with the plugins that registered what it names."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def plugins(self) -> list[str]: ...


class ModelPlan(Protocol):
    """A plan with a model section (the tokenizer's vocabulary is written into it)."""

    @property
    def model(self) -> ModelConfig: ...


class RunPlan(ModelPlan, Recorded, Protocol):
    """What every run-making step reads: where the run goes, what it is called and whether it resumes, its model,
    and its W&B run (the section, the run's tags, the x-axis of its charts)."""

    @property
    def name(self) -> str | None: ...
    @property
    def run_dir(self) -> str | None: ...
    @property
    def resume(self) -> str: ...
    @property
    def wandb(self) -> WandbConfig: ...
    @property
    def compare(self) -> Matched: ...


class PreparePlan(Protocol):
    """``famlab prepare``: the corpus into a prepared directory (``run_dir``, else the cache)."""

    @property
    def data(self) -> CorpusData: ...
    @property
    def run_dir(self) -> str | None: ...


class ArmPlan(ModelPlan, Protocol):
    """What an arm's objective is built from: ``objective.*`` for ``model.family`` at ``data.seq_len``."""

    @property
    def objective(self) -> ObjectiveConfig: ...
    @property
    def data(self) -> SeqLen: ...


class PretrainPlan(RunPlan, ArmPlan, Protocol):
    """``famlab pretrain``: one pretraining run (``size`` names it when ``name`` is unset)."""

    @property
    def data(self) -> PretrainData: ...
    @property
    def optim(self) -> OptimConfig: ...
    @property
    def trainer(self) -> TrainerConfig: ...
    @property
    def seed(self) -> int: ...
    @property
    def size(self) -> str | None: ...


class ProbePlan(RunPlan, Protocol):
    """``famlab probe``: features of a frozen body (``init``) on ``trainer.accelerator``'s device, a logistic
    regression on them, against random-init bodies of the same shape."""

    @property
    def init(self) -> str | None: ...
    @property
    def objective(self) -> ObjectiveName: ...
    @property
    def data(self) -> ProbeData: ...
    @property
    def trainer(self) -> Accelerator: ...
    @property
    def finetune(self) -> ProbeSettings: ...


class FinetunePlan(ProbePlan, Protocol):
    """``famlab finetune``: a model (``init``) fine-tuned on a task or a suite over ``finetune.*``'s grid and seeds
    (or, with ``finetune.mode=probe``, probed: so it reads what a probe reads)."""

    @property
    def data(self) -> FinetuneData: ...
    @property
    def optim(self) -> AdamShape: ...
    @property
    def trainer(self) -> TrainerSetup: ...
    @property
    def finetune(self) -> FinetuneConfig: ...
    @property
    def seed(self) -> int: ...


class ComparePlan(PretrainPlan, FinetunePlan, Protocol):
    """``famlab compare``: every arm's pretraining, its fine-tunes and probes, and the scratch baselines, under
    ``compare.*``; a job's config is this plan with the job's own directory, name, W&B group, ``init`` and seeds."""

    @property
    def objective(self) -> ObjectiveConfig: ...
    @property
    def data(self) -> DataConfig: ...
    @property
    def optim(self) -> OptimConfig: ...
    @property
    def trainer(self) -> TrainerConfig: ...
    @property
    def compare(self) -> CompareConfig: ...


class SweepPlan(Protocol):
    """``famlab sweep``: the trials of a sweep file, each a famlab command of its own; ``wandb.*`` reaches every
    trial (and the sweep's report run), the plugins too."""

    @property
    def sweep(self) -> SweepConfig: ...
    @property
    def wandb(self) -> WandbConfig: ...
    @property
    def run_dir(self) -> str | None: ...
    @property
    def resume(self) -> str: ...
    @property
    def plugins(self) -> list[str]: ...
