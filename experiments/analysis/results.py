"""The typed results the commands hand on and the report reads back: a comparison's budget ``Plan``, one
pretraining run's ``PretrainResult``, one fine-tune's ``FinetuneResult``, one linear probe's ``ProbeResult``, and
the ``RunRecord`` the report reads from a run directory (its config, results, evaluation and metrics); the records
inside them: bits per byte (``ByteScore``), a zero-shot task's scores (``ZeroShotResult``), a run's ``eval.json``
(``EvalRecord``), one probed body (``ProbeScore``, ``ProbeGain``); and the report's row per arm (``ArmRow``).

Each serialises to the JSON file it stands for (``plan.json``, a run's ``results.json``) with the same keys in the
same order as the dicts these files were written from, and reads the files back. Optional fields hold what older
files may lack (a plan written before ``reference_steps`` or before comparison arms named their family and
objective); a field left unset is left out of the JSON, so an old file reads back and writes out as it was.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from famlab.experiments.configuration.config import Config

if TYPE_CHECKING:
    from omegaconf import DictConfig

T = TypeVar("T")
JsonDict = dict[str, Any]  # a JSON object as json.loads reads it: the one untyped form, at the files' edge


def plain(value: object) -> object:
    """``value`` as JSON data: a nested record as its ``to_json()`` dict, dicts and lists element by element."""
    if isinstance(value, (JsonRecord, Plan)):
        return value.to_json()
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def to_json(record: object, renames: dict[str, str] | None = None) -> JsonDict:
    """A dataclass as a JSON dict in field order, fields that are ``None`` left out (nested records as their JSON
    dicts); ``renames`` maps a field to its JSON key."""
    renames = renames or {}
    out = {}
    for field in dataclasses.fields(record):  # type: ignore[arg-type]
        value = getattr(record, field.name)
        if value is not None:
            out[renames.get(field.name, field.name)] = plain(value)
    return out


def from_json(cls: type[T], data: JsonDict, renames: dict[str, str] | None = None) -> T:
    """The dataclass ``cls`` from a JSON dict written by :func:`to_json` (keys it does not know are ignored)."""
    renames = renames or {}
    names = {renames.get(f.name, f.name): f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{names[key]: value for key, value in data.items() if key in names})


R = TypeVar("R", bound="JsonRecord")


class JsonRecord:
    """Base of the dataclasses below that are one JSON mapping, key for field: :func:`to_json` writes it and
    :func:`from_json` reads it back (an older file lacking an optional field included)."""

    def to_json(self) -> JsonDict:
        """The JSON dict."""
        return to_json(self)

    @classmethod
    def from_json(cls: type[R], data: JsonDict) -> R:
        """Read the JSON dict."""
        return from_json(cls, data)


@dataclasses.dataclass(kw_only=True)
class ArmBudget(JsonRecord):
    """One arm's share of the matched budget (an entry of ``plan.json``'s ``families``; older plans lack
    ``family`` and ``objective``)."""

    family: str | None = None  # older plans: the arm is the family
    objective: str | None = None
    steps: int
    flops_per_step: int
    corpus_tokens_per_step: int
    flops: int
    corpus_tokens: int
    params: int
    non_embedding_params: int
    batch_shape: str
    dim: int
    ffn_dim: int
    num_layers: int
    lr_grid: dict[str, float] | None = None  # compare.lr_grid: final validation loss per tried lr
    lr: float | None = None  # compare.lr_grid: the lr chosen
    passes: float | None = None  # corpus_tokens over the prepared corpus's training tokens (None: not known)


@dataclasses.dataclass(kw_only=True)
class Plan:
    """A comparison's budget plan (``plan.json``): what each arm trains and how closely the budgets match.

    ``arms`` is ``families`` in the JSON (the key keeps its historical name: with ``compare.objectives=[]`` the
    arms are the families).
    """

    match: str  # compare.match: flops | tokens | params
    tolerance: float
    arms: dict[str, ArmBudget]
    target_non_embedding_params: int | None = None  # match=params: the reference arm's count
    target: float | None = None  # match=flops / tokens: the budget every arm matches
    reference_steps: int | None = None  # match=flops / tokens: trainer.max_steps of the median-cost arm
    reference: str | None = None  # what the target was taken from, in words
    achieved_spread: float | None = None  # largest relative difference between arms on the matched measure
    tokenizer_hash: str | None = None
    corpus_train_tokens: int | None = None  # the prepared corpus's training-split tokens (None: not prepared yet)
    corpus_size: str | None = None  # where corpus_train_tokens was read, or why it is not known

    def to_json(self) -> JsonDict:
        """The ``plan.json`` dict."""
        out = to_json(self, {"arms": "families"})
        out["families"] = {arm: budget.to_json() for arm, budget in self.arms.items()}
        return out

    @classmethod
    def from_json(cls, data: JsonDict) -> Plan:
        """Read ``plan.json``."""
        arms = {arm: ArmBudget.from_json(entry) for arm, entry in data["families"].items()}
        return from_json(cls, {**data, "families": arms}, {"arms": "families"})


@dataclasses.dataclass(kw_only=True)
class ByteScore(JsonRecord):
    """A pretrained model's bits per byte on validation texts (``byte_score`` in ``results.json`` and
    ``eval.json``)."""

    measure: str  # bits_per_byte (GPT, T5: a likelihood) or pll_bits_per_byte (BERT's pseudo-log-likelihood)
    value: float
    num_texts: int
    num_bytes: int
    num_skipped: int | None = None  # texts that could not be scored; written only when there were some


@dataclasses.dataclass(kw_only=True)
class PretrainResult(JsonRecord):
    """One pretraining run (its ``results.json``, ``job: pretrain``; older files lack ``objective`` or
    ``budget``)."""

    job: str = "pretrain"
    family: str
    objective: str | None = None  # the pretraining objective (registry name)
    run_dir: str
    steps: int
    num_params: int
    first: dict[str, float]  # validation metrics before training (trainer.validate_first)
    final: dict[str, float]  # validation metrics at the end (val/loss, val/ppl, val/unigram_loss ...)
    budget: dict[str, float] | None = None  # tokens, flops, flops_per_step
    wall_s: float  # from composition to the end (imports not included)
    setup_s: float | None = None  # corpus, tokenizer, token file, network, W&B start
    cpu_s: float | None = None  # CPU seconds of the process: less sensitive to a busy machine
    threads: int | None = None
    length_extrapolation: JsonDict | None = None  # validation loss at 1x, 2x, 4x the training length (rank 0)
    byte_score: ByteScore | None = None  # a comparison's bits per byte, scored while the W&B run is open

    @classmethod
    def from_json(cls, data: JsonDict) -> PretrainResult:
        """Read ``results.json``."""
        score = data.get("byte_score")
        return from_json(cls, {**data, "byte_score": None if score is None else ByteScore.from_json(score)})


@dataclasses.dataclass(kw_only=True)
class FinetuneResult(JsonRecord):
    """One fine-tune over its grid and seeds (its ``results.json``, ``job: finetune``)."""

    job: str = "finetune"
    family: str
    init: str
    task: str
    num_classes: int
    sizes: dict[str, int]  # examples per split
    pooling: str
    grid: list[JsonDict] | None = None  # per grid point: lr, head_lr, val per seed, val_mean
    selected: dict[str, float] | None = None  # the grid point chosen on validation: lr, head_lr
    selection: str | None = None  # the rule, in words (older files: no grid)
    seeds: dict[str, dict[str, float]]  # seed -> test/acc, test/f1, test/mcc of the selected point
    mean: dict[str, float]
    std: dict[str, float]
    majority: JsonDict  # the majority-class baseline on the same test split
    wall_s: float


@dataclasses.dataclass(frozen=True)
class ProbeScore(JsonRecord):
    """One probed body: the chosen strength, its validation accuracy and its test scores."""

    c: float
    val_acc: float
    test: dict[str, float]  # test/acc, test/f1, test/mcc


@dataclasses.dataclass(kw_only=True)
class ProbeGain(JsonRecord):
    """The pretrained body's test accuracy minus the random-initialised bodies' (one-sample t-test)."""

    diff: float
    ci_low: float
    ci_high: float
    p: float


@dataclasses.dataclass(kw_only=True)
class ProbeResult(JsonRecord):
    """One linear probe of a body and of random-initialised bodies of its shape (its ``results.json``,
    ``job: probe``). Every key is always written (``gain`` as ``null`` with fewer than two random bodies)."""

    job: str = "probe"
    family: str
    init: str  # the probed body: a run directory, a checkpoint or hf:<name>
    task: str
    num_classes: int
    sizes: dict[str, int]  # examples per split
    pooling: str
    selection: str  # the rule choosing the probe's strength, in words
    pretrained: ProbeScore  # the probed body
    random: dict[str, ProbeScore]  # seed -> a random-initialised body
    random_mean: dict[str, float]
    random_std: dict[str, float]
    gain: ProbeGain | None  # pretrained - random test/acc (with two or more random bodies)
    wall_s: float

    def to_json(self) -> JsonDict:
        """The ``results.json`` dict (``gain`` included when it is ``None``)."""
        return {field.name: plain(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, data: JsonDict) -> ProbeResult:
        """Read ``results.json``."""
        out = dict(data)  # a key missing is left for the constructor to name
        if "pretrained" in data:
            out["pretrained"] = ProbeScore.from_json(data["pretrained"])
        if "random" in data:
            out["random"] = {seed: ProbeScore.from_json(r) for seed, r in data["random"].items()}
        if data.get("gain") is not None:
            out["gain"] = ProbeGain.from_json(data["gain"])
        return from_json(cls, out)


RESULTS: dict[str, type[PretrainResult] | type[FinetuneResult] | type[ProbeResult]] = {
    "pretrain": PretrainResult, "finetune": FinetuneResult, "probe": ProbeResult}


def read_result(data: object) -> PretrainResult | FinetuneResult | ProbeResult | None:
    """A run's ``results.json`` as the dataclass its ``job`` names; None for any other job (e.g. an evaluation)."""
    if not isinstance(data, dict) or data.get("job") not in RESULTS:
        return None
    return RESULTS[data["job"]].from_json(data)


