"""Suite score and table on synthetic results: macro average per seed, t interval over seeds, reference rows."""

import statistics

import pytest
from famlab.experiments.analysis.stats import mean_ci
from famlab.experiments.analysis.suite_score import (
    TaskResult,
    reference_suite,
    render_suite_table,
    suite_score,
    suite_seeds,
    task_interval,
)

RESULTS = [
    TaskResult("supersense", "acc", {"0": 0.30, "1": 0.34, "2": 0.32}),
    TaskResult("pairs", "acc", {"0": 0.50, "1": 0.44, "2": 0.47}),
    TaskResult("cola", "mcc", {"0": 0.10, "1": 0.16, "2": 0.04}),
]


def test_suite_score_is_the_mean_over_seeds_of_the_macro_average():
    """Seed s scores the average of the tasks' seed-s scores; the interval is mean_ci over those."""
    per_seed = suite_seeds(RESULTS)
    assert per_seed == pytest.approx({"0": 0.30, "1": 0.94 / 3, "2": 0.83 / 3})
    score = suite_score(RESULTS)
    mean, low, high = mean_ci([0.30, 0.94 / 3, 0.83 / 3])
    assert (score.mean, score.low, score.high, score.n) == pytest.approx((mean, low, high, 3))
    # the macro average does not weight tasks by size or by metric: it equals the mean of the task means
    assert score.mean == pytest.approx(statistics.fmean(task_interval(r).mean for r in RESULTS))
    # pairing by seed: the interval is narrower than one that treats the 9 scores as independent draws
    assert score.high - score.low < 0.12


def test_one_seed_has_a_point_interval_and_mismatched_seeds_fail():
    one = [TaskResult("a", "acc", {"0": 0.2}), TaskResult("b", "f1", {"0": 0.6})]
    assert suite_score(one) == type(suite_score(one))(0.4, 0.4, 0.4, 1)
    assert suite_score(one).fmt() == "0.400"
    with pytest.raises(ValueError, match="different seeds"):
        suite_score([TaskResult("a", "acc", {"0": 0.2, "1": 0.3}), TaskResult("b", "acc", {"0": 0.5})])
    with pytest.raises(ValueError, match="at least one task"):
        suite_score([])


def test_reference_suite_value_is_the_macro_average():
    assert reference_suite({"a": 0.2, "b": 0.5, "c": 0.8}, ["a", "b"]) == pytest.approx(0.35)
    assert reference_suite({"a": 0.2}, ["a", "b"]) is None


def test_table_has_a_row_per_arm_and_reference_and_a_suite_column():
    other = [TaskResult(r.name, r.metric, {s: v + 0.1 for s, v in r.seeds.items()}) for r in RESULTS]
    refs = {"majority class": {"supersense": 0.1, "pairs": 0.333, "cola": 0.0},
            "TF-IDF + LR": {"supersense": 0.5, "pairs": 0.48, "cola": None}}
    table = render_suite_table({"gpt pretrained": RESULTS, "gpt scratch": other}, refs)
    lines = table.splitlines()
    assert lines[0] == "|  | supersense (acc) | pairs (acc) | cola (mcc) | suite (macro avg) |"
    s = suite_score(RESULTS)
    assert lines[2] == (f"| gpt pretrained | 0.320 ± {(task_interval(RESULTS[0]).high - 0.32):.3f} | "
                        f"{task_interval(RESULTS[1]).fmt()} | {task_interval(RESULTS[2]).fmt()} | **{s.fmt()}** |")
    assert lines[3].startswith("| gpt scratch |") and f"**{suite_score(other).fmt()}**" in lines[3]
    assert lines[4] == "| majority class | 0.100 | 0.333 | 0.000 | 0.144 |"
    assert lines[5] == "| TF-IDF + LR | 0.500 | 0.480 | – | – |"
    assert "95% CI half-width over 3 seeds" in table
    with pytest.raises(ValueError, match="expected"):
        render_suite_table({"a": RESULTS, "b": RESULTS[:2]})
