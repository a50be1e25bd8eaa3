"""The comparison's zero-shot table: mean over pretraining seeds of each task's headline, reference rows, W&B keys."""

import pytest
from famlab.experiments.analysis.zeroshot_table import zero_shot_markdown, zero_shot_rows, zero_shot_summary

from tests.experiments.record_helpers import pretrain_record


def _result(raw: float, per_byte: float, *, chance: float = 0.5, length: float = 0.25) -> dict:
    """One task's results as ``famlab eval`` writes them (only the keys the table reads)."""
    block = {"raw": {"acc": raw}, "per_token": {"acc": 0.0}, "per_byte": {"acc": per_byte}, "chance": chance,
             "length_only": length}
    with_groups = {**block, "groups": {"g": dict(block)}}
    return {**with_groups, "bigram": dict(with_groups)}


def test_rows_average_seeds_on_each_tasks_headline_with_chance_bigram_and_length_rows():
    """Minimal pairs read raw, the reverse dictionary per byte; seeds are averaged; W&B keys name task and arm."""
    seeds = [{"wordnet-minimal-pairs": _result(0.8, 0.1), "wordnet-reverse-dictionary": _result(0.1, 0.3)},
             {"wordnet-minimal-pairs": _result(0.6, 0.1), "wordnet-reverse-dictionary": _result(0.1, 0.5)}]
    rows = zero_shot_rows({"gpt": [pretrain_record("gpt", eval={"zero_shot": z}) for z in seeds],
                           "bert": [pretrain_record("bert", eval={})]})
    assert set(rows) == {"gpt", "chance", "bigram", "length"}  # an arm without results has no row
    assert rows["gpt"]["seeds"] == 2
    assert rows["gpt"]["wordnet-minimal-pairs"] == pytest.approx(0.7)
    assert rows["gpt"]["wordnet-reverse-dictionary"] == pytest.approx(0.4)
    assert rows["gpt"]["wordnet-minimal-pairs/g"] == pytest.approx(0.7)
    assert rows["bigram"]["wordnet-minimal-pairs"] == 0.8 and rows["length"]["wordnet-reverse-dictionary"] == 0.25
    summary = zero_shot_summary(rows)
    assert summary["zero_shot/wordnet-minimal-pairs/gpt"] == pytest.approx(0.7)
    assert summary["zero_shot/wordnet-reverse-dictionary/g/length"] == 0.25 and "zero_shot/seeds/gpt" not in summary
    md = zero_shot_markdown(rows).splitlines()
    assert md[0] == "| arm | minimal-pairs | minimal-pairs/g | reverse-dictionary | reverse-dictionary/g |"
    assert md[2] == "| gpt | 0.700 | 0.700 | 0.400 | 0.400 |" and md[-1].startswith("| length only (shortest) | 0.250")