@dataclasses.dataclass(kw_only=True)
class NormAccuracy(JsonRecord):
    """Zero-shot accuracy under one normalisation with its 95 % bootstrap CI (older files: accuracy only)."""

    acc: float
    low: float | None = None
    high: float | None = None
    correct: str | None = None  # per item, in item order ("1" right): paired tests against the bigram floor


ZS = TypeVar("ZS", bound="ZeroShotScores")


@dataclasses.dataclass(kw_only=True)
class ZeroShotScores(JsonRecord):
    """Zero-shot multiple choice on a set of items: accuracy per normalisation (``raw``, ``per_token``,
    ``per_byte``: one JSON key each), chance, length alone, skipped items, and the same per group."""

    num_items: int | None = None
    chance: float | None = None
    length_only: float | None = None  # the shortest candidate wins
    num_skipped: int | None = None  # skipped items count as wrong
    skipped: dict[str, int] | None = None  # reason -> items
    norms: dict[str, NormAccuracy]
    groups: dict[str, ZeroShotScores] | None = None

    def accuracy(self, norm: str) -> NormAccuracy:
        """The accuracy under ``norm``."""
        return self.norms[norm]

    def scores_json(self) -> JsonDict:
        """This class's fields (not a subclass's) as JSON: the counts, one key per normalisation, then ``groups``."""
        counts = ("num_items", "chance", "length_only", "num_skipped", "skipped")
        out = {key: getattr(self, key) for key in counts if getattr(self, key) is not None}
        out |= {norm: acc.to_json() for norm, acc in self.norms.items()}
        return out | ({"groups": plain(self.groups)} if self.groups is not None else {})

    def to_json(self) -> JsonDict:
        """The JSON dict."""
        return self.scores_json()

    @staticmethod
    def scores_fields(data: JsonDict) -> JsonDict:
        """``data`` with its normalisations gathered into ``norms`` and its groups read."""
        groups = data.get("groups")
        return {**data, "norms": {k: NormAccuracy.from_json(v) for k, v in data.items()
                                  if isinstance(v, dict) and "acc" in v},
                "groups": None if groups is None else {g: ZeroShotScores.from_json(b) for g, b in groups.items()}}

    @classmethod
    def from_json(cls: type[ZS], data: JsonDict) -> ZS:
        """Read the JSON dict."""
        return from_json(cls, cls.scores_fields(data))


