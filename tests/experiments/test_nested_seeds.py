"""Family-vs-family and pretraining-gain tests with several pretraining seeds: the pretraining run is the unit.

Fine-tunes of one pretrained model share it, so pooling the (pretraining seed x fine-tuning seed) scores as
independent values understates the variance. These tests build nested scores with a seeded generator and check
that the report's tests take each pretraining run's mean as one value, keep their level under a nested null, still
reject a clear difference, and say in the report which test ran.
"""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from famlab.experiments.analysis import report, transfer
from famlab.experiments.analysis.results import ArmRow
from famlab.experiments.analysis.stats import RUN_MEANS, SEED_VALUES, nested_welch, welch

from tests.experiments.record_helpers import finetune_record, probe_result


def _nested(rng: np.random.Generator, center: float, runs: int, seeds: int, run_sd: float, seed_sd: float):
    """Scores of ``runs`` pretraining runs x ``seeds`` fine-tuning seeds: a run effect plus fine-tuning noise."""
    return [list(center + rng.normal(0.0, run_sd) + rng.normal(0.0, seed_sd, seeds)) for _ in range(runs)]


def _row(family: str, runs: list[list[float]], scratch: list[float] | None = None) -> ArmRow:
    """An arm's row as ``report.summarize`` writes it: pooled values and one list per pretraining run."""
    return ArmRow(family=family, finetune_values={"test/acc": sum(runs, [])},
                  finetune_nested_values={"test/acc": runs},
                  scratch_values={"test/acc": scratch} if scratch is not None else {})


def test_large_pretraining_seed_variance_fools_pooled_welch_but_not_the_nested_test():
    """Two runs per family that differ a lot, fine-tuning noise tiny: pooling six 'independent' values per family
    calls the families different; the run means (2 per family) do not."""
    rng = np.random.default_rng(0)
    a = [list(0.62 + rng.normal(0, 0.001, 3)), list(0.68 + rng.normal(0, 0.001, 3))]
    b = [list(0.58 + rng.normal(0, 0.001, 3)), list(0.63 + rng.normal(0, 0.001, 3))]
    pooled = welch(sum(a, []), sum(b, []), alternative="two-sided")
    assert pooled.p < 0.05
    (row,) = report.significance({"gpt": _row("gpt", a), "t5": _row("t5", b)})
    assert row["test"] == RUN_MEANS and row["pretrain_seeds"] == [2, 2] and row["units"] == [2, 2]
    assert row["variance"] == ["pretraining seeds", "fine-tuning seeds"]
    assert row["p"] > 0.05 and row["verdict"].startswith("within")
    means = welch([statistics.fmean(g) for g in a], [statistics.fmean(g) for g in b], alternative="two-sided")
    assert row["p"] == pytest.approx(means.p) and row["diff"] == pytest.approx(means.diff)


def test_a_clear_consistent_difference_is_rejected_with_four_pretraining_seeds():
    """4 pretraining seeds x 3 fine-tuning seeds per family, every run of one family above every run of the other."""
    rng = np.random.default_rng(1)
    fams = {"bert": _row("bert", _nested(rng, 0.70, 4, 3, 0.01, 0.005)),
            "gpt": _row("gpt", _nested(rng, 0.60, 4, 3, 0.01, 0.005)),
            "t5": _row("t5", _nested(rng, 0.70, 4, 3, 0.01, 0.005))}
    sig = {s["pair"]: s for s in report.significance(fams)}
    assert {s["test"] for s in sig.values()} == {RUN_MEANS}
    assert sig["bert vs gpt"]["p_holm"] < 0.05 and sig["gpt vs t5"]["p_holm"] < 0.05
    assert sig["bert vs t5"]["p_holm"] >= 0.05  # same center: Holm across the three pairs still applies


def test_the_nested_test_keeps_its_level_under_a_nested_null():
    """400 seeded null simulations (both families alike; pretraining-seed sd 3x the fine-tuning sd): the nested
    test rejects at about its level or below, pooled Welch far above it."""
    rng = np.random.default_rng(2)
    for runs, sims in ((2, 200), (4, 200)):
        nested = pooled = 0
        for _ in range(sims):
            a, b = (_nested(rng, 0.6, runs, 3, 0.03, 0.01) for _ in range(2))
            nested += nested_welch(a, b, alternative="two-sided").p < 0.05
            pooled += welch(sum(a, []), sum(b, []), alternative="two-sided").p < 0.05
        assert nested / sims <= 0.08, (runs, nested / sims)
        assert pooled / sims > 0.15, (runs, pooled / sims)


def test_one_pretraining_run_keeps_welch_over_fine_tuning_seeds():
    a, b = [0.50, 0.52, 0.55], [0.40, 0.47, 0.41]
    (row,) = report.significance({"gpt": _row("gpt", [a]),
                                  "t5": ArmRow(family="t5", finetune_values={"test/acc": b})})
    assert row["test"] == SEED_VALUES and row["variance"] == ["fine-tuning seeds"] and row["units"] == [3, 3]
    assert row["p"] == pytest.approx(welch(a, b, alternative="two-sided").p)


