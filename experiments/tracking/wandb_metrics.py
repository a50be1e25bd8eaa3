"""W&B chart axes and summaries: what each metric is plotted against, and which value its summary keeps.

Pretraining metrics are drawn against the training budget (``budget/flops``, or ``budget/tokens`` when a
comparison matches tokens), so W&B's default chart of ``val/loss`` is loss against compute with one line
per family. Every pretraining row, validation included, carries both budget counters (the module logs them
with validation too), so either can be picked as the x-axis in the UI. Fine-tunes keep their own step.

Summaries keep the aggregate that answers "how good did it get": ``min`` for losses and perplexities,
``max`` for accuracy / F1 / MCC, ``last`` for budget counters. A ``min`` or ``max`` summary replaces
W&B's last-value summary (``define_metric``: W&B's docs, "Customize log axes").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning.pytorch.loggers import Logger
    from wandb.sdk.wandb_run import Run

BUDGET = ("budget/tokens", "budget/flops")
PRETRAIN_METRICS = (
    "train/loss", "train/lr", "val/loss", "val/ppl", "val/mlm_acc", "val/unigram_loss",
    "perf/tokens_per_sec", "perf/mfu",
)
FINETUNE_METRICS = (
    "train/loss", "train/lr", "val/loss", "val/acc", "val/f1", "val/mcc", "test/loss", "test/acc", "test/f1",
    "test/mcc",
)
FINETUNE_STEP = "trainer/global_step"  # Lightning's WandbLogger writes it into every row


def summary_of(name: str) -> str:
    """The summary aggregate of a metric name: ``min`` (losses), ``max`` (scores), ``last`` (the rest)."""
    leaf = name.rsplit("/", 1)[-1]
    if name in BUDGET:
        return "last"
    if leaf.endswith(("loss", "ppl")):
        return "min"
    if leaf in ("acc", "f1", "mcc", "mlm_acc", "mfu", "tokens_per_sec"):
        return "max"
    return "last"


def x_axis(match: str) -> str:
    """The pretraining step metric for ``compare.match``: ``budget/tokens`` for tokens, else ``budget/flops``."""
    return "budget/tokens" if match == "tokens" else "budget/flops"


def define_metrics(run: Run, job_type: str, step_metric: str) -> dict[str, tuple[str, str]]:
    """Declare axes and summaries on a started W&B run; returns ``{metric: (step metric, summary)}``.

    Must run after Lightning's ``WandbLogger`` has started the run: it defines ``*`` against
    ``trainer/global_step``, and the explicit names below take precedence over that glob.

    Args:
        run: the ``wandb.Run`` (``WandbLogger.experiment``).
        job_type: ``pretrain`` (budget axes), ``finetune`` (the run's own ``trainer/global_step``) or one
            without a training curve (``probe``: nothing defined).
        step_metric: the pretraining x-axis, ``budget/flops`` or ``budget/tokens`` (:func:`x_axis`).
    """
    defined: dict[str, tuple[str, str]] = {}
    names: tuple[str, ...]
    if job_type not in ("pretrain", "finetune"):  # a probe has no curve: its results are its summary
        return defined
    if job_type == "pretrain":
        for name in BUDGET:
            run.define_metric(name, summary="last")
        names, step = PRETRAIN_METRICS, step_metric
    else:
        names, step = FINETUNE_METRICS, FINETUNE_STEP
    for name in names:
        if name.startswith("test/"):  # logged once, after training: W&B's plain last value is the result
            run.define_metric(name, step_metric=step)
            defined[name] = (step, "")
            continue
        summary = summary_of(name)
        run.define_metric(name, step_metric=step, summary=summary)
        defined[name] = (step, summary)
    return defined


def record_summary(loggers: Sequence[Logger], values: Mapping[str, object], prefix: str = "") -> None:
    """Write final results (evaluation scores, test metrics) into the W&B run's summary; never raises.

    Nested dicts become ``/``-joined keys; ``None`` and non-numeric leaves other than strings are skipped.
    """
    from lightning.pytorch.loggers import WandbLogger

    flat = _flatten(values, prefix)
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            try:
                logger.experiment.summary.update(flat)
            except Exception:  # noqa: BLE001 - W&B trouble never stops a run (README, W&B)
                pass


def record_selection(loggers: Sequence[Logger], *, selected: bool, point: str, test: dict[str, float] | None = None,
                     step: int | None = None) -> None:
    """A fine-tune's place in its grid, in its own W&B run (still open); never raises.

    The summary says whether its grid point was ``selected`` (best mean validation score over seeds) and which
    ``selected_point`` was. A selected run tested after selection gets its ``test`` scores as one history row at
    ``step`` (its last training step, where a one-point grid's test row also sits), so the summary holds them.
    """
    from lightning.pytorch.loggers import WandbLogger

    for logger in loggers:
        if isinstance(logger, WandbLogger):
            try:
                run = logger.experiment
                if test:
                    run.log({**test, FINETUNE_STEP: step})
                run.summary.update({"selected": selected, "selected_point": point})
            except Exception:  # noqa: BLE001 - W&B trouble never stops a run (README, W&B)
                pass


Scalar = bool | int | float | str  # a W&B summary value


def _flatten(values: Mapping[str, object], prefix: str) -> dict[str, Scalar]:
    out: dict[str, Scalar] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}/"))
        elif isinstance(value, (bool, int, float, str)):
            out[name] = value
    return out


def pretrain_summary(results: dict[str, Any]) -> dict[str, float]:
    """The evaluation results of a pretraining run as summary keys under ``eval/``.

    ``eval/bits_per_byte`` or ``eval/pll_bits_per_byte`` (BERT's pseudo-log-likelihood, not a likelihood),
    and ``eval/loss_<k>x`` / ``eval/seq_len_<k>x`` from the length-extrapolation points.
    """
    out: dict[str, float] = {}
    score = results.get("byte_score")
    if score:
        out[f"eval/{score['measure']}"] = score["value"]
        out["eval/byte_score_texts"] = score["num_texts"]
    for multiple, point in (results.get("length_extrapolation") or {}).items():
        if point.get("loss") is not None:
            out[f"eval/loss_{multiple}"] = point["loss"]
            out[f"eval/seq_len_{multiple}"] = point["seq_len"]
    return out