@dataclasses.dataclass(kw_only=True)
class BigramScores(ZeroShotScores):
    """The add-k bigram floor's scores on the same items."""

    k: float | None = None  # the add-k constant chosen on validation

    def to_json(self) -> JsonDict:
        """The JSON dict (``k`` last)."""
        return self.scores_json() | ({"k": self.k} if self.k is not None else {})


@dataclasses.dataclass(kw_only=True)
class ZeroShotResult(ZeroShotScores):
    """One zero-shot task scored with one run's network (``famlab eval``'s ``eval/<task>/results.json``, a task of
    ``eval.json``'s ``zero_shot``); older files lack some keys."""

    task: str | None = None
    family: str | None = None
    objective: str | None = None
    rule: str | None = None  # full | span
    headline: str | None = None  # the headline normalisation
    model_run_dir: str | None = None
    wall_s: float | None = None
    bigram: BigramScores | None = None

    def to_json(self) -> JsonDict:
        """The JSON dict: the task and model, the scores, ``wall_s``, the bigram floor's scores."""
        head = {key: getattr(self, key) for key in ("task", "family", "objective", "rule", "headline",
                                                    "model_run_dir") if getattr(self, key) is not None}
        tail = {"wall_s": self.wall_s, "bigram": None if self.bigram is None else self.bigram.to_json()}
        return head | self.scores_json() | {k: v for k, v in tail.items() if v is not None}

    @classmethod
    def from_json(cls: type[ZS], data: JsonDict) -> ZS:
        """Read the JSON dict."""
        bigram = data.get("bigram")
        return from_json(cls, {**cls.scores_fields(data),
                               "bigram": None if bigram is None else BigramScores.from_json(bigram)})