def test_one_run_against_several_is_not_tested():
    (row,) = report.significance({"gpt": _row("gpt", [[0.5, 0.6], [0.7, 0.6]]), "t5": _row("t5", [[0.4, 0.5]])})
    assert row["p"] is None and "pretraining seeds" in row["verdict"] and "p_holm" not in row


def test_report_text_names_the_test_for_one_and_for_two_pretraining_seeds():
    one = report.significance({"gpt": _row("gpt", [[0.5, 0.6, 0.55]]), "t5": _row("t5", [[0.4, 0.5, 0.45]])})
    two = report.significance({"gpt": _row("gpt", [[0.5, 0.6], [0.55, 0.5]]),
                               "t5": _row("t5", [[0.4, 0.5], [0.45, 0.4]])})
    text_one = "\n".join(report.finetune_section("| table |", "families", one))
    text_two = "\n".join(report.finetune_section("| table |", "families", two))
    assert "over the fine-tuning seeds of one pretraining run" in text_one
    assert "not pretraining-seed variance" in text_one and "pretraining run's mean" not in text_one
    assert "each pretraining run's mean fine-tuned test accuracy" in text_two
    assert "both pretraining-seed and fine-tuning-seed variance" in text_two
    assert "two-level bootstrap" in text_two and "3 distinct" in text_two  # the coarse-null limitation
    assert "Holm" in text_one and "Holm" in text_two
    assert "(2 vs 2 pretraining-run means)" in report.significance_line(two[0])
    assert "pretraining-run means" not in report.significance_line(one[0])


def test_summarize_groups_fine_tunes_by_the_pretraining_run_they_started_from():
    def ft(family, init, accs):
        return finetune_record(family, init, seeds={str(i): {"test/acc": v, "test/f1": v, "test/mcc": v}
                                                    for i, v in enumerate(accs)})

    runs = [ft("gpt", "runs/x/gpt-pretrain-s0", [0.60, 0.61]), ft("gpt", "runs/x/gpt-pretrain-s1", [0.70, 0.71]),
            ft("t5", "runs/x/t5-pretrain-s0", [0.50, 0.52]), ft("t5", "runs/x/t5-pretrain-s1", [0.55, 0.54])]
    fams = report.summarize(runs, None)
    assert fams["gpt"].finetune_nested_values["test/acc"] == [[0.60, 0.61], [0.70, 0.71]]
    assert fams["gpt"].finetune_values["test/acc"] == [0.60, 0.61, 0.70, 0.71]
    (row,) = report.significance(fams)
    assert row["test"] == RUN_MEANS and row["units"] == [2, 2]


def test_pretraining_gains_take_the_pretraining_run_as_the_unit():
    """Pretrained vs scratch: each run's mean against each scratch seed; one run keeps Welch over seeds."""
    runs, scratch = [[0.62, 0.621, 0.619], [0.68, 0.681, 0.679]], [0.60, 0.601, 0.599]
    arms = {"gpt": _row("gpt", runs, scratch), "t5": _row("t5", [[0.62, 0.63, 0.61]], scratch)}
    gains = {g.arm: g for g in transfer.finetune_gains(arms)}
    means = welch([statistics.fmean(g) for g in runs], scratch, alternative="greater")
    assert welch(sum(runs, []), scratch, alternative="greater").p < 0.01 < means.p  # pooling overstates it
    assert gains["gpt"].test == RUN_MEANS and gains["gpt"].pretrain_seeds == 2
    assert gains["gpt"].p == pytest.approx(means.p) and gains["gpt"].diff == pytest.approx(means.diff)
    assert gains["t5"].test == SEED_VALUES and gains["t5"].pretrain_seeds == 1
    assert "pretraining-seed as well as" in transfer.unit_note([gains["gpt"]])
    assert "fine-tuning-seed variance only" in transfer.unit_note([gains["t5"]])


def test_probe_gains_with_several_pretraining_runs_count_each_random_body_once():
    """Two probe runs share the random bodies (same seeds): Welch of the two bodies against 5 random bodies."""
    rand = [0.30, 0.31, 0.29, 0.30, 0.32]
    results = [probe_result(0.40, rand, init="runs/x/gpt-pretrain-s0"),
               probe_result(0.36, rand, init="runs/x/gpt-pretrain-s1")]
    (g,) = transfer.probe_gains({"gpt": results}, {"gpt": "gpt"})
    assert g.baseline == pytest.approx(rand) and g.test == transfer.PROBE_RUNS and g.pretrain_seeds == 2
    assert g.p == pytest.approx(welch([0.40, 0.36], rand).p)
