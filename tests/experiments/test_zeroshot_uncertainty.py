"""Zero-shot cells carry their uncertainty: a bootstrap CI over items, and a paired test against the bigram floor."""

import random
from pathlib import Path

import pytest
from famlab.experiments.analysis.results import EvalRecord, PretrainResult, RunRecord, read_config
from famlab.experiments.analysis.stats import bootstrap_ci, paired_bootstrap
from famlab.experiments.analysis.zeroshot_table import zero_shot_section, zero_shot_uncertainty


def test_bootstrap_ci_covers_a_known_accuracy_at_its_rate():
    """Over many synthetic item sets drawn at accuracy 0.7, the 95 % CI holds 0.7 in about 95 % of them."""
    rng = random.Random(0)
    hits = 0
    trials = 120
    for t in range(trials):
        items = [float(rng.random() < 0.7) for _ in range(100)]
        _, low, high = bootstrap_ci(items, resamples=300, seed=t)
        hits += low <= 0.7 <= high
    assert 0.86 <= hits / trials <= 0.99


def test_paired_bootstrap_finds_a_real_difference_and_no_false_one():
    """A model right on 20 more of 300 items than the floor: p small, CI above 0; the same scores: p 1, CI 0."""
    rng = random.Random(1)
    floor = [float(rng.random() < 0.6) for _ in range(300)]
    better = list(floor)
    flipped = [i for i, v in enumerate(floor) if v == 0.0][:20]
    for i in flipped:
        better[i] = 1.0
    diff, low, high, p = paired_bootstrap(better, floor)
    assert diff == pytest.approx(20 / 300) and 0 < low <= diff <= high and p < 0.01
    assert paired_bootstrap(floor, floor) == (0.0, 0.0, 0.0, 1.0)
    swapped = paired_bootstrap(floor, better)
    assert swapped[0] == pytest.approx(-diff) and swapped[3] < 0.01


def test_paired_bootstrap_refuses_unpaired_items():
    with pytest.raises(ValueError, match="equally long"):
        paired_bootstrap([1.0, 0.0], [1.0])


def _record(arm_correct: str, floor_correct: str) -> RunRecord:
    task = "wordnet-minimal-pairs"

    def block(flags: str) -> dict:
        acc = flags.count("1") / len(flags)
        return {norm: {"acc": acc, "low": acc, "high": acc, "correct": flags} for norm in ("raw", "per_token",
                                                                                           "per_byte")}

    result = {**block(arm_correct), "chance": 0.5, "bigram": block(floor_correct)}
    res = PretrainResult(family="gpt", objective="clm", run_dir="r", steps=1, num_params=1, first={}, final={},
                         budget={}, wall_s=0.0, setup_s=0.0, cpu_s=0.0, threads=1)
    return RunRecord(path=Path("r"), config=read_config({}), results=res,
                     eval=EvalRecord.from_json({"zero_shot": {task: result}}))


def test_report_cells_show_the_ci_and_the_paired_test_against_the_floor():
    """Two arms, one far above the floor and one equal to it: the section shows both CIs and the paired rows, the
    first with a small Holm-corrected p, the second with p 1."""
    floor = "0101010101" * 20
    strong = "1111111101" * 20
    stats = zero_shot_uncertainty({"gpt": [_record(strong, floor)], "t5": [_record(floor, floor)]})
    gpt, t5 = stats["gpt"]["wordnet-minimal-pairs"], stats["t5"]["wordnet-minimal-pairs"]
    assert gpt["acc"] == pytest.approx(0.9) and gpt["low"] < 0.9 < gpt["high"]
    assert gpt["diff"] == pytest.approx(0.4) and gpt["p_holm"] < 0.01
    assert t5["diff"] == 0.0 and t5["p_holm"] == 1.0
    md = "\n".join(zero_shot_section({"gpt": [_record(strong, floor)], "t5": [_record(floor, floor)]}))
    assert "| gpt | 0.900 [" in md and "| arm - add-k bigram |" in md and "| t5 | +0.000 [+0.000, +0.000], p 1 |" in md


def test_results_without_per_item_records_keep_the_plain_table():
    """eval.json written before per-item records: accuracies only, no CI and no paired table (nothing invented)."""
    rec = _record("1100", "1000")
    assert rec.eval is not None and rec.eval.zero_shot is not None
    result = rec.eval.zero_shot["wordnet-minimal-pairs"]
    assert result.bigram is not None
    for block in (result, result.bigram):
        for norm in ("raw", "per_token", "per_byte"):
            block.accuracy(norm).correct = None
    assert zero_shot_uncertainty({"gpt": [rec]}) == {}
    md = "\n".join(zero_shot_section({"gpt": [rec]}))
    assert "| gpt | 0.500 |" in md and "| arm - add-k bigram |" not in md