@dataclasses.dataclass(kw_only=True)
class EvalRecord(JsonRecord):
    """A pretraining run's ``eval.json`` (a comparison's evaluation): bits per byte and the zero-shot tasks, each
    where it was scored."""

    byte_score: ByteScore | None = None
    zero_shot: dict[str, ZeroShotResult] | None = None  # task -> its scores

    def to_json(self) -> JsonDict:
        """The ``eval.json`` dict."""
        return to_json(self)

    @classmethod
    def from_json(cls, data: JsonDict) -> EvalRecord:
        """Read ``eval.json``."""
        score, tasks = data.get("byte_score"), data.get("zero_shot")
        return cls(byte_score=None if score is None else ByteScore.from_json(score),
                   zero_shot=None if tasks is None else {t: ZeroShotResult.from_json(r) for t, r in tasks.items()})


def read_config(data: JsonDict) -> Config:
    """A run's ``config.yaml`` as the typed :class:`Config`: a key famlab added since reads as its default, a key
    it no longer knows is left out."""
    from famlab.experiments.configuration.compose import schema, to_dataclass
    from omegaconf import DictConfig, OmegaConf

    base = schema()
    merged = OmegaConf.merge(base, known_keys(base, data))
    assert isinstance(merged, DictConfig)
    cfg = to_dataclass(merged)
    assert isinstance(cfg, Config)
    return cfg


def known_keys(node: DictConfig, data: JsonDict) -> JsonDict:
    """The part of ``data`` the structured config ``node`` has keys for (its sections read the same way)."""
    from omegaconf import OmegaConf

    out = {}
    for key, value in data.items():
        if key not in node:
            continue
        section = dataclasses.is_dataclass(OmegaConf.get_type(node, key)) and isinstance(value, dict)
        out[key] = known_keys(node[key], value) if section else value
    return out


@dataclasses.dataclass(kw_only=True)
class RunRecord:
    """One run directory as the report reads it back.

    ``arm`` is the comparison arm the report assigns (``report.label_arms``; ``None`` for a scratch fine-tune,
    which belongs to no arm) and ``labelled`` says whether it has been assigned yet.
    """

    path: Path  # the run directory
    config: Config  # its config.yaml
    results: PretrainResult | FinetuneResult | ProbeResult  # its results.json
    eval: EvalRecord | None = None  # its eval.json, where one was written
    metrics: list[dict[str, float]] = dataclasses.field(default_factory=list)  # its metrics.csv rows
    arm: str | None = None
    labelled: bool = False

    @property
    def job(self) -> str:
        """``pretrain``, ``finetune`` or ``probe``."""
        return self.results.job

    @property
    def family(self) -> str:
        """The run's model family."""
        return self.results.family

    @property
    def is_scratch(self) -> bool:
        """A fine-tune from a random initialisation (the per-family baseline)."""
        return isinstance(self.results, FinetuneResult) and self.results.init == "scratch"

    @property
    def init(self) -> str:
        """The body a fine-tune or probe started from (``scratch``, a run directory ...); empty for pretraining."""
        return "" if isinstance(self.results, PretrainResult) else str(self.results.init)


