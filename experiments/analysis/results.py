"""The typed results the commands hand on and the report reads back: a comparison's budget ``Plan``, one
pretraining run's ``PretrainResult``, one fine-tune's ``FinetuneResult``, one linear probe's ``ProbeResult``, and
the ``RunRecord`` the report reads from a run directory (its config, results, evaluation and metrics).

Each serialises to the JSON file it stands for (``plan.json``, a run's ``results.json``) with the same keys in the
same order as the dicts these files were written from, and reads the files back. Optional fields hold what older
files may lack (a plan written before ``reference_steps`` or before comparison arms named their family and
objective); a field left unset is left out of the JSON, so an old file reads back and writes out as it was.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def to_json(record: Any, renames: dict[str, str] | None = None) -> dict[str, Any]:
    """A dataclass as a JSON dict in field order, fields that are ``None`` left out; ``renames`` maps a field to
    its JSON key."""
    renames = renames or {}
    out = {}
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if value is not None:
            out[renames.get(field.name, field.name)] = value
    return out


def from_json(cls: type[T], data: dict[str, Any], renames: dict[str, str] | None = None) -> T:
    """The dataclass ``cls`` from a JSON dict written by :func:`to_json` (keys it does not know are ignored)."""
    renames = renames or {}
    names = {renames.get(f.name, f.name): f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{names[key]: value for key, value in data.items() if key in names})


R = TypeVar("R", bound="JsonRecord")


class JsonRecord:
    """Base of the dataclasses below that are one JSON mapping, key for field: :func:`to_json` writes it and
    :func:`from_json` reads it back (an older file lacking an optional field included)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON dict."""
        return to_json(self)

    @classmethod
    def from_json(cls: type[R], data: dict[str, Any]) -> R:
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

    def to_json(self) -> dict[str, Any]:
        """The ``plan.json`` dict."""
        out = to_json(self, {"arms": "families"})
        out["families"] = {arm: budget.to_json() for arm, budget in self.arms.items()}
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        """Read ``plan.json``."""
        arms = {arm: ArmBudget.from_json(entry) for arm, entry in data["families"].items()}
        return from_json(cls, {**data, "families": arms}, {"arms": "families"})


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
    length_extrapolation: dict[str, Any] | None = None  # validation loss at 1x, 2x, 4x the training length (rank 0)
    byte_score: dict[str, Any] | None = None  # a comparison's bits per byte, scored while the W&B run is open


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
    grid: list[dict[str, Any]] | None = None  # per grid point: lr, head_lr, val per seed, val_mean
    selected: dict[str, float] | None = None  # the grid point chosen on validation: lr, head_lr
    selection: str | None = None  # the rule, in words (older files: no grid)
    seeds: dict[str, dict[str, float]]  # seed -> test/acc, test/f1, test/mcc of the selected point
    mean: dict[str, float]
    std: dict[str, float]
    majority: dict[str, Any]  # the majority-class baseline on the same test split
    wall_s: float


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
    pretrained: dict[str, Any]  # c, val_acc, test (test/acc, test/f1, test/mcc) of the probed body
    random: dict[str, dict[str, Any]]  # seed -> the same for a random-initialised body
    random_mean: dict[str, float]
    random_std: dict[str, float]
    gain: dict[str, float] | None  # pretrained - random test/acc: diff, ci_low, ci_high, p (one-sample t-test)
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        """The ``results.json`` dict (``gain`` included when it is ``None``)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


RESULTS: dict[str, type[PretrainResult] | type[FinetuneResult] | type[ProbeResult]] = {
    "pretrain": PretrainResult, "finetune": FinetuneResult, "probe": ProbeResult}


def read_result(data: Any) -> PretrainResult | FinetuneResult | ProbeResult | None:
    """A run's ``results.json`` as the dataclass its ``job`` names; None for any other job (e.g. an evaluation)."""
    job = data.get("job") if isinstance(data, dict) else None
    return RESULTS[job].from_json(data) if job in RESULTS else None


@dataclasses.dataclass(kw_only=True)
class RunRecord:
    """One run directory as the report reads it back.

    ``arm`` is the comparison arm the report assigns (``report.label_arms``; ``None`` for a scratch fine-tune,
    which belongs to no arm) and ``labelled`` says whether it has been assigned yet.
    """

    path: Path  # the run directory
    config: dict[str, Any]  # its config.yaml
    results: PretrainResult | FinetuneResult | ProbeResult  # its results.json
    eval: dict[str, Any] | None = None  # its eval.json (byte_score, zero_shot), where one was written
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
