"""Repeated data in a comparison's report: how many passes each arm made over its corpus, and which pretraining runs
were trained past their best.

Muennighoff et al. 2023 ("Scaling Data-Constrained Language Models") find repeated tokens worth almost as much as
fresh ones up to about 4 epochs, and markedly less beyond. A run whose validation loss rises over the last part of
its pretraining, on a corpus it read several times, has started to memorise it: more steps on the same corpus make
its model worse, and a larger corpus (docs/data.md, "A corpus large enough for small and base") is the fix.
"""

from __future__ import annotations

from famlab.experiments.analysis.results import ArmRow, RunRecord

# "rose": the last validation loss is above the minimum of the later half of the run by more than this fraction of
# that minimum (noise between validation checks of one run is far below 1 %, as the same blocks are validated)
RISE_MARGIN = 0.01
MIN_CHECKS = 4  # validation checks needed to speak of a later half
MANY_PASSES = 4.0  # Muennighoff et al. 2023: beyond ~4 epochs repeated tokens are worth markedly less


def val_losses(run: RunRecord) -> list[float]:
    """The run's validation losses in step order (``val/loss`` rows of its ``metrics.csv``)."""
    rows = [r for r in run.metrics if "val/loss" in r]
    return [r["val/loss"] for r in sorted(rows, key=lambda r: r.get("step", 0.0))]


def rise(losses: list[float]) -> tuple[float, float] | None:
    """``(minimum of the later half, last)`` when the last validation loss is above that minimum by more than
    :data:`RISE_MARGIN` of it; None when it is not, or with fewer than :data:`MIN_CHECKS` checks."""
    if len(losses) < MIN_CHECKS:
        return None
    best = min(losses[len(losses) // 2 :])
    return (best, losses[-1]) if losses[-1] > best * (1 + RISE_MARGIN) else None


def rising_lines(pretrain_runs: dict[str, list[RunRecord]], passes: dict[str, float | None]) -> list[str]:
    """One report line per arm with a pretraining run whose validation loss rose at its end (:func:`rise`), naming
    its seeds, the losses and its passes over the corpus: trained past its best on repeated data where it read the
    corpus more than once."""
    lines = []
    for arm, runs in pretrain_runs.items():
        risen = {run.config.seed: r for run in runs if (r := rise(val_losses(run))) is not None}
        if not risen:
            continue
        seeds = ", ".join(f"seed {s}: {best:.3f} -> {last:.3f}" for s, (best, last) in risen.items())
        p = passes.get(arm)
        read = f"after {p:.1f} passes over its corpus" if p is not None else "(its passes over the corpus unknown)"
        if p is not None and p <= 1:
            lines.append(f"**{arm}'s validation loss rose at the end of pretraining** ({seeds}; last above the "
                         f"later half's minimum by more than {RISE_MARGIN:.0%}) {read}: not repetition, as no token "
                         "was read twice; look at the learning rate and its schedule.")
            continue
        lines.append(f"**{arm} was trained past its best on repeated data**: its validation loss rose over the last "
                     f"part of pretraining ({seeds}; last above the later half's minimum by more than "
                     f"{RISE_MARGIN:.0%}) {read}. Beyond about {MANY_PASSES:g} passes repeated tokens are worth "
                     "markedly less than fresh ones (Muennighoff et al. 2023, \"Scaling Data-Constrained Language "
                     "Models\"): bring a larger corpus (docs/data.md, \"A corpus large enough for small and base\").")
    return lines


def past_best_section(pretrain_runs: dict[str, list[RunRecord]], families: dict[str, ArmRow]) -> list[str]:
    """The report's lines after its pretraining table: :func:`rising_lines` with each arm's passes from its row, each
    line followed by a blank one."""
    passes = {arm: row.pretrain.passes if row.pretrain is not None else None for arm, row in families.items()}
    return [line for text in rising_lines(pretrain_runs, passes) for line in (text, "")]