@dataclasses.dataclass(kw_only=True)
class StepFailure(JsonRecord):
    """An optional step of a comparison that failed (``failures/<key>.json`` in the comparison directory): the
    report shows the cell as failed with ``reason``; the traceback is in the comparison's log."""

    step: str  # "evaluation", "zero-shot", "probe", "length extrapolation", "plots", "W&B report"
    arm: str | None = None
    seed: int | None = None
    task: str | None = None  # a suite task's name
    reason: str = ""  # one line: the exception's type and first line

    @property
    def key(self) -> str:
        """The file name (without ``.json``) under ``failures/``: unique per step, arm, seed and task."""
        parts = [self.step.replace(" ", "-").replace("&", "")]
        parts += [p for p in (self.arm, None if self.seed is None else f"s{self.seed}", self.task) if p]
        return "-".join(parts)

    @property
    def where(self) -> str:
        """The cell in words: ``zero-shot of gpt seed 0 on topics``."""
        place = " ".join(p for p in (self.arm, None if self.seed is None else f"seed {self.seed}") if p)
        return f"{self.step}{f' of {place}' if place else ''}{f' on {self.task}' if self.task else ''}"


def read_failures(directory: Path) -> list[StepFailure]:
    """The optional steps recorded as failed under ``directory/failures/``, by file name."""
    import json

    folder = directory / "failures"
    if not folder.is_dir():
        return []
    return [StepFailure.from_json(json.loads(p.read_text(encoding="utf-8"))) for p in sorted(folder.glob("*.json"))]


Stat = tuple[float, float, int]  # mean, std and number of values


@dataclasses.dataclass(kw_only=True)
class PretrainRow:
    """An arm's pretraining numbers in the report (means over its pretraining seeds; the plan's sizes and budget
    where the runs do not state them). Every field is written to ``results.json``, a bits-per-byte column only
    where it was scored."""

    pretrain_seeds: int
    params: int
    non_embedding_params: int | None
    steps: int
    corpus_tokens: int | None
    flops: float | None
    val_loss: float
    val_ppl: float
    unigram_loss: float
    lr: float
    tokens_per_s: float
    wall_s: float
    loss_2x: float | None  # validation loss at 2x / 4x the training length (None where the positions cannot reach)
    loss_4x: float | None
    bits_per_byte: float | None = None  # a likelihood's (GPT, T5)
    pll_bits_per_byte: float | None = None  # BERT's pseudo-log-likelihood
    passes: float | None = None  # corpus_tokens over the corpus's training tokens (the plan's; None: not known)

    def to_json(self) -> JsonDict:
        """The JSON dict."""
        out = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        return {k: v for k, v in out.items() if v is not None or k not in ("bits_per_byte", "pll_bits_per_byte")}


@dataclasses.dataclass(kw_only=True)
class ArmRow:
    """One arm's row of the report (``report.summarize``): its pretraining numbers, its fine-tunes' scores and its
    family's scratch baseline, each where there are runs. ``*_values`` hold the scores the statistics test (not
    written to ``results.json``)."""

    family: str
    objective: str | None = None
    pretrain: PretrainRow | None = None
    finetune: dict[str, Stat] | None = None  # metric -> mean, std, n over fine-tunes
    finetune_values: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    finetune_nested_values: dict[str, list[list[float]]] = dataclasses.field(default_factory=dict)  # per pretraining
    scratch: dict[str, Stat] | None = None
    scratch_values: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> JsonDict:
        """``results.json``'s entry of the arm (``families``): the scores without the values behind them."""
        out: JsonDict = {"family": self.family, "objective": self.objective}
        out |= self.pretrain.to_json() if self.pretrain is not None else {}
        out |= {"finetune": self.finetune} if self.finetune is not None else {}
        return out | ({"scratch": self.scratch} if self.scratch is not None else {})
