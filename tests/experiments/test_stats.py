"""experiments.stats: Welch tests against scipy, Holm against a worked example, intervals that cover."""

import math

import pytest
from famlab.experiments.analysis.stats import bootstrap_ci, holm, mean_ci, welch
from scipy import stats as sps

A = [0.52, 0.55, 0.50, 0.53]
B = [0.41, 0.47, 0.44]


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_welch_matches_scipy(alternative):
    """t, p and the alternative agree with scipy.stats.ttest_ind(equal_var=False)."""
    ours = welch(A, B, alternative=alternative)
    ref = sps.ttest_ind(A, B, equal_var=False, alternative=alternative)
    assert ours.t == pytest.approx(ref.statistic) and ours.p == pytest.approx(ref.pvalue)
    assert ours.diff == pytest.approx(sum(A) / 4 - sum(B) / 3)


def test_welch_ci_matches_scipy_confidence_interval():
    """The difference's 95 % interval is scipy's Welch interval."""
    ref = sps.ttest_ind(A, B, equal_var=False).confidence_interval(0.95)
    ours = welch(A, B, alternative="two-sided")
    assert (ours.ci_low, ours.ci_high) == pytest.approx((ref.low, ref.high))


def test_welch_without_variance_is_decided_by_the_sign():
    """Identical seeds on both sides: p is 0 when a is larger, 1 when smaller, 0.5 on a tie."""
    assert welch([1.0, 1.0], [0.5, 0.5]).p == 0.0
    assert welch([0.5, 0.5], [1.0, 1.0]).p == 1.0
    assert welch([0.5, 0.5], [0.5, 0.5]).p == 0.5


def test_welch_refuses_a_single_seed():
    with pytest.raises(ValueError, match="at least 2 values"):
        welch([0.5], [0.4, 0.3])


def test_holm_worked_example():
    """Holm (1979) on four p-values, worked by hand."""
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> running maximum 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_mean_ci_covers_the_mean_and_shrinks_with_n():
    m, lo, hi = mean_ci(A)
    assert lo < m < hi
    ref = sps.t.interval(0.95, len(A) - 1, loc=m, scale=sps.sem(A))
    assert (lo, hi) == pytest.approx(ref)
    assert mean_ci([0.3]) == (0.3, 0.3, 0.3)


def test_bootstrap_ci_is_seeded_and_brackets_the_statistic():
    items = [1.0] * 30 + [0.0] * 70
    a, b = bootstrap_ci(items, seed=1), bootstrap_ci(items, seed=1)
    assert a == b and a[1] <= 0.3 <= a[2] and a[0] == pytest.approx(0.3)
    assert not math.isclose(a[2] - a[1], 0.0)


def test_above_matches_a_one_sample_t_test():
    """A fixed score against seeded controls is scipy's one-sample t-test, one-sided."""
    from famlab.experiments.analysis.stats import above

    controls = [0.30, 0.28, 0.33, 0.31, 0.29]
    ours = above(0.36, controls)
    ref = sps.ttest_1samp(controls, 0.36, alternative="less")
    assert ours.p == pytest.approx(ref.pvalue) and ours.diff == pytest.approx(0.36 - sum(controls) / 5)
    assert ours.ci_low < ours.diff < ours.ci_high
    assert above(0.2, [0.3, 0.3]).p == 1.0
