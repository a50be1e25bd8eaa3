"""The one structured config schema every famlab command reads.

OmegaConf over dataclasses: merging YAML presets and ``key=value`` overrides onto
``OmegaConf.structured(Config)`` rejects unknown keys (with OmegaConf's "Did you mean" suggestion),
checks enum values and coerces types. ``OmegaConf.to_object`` then gives real dataclasses, which runs
``ModelConfig.__post_init__`` (derived fields and the model's own checks).

Every section is a frozen dataclass: once a command has composed and validated its config, nothing changes it.
A step that needs a variant (a comparison arm's budget, a fine-tune's seeds, the tokenizer's vocabulary in the
model section) builds a new one with :func:`with_values`, and hands that on; the type checker refuses an assignment
to a field.

Every field is documented where it is declared. ``None`` on an ``Optional`` field means "derived"
(from the family, the tokenizer or another field) and says where from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, TypeVar

from famlab.families.config import BIG, ModelConfig, check_ranges
from famlab.families.registry import family_names
from famlab.objectives.registry import SETTINGS as OBJECTIVE_DEFAULTS


class ConfigInputError(ValueError):
    """A bad config value, key or combination; the message is one line naming the key(s)."""


SEED = (0, 2**32 - 1, "[]")  # what numpy / Lightning's seed_everything accept


class TokenizerKind(str, Enum):
    bpe = "bpe"  # byte-level BPE (GPT-2 style); the default
    wordpiece = "wordpiece"  # BERT style
    unigram = "unigram"  # SentencePiece-unigram style (T5)


class WandbMode(str, Enum):
    auto = "auto"  # online where W&B credentials exist (WANDB_API_KEY or ~/.netrc), else offline
    online = "online"
    offline = "offline"  # files only; `wandb sync <run_dir>/wandb/offline-run-*` later
    disabled = "disabled"  # no WandbLogger at all (CSV only)


class Pooling(str, Enum):
    cls = "cls"  # first position ([CLS] for BERT), through BERT's dense+tanh pooler
    last = "last"  # last non-pad token, found from the attention mask (GPT)
    mean = "mean"  # mean over non-pad positions (T5 encoder default)
    decoder = "decoder"  # T5 only: decoder hidden state at the first step (decoder start token)


class FinetuneMode(str, Enum):
    full = "full"  # train the body and a classification head (the grid x seeds protocol)
    probe = "probe"  # linear probe: frozen body, pooled features, logistic regression, against random-init bodies


class CompareMatch(str, Enum):
    flops = "flops"  # training steps chosen so total training FLOPs agree within 2 %
    params = "params"  # per-family sizes chosen so parameter counts agree within 2 %
    tokens = "tokens"  # the same number of corpus tokens consumed


@dataclass(frozen=True)
class TokenizerConfig:
    kind: TokenizerKind = TokenizerKind.bpe  # tokenizer model trained on the corpus
    vocab_size: int = 8192  # requested size incl. special tokens and sentinels (unigram may give fewer)
    num_sentinels: int = 100  # T5 sentinels <extra_id_i>, ids counting down from the top of the vocabulary
    path: str | None = None  # an existing tokenizer.json to reuse (a comparison shares one); None = train
    sample_bytes: int = 200_000_000  # train the tokenizer on a seeded sample of this many bytes of training documents

    def __post_init__(self) -> None:
        check_ranges(self, "data.tokenizer", {"vocab_size": (1, 2**24, "[]"), "num_sentinels": (0, 10_000, "[]"),
                                              "sample_bytes": (1, 2**40, "[]")})


@dataclass(frozen=True)
class DataConfig:
    # pretraining corpus: wordnet | file.txt | file.jsonl (also .gz / .zst) | file.parquet | directory |
    # hf:<name>[:<config>] | a prepared dataset directory (famlab prepare; docs/data.md)
    corpus: str = "wordnet"
    # fine-tuning task: wordnet-supersense | wordnet-pairs | wordnet-domain | file.csv | file.jsonl | hf:<name>[:<cfg>];
    # or a suite (famlab finetune): suite | task,task,... | suite.yaml (datamodules/suite.py)
    task: str = "wordnet-supersense"
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    seq_len: int = 128  # tokens the network reads per pretraining sample (T5: encoder input length)
    # global batch: samples of one optimizer step over every device and micro-batch; each rank loads
    # batch_size / (devices x nodes x trainer.accumulate_grad_batches), so a preset trains the same on any hardware
    batch_size: int = 32
    val_fraction: float | None = None  # held-out fraction; None = 0.05 for a corpus, 0.1 for a task
    test_fraction: float = 0.1  # task test fraction, for a task file without a split column
    seed: int = 0  # document order in the token file and the task split (same for every family)
    shuffle: bool = False  # permute pretraining blocks per epoch (pure function of seed and epoch)
    num_workers: int = 0  # DataLoader workers (tokenization happens once in prepare_data, so 0 is fine)
    val_batches: int | None = None  # cap on validation blocks kept from the corpus; None = all
    text_column: str = "text"  # task files: the text column
    text_pair_column: str | None = None  # task files: the second text column for sentence pairs
    label_column: str = "label"  # task files: the label column (string or integer labels)
    split_column: str = "split"  # task files: train/val/test column; absent = split by the fractions
    max_len: int = 128  # fine-tuning: longest classifier input in tokens, special tokens included
    cache_dir: str | None = None  # tokenizers / token files; None = $FAMLAB_CACHE or ~/.cache/famlab

    def __post_init__(self) -> None:
        check_ranges(self, "data", {
            "seq_len": (2, 2**20, "[]"), "batch_size": (1, 2**20, "[]"), "val_fraction": (0, 1, "()"),
            "test_fraction": (0, 1, "()"), "seed": SEED, "num_workers": (0, 256, "[]"), "val_batches": (1, BIG, "[]"),
            "max_len": (2, 2**20, "[]"),
        })


@dataclass(frozen=True)
class ObjectiveConfig:
    # The valid names per family: `famlab presets` (famlab.objectives.registry); defaults from the registry too.
    name: str | None = None  # the objective; None = the family's default (famlab.families.faithful)
    # MLM: fraction of non-special tokens selected (80 % [MASK], 10 % random, 10 % kept)
    mask_rate: float = OBJECTIVE_DEFAULTS["mask_rate"]
    noise_density: float = OBJECTIVE_DEFAULTS["noise_density"]  # span corruption: fraction of raw tokens that are noise
    mean_span: float = OBJECTIVE_DEFAULTS["mean_span"]  # span corruption: mean noise-span length in tokens
    prefix_fraction: float | None = OBJECTIVE_DEFAULTS["prefix_fraction"]  # prefix_lm: prefix / seq_len; None = uniform
    # ul2: R, X, S mode rates (normalised)
    ul2_rates: list[float] = field(default_factory=lambda: list(OBJECTIVE_DEFAULTS["ul2_rates"]))
    ul2_x_density: float = OBJECTIVE_DEFAULTS["ul2_x_density"]  # ul2: noise density of the extreme (X) denoiser
    ul2_x_mean_span: float = OBJECTIVE_DEFAULTS["ul2_x_mean_span"]  # ul2: mean span of the extreme (X) denoiser
    span_p: float = OBJECTIVE_DEFAULTS["span_p"]  # span_mlm: geometric span-length parameter (SpanBERT; mean 3.8)
    max_span: int = OBJECTIVE_DEFAULTS["max_span"]  # span_mlm: longest masked span
    # A registered objective's own settings (objectives/registry.py ``Entry.own``), given as objective.<setting>=...:
    # composing moves them here, checks them against the chosen objective and fills its defaults.
    own: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_ranges(self, "objective", {
            "mask_rate": (0, 1, "()"), "noise_density": (0, 0.5, "(]"), "mean_span": (1, 2**16, "[]"),
            "prefix_fraction": (0, 1, "()"), "ul2_rates": (0, 1, "[]"), "ul2_x_density": (0, 0.5, "(]"),
            "ul2_x_mean_span": (1, 2**16, "[]"), "span_p": (0, 1, "()"), "max_span": (1, 2**16, "[]"),
        })


@dataclass(frozen=True)
class OptimConfig:
    name: str = "adamw"  # pretraining optimiser: adamw | adafactor (T5's; relative step sizes, lr caps them)
    lr: float = 1e-3  # peak learning rate (AdamW) at base scale; the effective peak is lr * lr_scale
    lr_scale: float = 1.0  # set by size presets, so each family keeps its own lr relative to the others
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])  # AdamW betas
    eps: float = 1e-8  # AdamW epsilon
    weight_decay: float = 0.01  # decoupled weight decay on every >= 2-D weight (matmuls, embeddings); not biases, norms
    warmup_steps: int = 100  # linear warmup from 0 to lr, in optimizer steps
    min_lr_ratio: float = 0.1  # cosine decay ends at lr * min_lr_ratio at trainer.max_steps
    grad_clip: float | None = 1.0  # clip the global gradient norm; None = no clipping
    fused: bool | None = None  # fused AdamW; None = automatic (float parameters on CPU or CUDA)

    def __post_init__(self) -> None:
        check_ranges(self, "optim", {
            "lr": (0, 10, "(]"), "lr_scale": (0, 1000, "(]"), "betas": (0, 1, "[)"), "eps": (0, 1, "(]"),
            "weight_decay": (0, 10, "[]"), "warmup_steps": (0, BIG, "[]"), "min_lr_ratio": (0, 1, "[]"),
            "grad_clip": (0, 1e6, "(]"),
        })
        if self.name not in ("adamw", "adafactor"):
            raise ConfigInputError(f"optim.name={self.name} is not one of: adamw, adafactor")


GPU_ACCELERATORS = ("auto", "gpu", "cuda")  # the values of trainer.accelerator that train on a CUDA GPU if present


@dataclass(frozen=True)
class TrainerConfig:
    max_steps: int = 1000  # optimizer steps to train (pretraining budget)
    val_check_interval: int = 100  # validate every this many training batches
    limit_val_batches: int | None = None  # validation batches per check; None = all
    validate_first: bool = True  # validate once before training, so curves start at step 0
    log_every_n_steps: int = 10  # training-metric logging interval
    accelerator: str = "auto"  # Lightning accelerator: auto | cpu | gpu | cuda | mps
    devices: int | str = "auto"  # Lightning devices: auto | N | "0,1"
    strategy: str = "auto"  # Lightning strategy: auto | ddp | ddp_spawn | fsdp ...
    num_nodes: int = 1  # nodes for multi-node DDP
    precision: str = "auto"  # Lightning precision; auto = bf16-mixed on CUDA with bf16, else 32-true
    compile: bool = False  # torch.compile the network (eager fallback if compilation fails)
    max_bad_steps: int = 5  # consecutive non-finite steps tolerated before stopping with a checkpoint
    accumulate_grad_batches: int = 1  # micro-batches per optimizer step (they share the global data.batch_size)
    deterministic: bool = False  # torch deterministic algorithms (slower)
    progress_bar: bool = True  # rich progress bar
    max_epochs: int = -1  # pretraining runs by steps; -1 = as many epochs as max_steps needs

    def __post_init__(self) -> None:
        check_ranges(self, "trainer", {
            "max_steps": (1, BIG, "[]"), "val_check_interval": (1, BIG, "[]"), "limit_val_batches": (1, BIG, "[]"),
            "log_every_n_steps": (1, BIG, "[]"), "num_nodes": (1, 100_000, "[]"), "max_bad_steps": (1, BIG, "[]"),
            "accumulate_grad_batches": (1, 2**20, "[]"), "max_epochs": (-1, BIG, "[]"),
        })
        if self.max_epochs == 0:
            raise ConfigInputError("trainer.max_epochs=0 trains nothing; use -1 (as many as max_steps needs) or >= 1")
        if not isinstance(self.compile, bool):
            raise ConfigInputError(f"trainer.compile={self.compile!r} is not one of: true, false")


@dataclass(frozen=True)
class WandbConfig:
    project: str = "famlab"  # W&B project
    entity: str | None = None  # W&B entity (user or team); None = the account's default
    group: str | None = None  # run group (the comparison or sweep name); None = no group
    mode: WandbMode = WandbMode.auto  # auto | online | offline | disabled
    tags: list[str] = field(default_factory=list)  # extra tags; family, objective and pos are always added
    name: str | None = None  # W&B run name; None = the run's readable name
    dir: str | None = None  # folder holding the W&B run files (<dir>/wandb/); None = the run directory
    log_model: str = "false"  # checkpoints to upload: false (a path + checksum reference) | final | all


@dataclass(frozen=True)
class FinetuneConfig:
    epochs: int = 3  # passes over the training split (ignored when max_steps is set)
    max_steps: int | None = None  # optimizer steps instead of epochs; None = use epochs
    mode: FinetuneMode = FinetuneMode.full  # full (fine-tune) | probe (frozen body + logistic regression)
    lr: float = 1e-4  # body learning rate
    head_lr: float | None = None  # classification-head learning rate; None = 10 x lr (fresh weights)
    # Hyper-parameter grid: every (body lr, head lr) pair is fine-tuned for every seed; the pair with the best mean
    # validation `monitor` over seeds is selected, and only its models read the test split. null = [lr] / [head_lr].
    lr_grid: list[float] | None = None
    head_lr_grid: list[float] | None = None
    batch_size: int | None = None  # fine-tuning global batch (all ranks, one step); None = data.batch_size
    head_dropout: float = 0.1  # dropout before the classifier
    # the body's dropout (embeddings, attention weights, residual branches) while fine-tuning; None keeps the
    # model's own. Pretraining at tiny scale runs without dropout, and a few labels overfit without it.
    dropout: float | None = None
    # standardise pooled features over the batch (BatchNorm, no affine) before the classifier: pretrained pooled
    # features share one large direction with little spread between examples, which a fresh classifier separates
    # slowly (docs/protocol.md, Fine-tuning)
    standardize: bool = True
    weight_decay: float = 0.01  # AdamW weight decay while fine-tuning
    warmup_ratio: float = 0.1  # fraction of fine-tuning steps spent in linear warmup
    pooling: Pooling | None = None  # cls | last | mean | decoder; None = mean (hf: BERT with a pooler: cls)
    seeds: list[int] = field(default_factory=lambda: [0])  # one fine-tune per seed; results give mean +- std
    # seeds that train at every grid point for the selection (the first k of `seeds`); the others train at the
    # selected point only, so a grid of P points costs P*k + (seeds - k) fine-tunes. None = every seed selects.
    select_seeds: int | None = None
    val_every: int | None = None  # validate every N steps; None = each epoch (4 times over max_steps if set)
    monitor: str = "val/acc"  # validation metric that picks the best checkpoint (val/acc | val/f1 | val/mcc | val/loss)
    probe_seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])  # probe: random-init bodies compared
    probe_c_grid: list[float] = field(default_factory=lambda: [0.01, 0.1, 1.0, 10.0])  # probe: inverse L2 strengths

    def __post_init__(self) -> None:
        check_ranges(self, "finetune", {
            "epochs": (1, 1_000_000, "[]"), "max_steps": (1, BIG, "[]"), "lr": (0, 10, "(]"), "head_lr": (0, 10, "(]"),
            "head_dropout": (0, 1, "[)"), "dropout": (0, 1, "[)"), "weight_decay": (0, 10, "[]"),
            "warmup_ratio": (0, 1, "[)"), "seeds": SEED,
            "val_every": (1, BIG, "[]"), "select_seeds": (1, BIG, "[]"),
        })
        if self.select_seeds is not None and self.select_seeds > len(self.seeds):
            raise ConfigInputError(f"finetune.select_seeds={self.select_seeds} is more than the {len(self.seeds)} "
                                   f"finetune.seeds={list(self.seeds)}")


LAUNCHERS = ("local", "slurm", "submitit-local")


@dataclass(frozen=True)
class CompareConfig:
    families: list[str] = field(default_factory=lambda: list(family_names()))  # families compared; default: all
    objectives: list[str] = field(default_factory=list)  # arms: objective or family:objective; [] = presets
    match: CompareMatch = CompareMatch.flops  # budget matched across families: flops | params | tokens
    pretrain_seeds: list[int] = field(default_factory=lambda: [0])  # pretraining seeds per family
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # fine-tuning seeds per pretrained model
    # seeds of the no-pretraining baseline; None = compare.seeds (the same seeds on both sides of every gain)
    scratch_seeds: list[int] | None = None
    probe: bool = True  # linear probe of every pretrained body against random-init bodies (finetune.probe_*)
    lr_grid: list[float] = field(default_factory=list)  # effective peak pretraining lrs tried per family; [] = presets
    tolerance: float = 0.02  # allowed relative budget mismatch between families
    task_limit: int | None = None  # fine-tune on a seeded subsample: this many train examples; None = all
    task_eval_limit: int | None = None  # validation and test examples each in that subsample; None = task_limit // 5
    # jobs (pretraining runs, fine-tunes, baselines) run side by side, each in a process with cores // workers threads
    workers: int = 1
    # evaluation of every pretrained model: validation documents scored for bits per byte (BERT: pseudo-log-likelihood,
    # one mask at a time), and items per bundled zero-shot task (the first 300 hold every minimal-pair group)
    bpb_docs: int = 100
    zero_shot_items: int = 300
    # body lrs of the fine-tuning grid every arm gets, around the preset's finetune.lr: 2 = {lr, 3 lr};
    # 3 = {lr / 3, lr, 3 lr} (then an edge selection says the best lr may lie outside); finetune.lr_grid overrides
    finetune_lr_points: int = 2
    # where jobs run: local (worker processes on this machine) | slurm (each job a SLURM job through submitit, the
    # comparison directory on the shared filesystem) | submitit-local (submitit's local executor: the slurm path on
    # one machine, each job a process of its own); with slurm, compare.workers is the most jobs queued at once
    launcher: str = "local"
    slurm_partition: str | None = None  # slurm: the partition; None = the cluster's default
    slurm_time_min: int = 240  # slurm / submitit-local: a job's time limit; a job stopped by it is requeued
    slurm_cpus_per_task: int = 8  # slurm: CPU cores of each job (data loading, evaluation)

    def __post_init__(self) -> None:
        check_ranges(self, "compare", {
            "pretrain_seeds": SEED, "seeds": SEED, "scratch_seeds": SEED, "lr_grid": (0, 10, "(]"),
            "tolerance": (0, 1, "()"), "task_limit": (1, BIG, "[]"), "workers": (1, 1024, "[]"),
            "bpb_docs": (1, BIG, "[]"), "zero_shot_items": (1, BIG, "[]"), "finetune_lr_points": (2, 3, "[]"),
            "slurm_time_min": (1, BIG, "[]"), "slurm_cpus_per_task": (1, 1024, "[]"),
        })
        if self.launcher not in LAUNCHERS:
            raise ConfigInputError(f"compare.launcher={self.launcher} is not one of: {', '.join(LAUNCHERS)}")


@dataclass(frozen=True)
class SweepConfig:
    parallel: int = 1  # trials run at the same time (local sweeps)
    count: int | None = None  # trials for method=random; None = the sweep file's run_cap or 10
    seed: int = 0  # seed of the random-search sampler
    seeds: list[int] | None = None  # replicate every trial once per seed (sets `seed`); summary: mean +- std

    def __post_init__(self) -> None:
        check_ranges(self, "sweep", {"parallel": (1, 1024, "[]"), "count": (1, 1_000_000, "[]"), "seed": SEED})


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    compare: CompareConfig = field(default_factory=CompareConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    name: str | None = None  # readable run name; None = <family>-<objective>-<size preset>
    seed: int = 0  # global seed (weights, dropout, corruption)
    run_dir: str | None = None  # run directory; None = runs/<name>-<YYYYmmdd-HHMMSS>
    init: str | None = None  # finetune: <run_dir> | <checkpoint.ckpt> | hf:<name or dir> | scratch
    resume: str = "never"  # never | auto | <checkpoint path>
    size: str | None = None  # set by size presets (tiny/small/base); used in the default run name
    # modules imported before anything else, in every process famlab starts (they register families, objectives,
    # position schemes): `--plugin <module>` on any command appends one (docs/architecture.md, Plugins)
    plugins: list[str] = field(default_factory=list)
    provenance: dict[str, Any] | None = None  # written by famlab into config.yaml; ignored on input

    def __post_init__(self) -> None:
        check_ranges(self, "", {"seed": SEED})


Section = TypeVar("Section")


def with_values(section: Section, changes: Mapping[str, Any]) -> Section:
    """A copy of a frozen config (or one of its sections) with dotted keys set: ``{"trainer.max_steps": 50}``.

    Each changed section is rebuilt through its constructor, so its own checks (``__post_init__``) run on the new
    values; the sections not named are shared with the original, which stays as it was.
    """
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        head, _, rest = key.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    for head, sub in nested.items():
        direct[head] = with_values(direct.get(head, getattr(section, head)), sub)
    return replace(section, **direct)  # type: ignore[type-var]
