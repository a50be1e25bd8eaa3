"""One TF-IDF reference: the baselines (``famlab.experiments.analysis.baselines``), a suite's references
(``steps.suite.tfidf_reference``) and the report's (``analysis.report.tfidf_reference``) score a sentence-pair task
with the same rule, ``baselines.tfidf``, so they print the same numbers for it.

The generated pair task's label is which of the two texts holds the word "not": a rule that keeps the two texts
apart (``[v(a), v(b), v(a) * v(b)]``) solves it, one that joins them into one text (``a [SEP] b``) cannot see it,
so two rules give visibly different scores."""

from __future__ import annotations

import csv
import random
from pathlib import Path

from famlab.datamodules.suite import TaskSpec, load_suite_task
from famlab.datamodules.tasks import Task
from famlab.experiments.analysis.baselines import reference_scores, tfidf
from famlab.experiments.analysis.report import tfidf_reference as report_tfidf
from famlab.experiments.analysis.results import RunRecord
from famlab.experiments.configuration.config import DataConfig
from famlab.experiments.configuration.task import load_configured_task
from famlab.experiments.steps.suite import tfidf_reference as suite_tfidf

from tests.experiments.record_helpers import finetune_record

METRICS = ("test/acc", "test/f1", "test/mcc")
COLUMNS = {"text_column": "sentence", "text_pair_column": "second", "label_column": "label"}
SPLIT = {"seed": 0, "val_fraction": 0.1, "test_fraction": 0.25}


def side_pairs(path: Path, n: int = 120, seed: int = 0) -> Path:
    """A CSV pair task: two texts of 4 random words each, "not" inserted into one of them; the label says which."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(20)]
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["sentence", "second", "label"])
        for i in range(n):
            texts = [rng.sample(words, 4), rng.sample(words, 4)]
            side = i % 2
            texts[side].insert(rng.randint(1, 3), "not")  # never first or last: no bigram across the two texts
            out.writerow([" ".join(texts[0]), " ".join(texts[1]), ["first", "second"][side]])
    return path


def pair_task(tmp_path: Path) -> tuple[RunRecord, Task]:
    """A fine-tune's record on the task (its ``config.yaml``'s data section names the task) and the task it loads."""
    data = {"task": str(side_pairs(tmp_path / "pairs.csv")), **COLUMNS, **SPLIT}
    record = finetune_record("gpt", "runs/x/gpt-pretrain-s0", config={"data": data})
    task = load_configured_task(record.config.data)
    assert task.train[0].text_pair is not None and len(task.test) == 30
    return record, task


def test_the_baselines_and_a_suite_score_a_pair_task_with_one_rule_that_keeps_the_texts_apart(tmp_path):
    """The baselines' TF-IDF row and a suite's TF-IDF reference (computed, then read from its cache) are the same
    scores; the rule sees which text holds a word, so it solves the task (a joined text would be at chance)."""
    record, task = pair_task(tmp_path)
    baselines = reference_scores(task)["tfidf"]
    assert baselines["test/acc"] == 1.0
    data = DataConfig(cache_dir=str(tmp_path / "cache"))
    spec = TaskSpec(name="side", task=record.config.data.task, pair=True, **COLUMNS)
    suite_task = load_suite_task(spec, **SPLIT)
    assert [(e.text, e.text_pair, e.label) for e in suite_task.test] == [(e.text, e.text_pair, e.label)
                                                                         for e in task.test]
    computed, cached = suite_tfidf(data, spec, suite_task), suite_tfidf(data, spec, suite_task)
    assert len(list((tmp_path / "cache" / "references").glob("tfidf-side-*.json"))) == 1
    for scores in (computed, cached):
        assert {m: scores[m] for m in METRICS} == {m: baselines[m] for m in METRICS}


def test_the_report_scores_a_pair_task_as_the_baselines_do(tmp_path):
    """The report's TF-IDF reference, read from a fine-tune's config, equals ``baselines.tfidf`` on that task."""
    record, task = pair_task(tmp_path)
    reported = report_tfidf([record], None)
    assert reported is not None
    assert {m: reported[m] for m in METRICS} == {m: v for m, v in tfidf(task).items() if m in METRICS}
    assert reported["num_test"] == len(task.test)
