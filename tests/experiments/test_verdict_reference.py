"""The verdict names a reference that beats every arm, says what that means and what to change; the console's
verdict lines (``famlab compare``'s last lines, :func:`compare.verdict`) carry it."""

import statistics

from famlab.experiments.analysis import transfer
from famlab.experiments.analysis.report import (
    REFERENCE_MEANING,
    reference_verdict,
    tfidf_reference,
    with_reference_verdict,
)
from famlab.experiments.analysis.results import ArmRow
from famlab.experiments.commands.compare import verdict
from test_compare import tiny_inputs

from tests.experiments.record_helpers import finetune_record

METRIC = "test/acc"
TFIDF = "TF-IDF + logistic regression"


def arm(family: str, pretrained: list[float], scratch: list[float]) -> ArmRow:
    """An arm whose fine-tunes scored ``pretrained`` and its family's scratch baseline ``scratch`` (test acc)."""

    def stat(values: list[float]) -> dict[str, tuple[float, float, int]]:
        return {m: (statistics.fmean(values), statistics.stdev(values), len(values)) for m in ("test/acc", "test/f1",
                                                                                              "test/mcc")}

    return ArmRow(family=family, objective=None, finetune=stat(pretrained), scratch=stat(scratch),
                  finetune_values={METRIC: pretrained}, scratch_values={METRIC: scratch})


def word_identity_task(root) -> tuple[dict, object]:
    """A generated 3-topic task whose label is which words a text holds (test_compare's tiny task), and its
    fine-tune record, as the report reads them."""
    inputs = dict(a.split("=", 1) for a in tiny_inputs(root))
    data = {"task": inputs["data.task"], "text_column": "sentence", "label_column": "topic"}
    return data, finetune_record("gpt", "runs/x/gpt-pretrain-s0", config={"data": data})


def test_tfidf_beats_every_arm_on_a_word_identity_task_and_the_console_verdict_says_so(tmp_path):
    """The real TF-IDF reference on a task solved by word identity, arms below it: the section printed as the
    console's verdict opens with the reference, both scores, the best arm, what it means and what to change."""
    _, record = word_identity_task(tmp_path)
    tfidf = tfidf_reference([record], None)
    assert tfidf is not None and tfidf[METRIC] > 0.9  # word identity solves it
    families = {"gpt": arm("gpt", [0.70, 0.74, 0.72], [0.50, 0.52, 0.48]),
                "t5": arm("t5", [0.80, 0.78, 0.82], [0.55, 0.50, 0.52])}
    majority = {METRIC: 1 / 3}
    line = reference_verdict(families, {"majority class": majority, TFIDF: tfidf})
    assert line is not None and line.startswith(f"**The {TFIDF} reference beats every arm**")
    assert f"test acc {tfidf[METRIC]:.3f} against the best arm's mean 0.800 (t5)" in line
    meaning, change = REFERENCE_MEANING[TFIDF]
    assert "word identity" in meaning and meaning in line and change in line and "bigger budget" in change
    bought = transfer.section([record], [], families, tmp_path, [])
    md = with_reference_verdict(bought.markdown, families, majority, tfidf)
    (tmp_path / "report.md").write_text("\n".join(["# report", "", *md]), encoding="utf-8")
    shown = verdict(tmp_path)  # what famlab compare prints last
    assert shown.startswith("## What pretraining bought") and line in shown
    assert "Pretraining pays off for every arm" in shown  # the gains' own verdict stays beside it


def test_no_reference_line_when_an_arm_reaches_the_references():
    """An arm at or above both references: no line, the section unchanged; the majority class beating every arm is
    named before TF-IDF (the stronger statement)."""
    families = {"gpt": arm("gpt", [0.92, 0.93, 0.94], [0.5, 0.5, 0.6]), "t5": arm("t5", [0.6, 0.6, 0.7],
                                                                                 [0.5, 0.5, 0.6])}
    refs = {"majority class": {METRIC: 0.4}, TFIDF: {METRIC: 0.92}}
    assert reference_verdict(families, refs) is None
    section = ["## What pretraining bought", "", "text"]
    assert with_reference_verdict(section, families, refs["majority class"], refs[TFIDF]) == section
    low = {"gpt": arm("gpt", [0.30, 0.32, 0.34], [0.3, 0.3, 0.3])}
    line = reference_verdict(low, refs)
    assert line is not None and line.startswith("**The majority class reference beats every arm**")
    assert reference_verdict({"gpt": ArmRow(family="gpt")}, refs) is None  # nothing fine-tuned: nothing to say
