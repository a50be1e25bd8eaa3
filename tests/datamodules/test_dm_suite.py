"""Suite specs: the bundled suite, task lists, validated entries with one-line errors."""

from __future__ import annotations

import pytest
from famlab.datamodules import DataError
from famlab.datamodules.suite import BUNDLED_SUITE, TaskSpec, is_suite, load_suite_task, parse_suite, suite_specs


def test_bundled_suite_and_lists():
    """suite = supersense, pairs, domain; a comma list keeps the bundled tasks' own settings."""
    assert [s.task for s in suite_specs("suite")] == ["wordnet-supersense", "wordnet-pairs", "wordnet-domain"]
    assert suite_specs("wordnet-pairs,wordnet-domain") == list(BUNDLED_SUITE[1:])
    assert is_suite("suite") and is_suite("a.yaml") and is_suite("a.csv,b.csv") and not is_suite("wordnet-pairs")


def test_entries_with_columns_metric_and_relative_paths(tmp_path):
    (tmp_path / "mine.csv").write_text("p,h,y\nx,y,a\n")
    specs = parse_suite(["wordnet-domain", {"task": "mine.csv", "text_column": "p", "text_pair_column": "h",
                                            "label_column": "y", "pair": True, "metric": "f1"},
                         {"name": "mrpc", "task": "hf:glue:mrpc", "pair": True}], "s.yaml", base_dir=tmp_path)
    assert specs[0] == TaskSpec("domain", "wordnet-domain")
    assert specs[1] == TaskSpec("mine", str(tmp_path / "mine.csv"), "p", "h", "y", pair=True, metric="f1")
    assert specs[1].headline == "test/f1" and specs[2].name == "mrpc"


@pytest.mark.parametrize("entries,fragment", [
    (["wordnet-pairz"], "s.yaml line 3: unknown task 'wordnet-pairz' (bundled: wordnet-supersense"),
    ([{"task": "nope.csv"}], "s.yaml line 3: task file"),
    ([{"task": "t.csv", "pair": True}], "is a pair task (pair: true) but names no text_pair_column"),
    ([{"task": "t.csv", "metrc": "f1"}], "unknown key 'metrc'"),
    ([{"task": "t.csv", "metric": "auc"}], "metric 'auc' is not one of acc, f1, mcc"),
    ([{"name": "x"}], "no 'task'"),
    (["t.csv", "t.csv"], "task name 't' is used twice"),
    ([], "expected a non-empty list"),
])
def test_bad_entries_fail_with_one_line(tmp_path, entries, fragment):
    (tmp_path / "t.csv").write_text("text,label\na,x\nb,y\n")
    lines = [3 + i for i in range(len(entries))]
    with pytest.raises(DataError, match=None) as e:
        parse_suite(entries, "s.yaml", base_dir=tmp_path, lines=lines)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_loading_refuses_one_class_and_missing_pair_texts(tmp_path):
    one = tmp_path / "one.csv"
    one.write_text("text,label\n" + "".join(f"t{i},same\n" for i in range(20)))
    with pytest.raises(DataError, match=r"only one class \('same'\) in the training split"):
        load_suite_task(TaskSpec("one", str(one)))
    pairs = tmp_path / "p.csv"
    pairs.write_text("a,b,label\n" + "".join(f"t{i},u{i},{i % 2}\n" for i in range(20)))
    with pytest.raises(DataError, match="no column 'c'"):
        load_suite_task(TaskSpec("p", str(pairs), text_column="a", text_pair_column="c"))
    task = load_suite_task(TaskSpec("p", str(pairs), text_column="a", text_pair_column="b", pair=True))
    assert task.train[0].text_pair.startswith("u")
