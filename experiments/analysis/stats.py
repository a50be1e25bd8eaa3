"""Statistics shared by comparisons, sweeps and evaluations: Welch tests, Holm correction, confidence intervals.

Every comparison famlab prints ("does A beat B beyond seed variation?") goes through these functions, so a
sweep, a comparison and a zero-shot evaluation state significance the same way.

- :func:`welch` - Welch's unequal-variance t-test of ``mean(a) - mean(b)``, one- or two-sided, with the
  Welch-Satterthwaite degrees of freedom and the matching confidence interval of the difference.
- :func:`nested_welch` - Welch's test with a top-level unit (a pretraining run) as the observation: the mean of
  each unit's values (its fine-tuning seeds), so both levels of seed variance are in the test.
- :func:`above` - a fixed score against seeded controls (one-sample t-test).
- :func:`holm` - Holm's step-down correction of a family of p-values (Holm 1979), which controls the
  family-wise error rate without Bonferroni's loss of power.
- :func:`mean_ci` - a t-based confidence interval of a mean over seeds.
- :func:`bootstrap_ci` - a percentile bootstrap interval of a statistic over items.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

RUN_MEANS = "welch_pretraining_run_means"  # a test's name in results.json: Welch with pretraining runs as the unit
SEED_VALUES = "welch_finetune_seeds"  # Welch over the fine-tuning seeds of one pretraining run per arm


@dataclass(frozen=True)
class WelchResult:
    """``mean(a) - mean(b)`` with its Welch test; ``p`` follows ``alternative``."""

    diff: float
    ci_low: float
    ci_high: float
    t: float
    df: float
    p: float
    n_a: int
    n_b: int
    alternative: str


def welch(a: Sequence[float], b: Sequence[float], *, alternative: str = "greater", level: float = 0.95) -> WelchResult:
    """Welch's t-test of ``mean(a) - mean(b)``.

    Args:
        a, b: per-seed values of the two samples (at least 2 each).
        alternative: ``greater`` (H1: a > b), ``less`` or ``two-sided``.
        level: coverage of the two-sided confidence interval of the difference.

    When both samples have zero variance the test is decided by the sign of the difference (p = 0 or 1; 0.5 for
    a tie under a one-sided alternative), which is the limit of the t statistic.

    Raises:
        ValueError: fewer than 2 values on a side, or an unknown ``alternative``.
    """
    from scipy import stats

    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"alternative={alternative!r} must be greater, less or two-sided")
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"a Welch test needs at least 2 values per sample (got {len(a)} and {len(b)})")
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff, se = ma - mb, math.sqrt(va + vb)
    if se == 0.0:
        sign = (diff > 0) - (diff < 0)
        t = math.inf * sign if sign else 0.0
        p = {"greater": 0.0 if sign > 0 else (1.0 if sign < 0 else 0.5),
             "less": 0.0 if sign < 0 else (1.0 if sign > 0 else 0.5),
             "two-sided": 0.0 if sign else 1.0}[alternative]
        return WelchResult(diff, diff, diff, t, math.inf, p, len(a), len(b), alternative)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    t = diff / se
    if alternative == "greater":
        p = float(stats.t.sf(t, df))
    elif alternative == "less":
        p = float(stats.t.cdf(t, df))
    else:
        p = float(2 * stats.t.sf(abs(t), df))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return WelchResult(diff, diff - half, diff + half, t, df, p, len(a), len(b), alternative)


def nested_welch(
    a: Sequence[Sequence[float]], b: Sequence[Sequence[float]], *, alternative: str = "greater", level: float = 0.95
) -> WelchResult:
    """Welch's t-test of nested values: one observation per top-level unit, the mean of that unit's values.

    Args:
        a, b: per arm, one group per pretraining run holding the scores of its fine-tuning seeds (a baseline
            without pretraining passes each seed as its own group); at least 2 non-empty groups per arm.
        alternative, level: as in :func:`welch`.

    Fine-tunes of one pretrained model share it, so they are not independent; the means of different pretraining
    runs are, and the variance of such a mean already holds both sources (pretraining-seed variance plus
    fine-tuning-seed variance over the run's seeds). Why this test and not a two-level bootstrap: with equal seeds
    per run and normal errors it keeps its level even with 2 runs per arm (the test on cluster means of a nested
    design), paying in power (df at most ``k_a + k_b - 2``), whereas a bootstrap over 2 runs draws only 3 distinct
    run sets per arm (a coarse null) and its plug-in variance is short by a factor (k - 1) / k, too liberal.
    ``diff`` is the difference of the means of run means (each pretraining run weighs the same).

    Raises:
        ValueError: fewer than 2 non-empty groups on a side, or an unknown ``alternative``.
    """
    means_a = [statistics.fmean(g) for g in a if len(g)]
    means_b = [statistics.fmean(g) for g in b if len(g)]
    if len(means_a) < 2 or len(means_b) < 2:
        raise ValueError(f"a nested Welch test needs at least 2 groups per arm (got {len(means_a)} and {len(means_b)})")
    return welch(means_a, means_b, alternative=alternative, level=level)

def above(value: float, baseline: Sequence[float], *, level: float = 0.95) -> WelchResult:
    """One-sample t-test of a fixed ``value`` against per-seed ``baseline`` values (H1: value > mean(baseline)).

    For a deterministic score (a probe of one pretrained body) compared with seeded controls (random-init
    bodies): the difference ``value - mean(baseline)`` with its t interval, df = n - 1. With no spread in the
    baseline the sign decides, as in :func:`welch`.
    """
    from scipy import stats

    if len(baseline) < 2:
        raise ValueError(f"a one-sample test needs at least 2 baseline values (got {len(baseline)})")
    n, mean = len(baseline), statistics.fmean(baseline)
    diff, se = value - mean, statistics.stdev(baseline) / math.sqrt(len(baseline))
    if se == 0.0:
        p = 0.0 if diff > 0 else (1.0 if diff < 0 else 0.5)
        return WelchResult(diff, diff, diff, math.copysign(math.inf, diff) if diff else 0.0, n - 1, p, 1, n, "greater")
    t = diff / se
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    return WelchResult(diff, diff - half, diff + half, t, n - 1, float(stats.t.sf(t, n - 1)), 1, n, "greater")


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the input order.

    Sort ascending, multiply the k-th smallest (k from 0) by ``m - k``, take the running maximum, clip at 1.
    A hypothesis is rejected at level alpha when its adjusted p-value is below alpha.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (m - k) * p_values[i]))
        adjusted[i] = running
    return adjusted


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: a t interval over seeds; ``low == high == mean`` for a single value."""
    from scipy import stats

    if not values:
        raise ValueError("mean_ci needs at least one value")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def bootstrap_ci(
    items: Sequence[float],
    statistic: Callable[[Sequence[float]], float] = statistics.fmean,
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(statistic(items), low, high)``: a seeded percentile bootstrap over items."""
    if not items:
        raise ValueError("bootstrap_ci needs at least one item")
    rng = random.Random(seed)
    n = len(items)
    draws = sorted(statistic([items[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    lo = draws[int(math.floor((1 - level) / 2 * (resamples - 1)))]
    hi = draws[int(math.ceil((1 + level) / 2 * (resamples - 1)))]
    return statistic(items), lo, hi


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float, float, float]:
    """``(mean(a - b), low, high, p)`` over paired items: a seeded percentile bootstrap of the mean difference, and
    its two-sided p-value (twice the share of resampled means on the far side of zero, at most 1).

    For two scores of the same multiple-choice items (a model and a baseline), so the item difficulty both share
    cancels, as in a paired test (Efron & Tibshirani 1993, ch. 16). Vectorised: a report holds dozens of cells.
    """
    import numpy as np

    if len(a) != len(b) or not a:
        raise ValueError(f"paired_bootstrap needs two equally long, non-empty sequences (got {len(a)} and {len(b)})")
    diffs = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    mean = float(diffs.mean())
    if not diffs.any():
        return mean, 0.0, 0.0, 1.0
    rng = np.random.default_rng(seed)
    draws = np.sort(diffs[rng.integers(0, len(diffs), size=(resamples, len(diffs)))].mean(axis=1))
    low = float(draws[int(math.floor((1 - level) / 2 * (resamples - 1)))])
    high = float(draws[int(math.ceil((1 + level) / 2 * (resamples - 1)))])
    p = 2 * min(float((draws <= 0).mean()), float((draws >= 0).mean()))
    return mean, low, high, min(1.0, p)
