"""``famlab compare data.task=<suite>``: every task fine-tuned and probed per arm, a per-task table and the suite
score, rebuilt the same by ``famlab report``, and carried by the W&B report run; bad suites exit 2 first."""

from __future__ import annotations

import json
import random
import statistics

import pytest
import yaml
from famlab.datamodules.suite import TaskSpec
from famlab.experiments.analysis.results import RunRecord
from famlab.experiments.analysis.stats import nested_welch
from famlab.experiments.analysis.suite_table import TaskRuns, suite_gains, suite_rows
from famlab.experiments.commands import cli
from famlab.experiments.configuration.compose import compose
from famlab.experiments.tracking.wandb_report import log_report_run
from test_compare import tiny_inputs
from test_wandb_dashboards import inspect, summary

from tests.experiments.record_helpers import finetune_record

TOPICS = {"animal": ["dog", "cat", "horse", "bird", "fish", "cow"], "colour": ["red", "blue", "green", "white"],
          "motion": ["run", "walk", "swim", "fly", "jump"]}


def _suite_inputs(root, tasks) -> list[str]:
    """tiny_inputs' corpus and settings, with ``data.task`` a suite file of ``tasks`` (plus a pair task file)."""
    rng = random.Random(1)
    rows = []
    for i in range(150):
        a, b = list(TOPICS)[i % 3], list(TOPICS)[(i // 3) % 3]
        rows.append(json.dumps({"first": " ".join(rng.choices(TOPICS[a], k=3)),
                                "second": " ".join(rng.choices(TOPICS[b], k=3)), "label": "same" if a == b else "no"}))
    (root / "pairs.jsonl").write_text("\n".join(rows) + "\n")
    (root / "one.csv").write_text("text,label\n" + "".join(f"t{i},x\n" for i in range(30)))
    replaced = ("data.task", "data.text_column", "data.label_column")
    args = [a for a in tiny_inputs(root) if a.split("=")[0] not in replaced]
    (root / "suite.yaml").write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False))
    return [*args, f"data.task={root / 'suite.yaml'}"]


GOOD = [{"name": "topic", "task": "task.csv", "text_column": "sentence", "label_column": "topic"},
        {"name": "same", "task": "pairs.jsonl", "text_column": "first", "text_pair_column": "second", "pair": True,
         "metric": "f1"}]


@pytest.fixture(scope="module")
def suite_compare(tmp_path_factory):
    """One tiny GPT suite comparison of two tasks (one a sentence pair), two seeds, a subsample of each task."""
    root = tmp_path_factory.mktemp("suite-compare")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        args = [*_suite_inputs(root, GOOD), "compare.families=[gpt]", "finetune.lr_grid=[1e-3]",
                "compare.task_limit=90", "compare.task_eval_limit=24", "finetune.probe_seeds=[0,1]",
                "compare.workers=2"]  # each task's jobs in worker processes, as the default runs them
        assert cli.main(["compare", *args]) == 0
        (comp,) = (root / "runs").glob("compare-*")
    return comp


def _per_seed_macro(comp, run: str, keys: dict[str, str]) -> list[float]:
    seeds = {t: json.loads((comp / t / run / "results.json").read_text())["seeds"] for t in keys}
    return [statistics.fmean(seeds[t][s][m] for t, m in keys.items()) for s in sorted(seeds["topic"])]


@pytest.mark.slow
def test_suite_compare_reports_every_task_and_the_suite_score(suite_compare):
    """Each task's runs live in its own folder; the table has a row per arm side and reference, a column per
    task and the suite score, which is the mean of the per-seed macro averages read from the run directories."""
    comp = suite_compare
    for task in ("topic", "same"):
        assert {p.name for p in (comp / task).iterdir() if p.is_dir()} == {"gpt-ft-s0", "gpt-scratch", "gpt-probe-s0"}
    assert not (comp / "gpt-ft-s0").exists() and (comp / "gpt-pretrain-s0").is_dir()
    pair_cfg = yaml.safe_load((comp / "same" / "gpt-ft-s0" / "config.yaml").read_text())
    assert pair_cfg["data"]["text_pair_column"] == "text_pair" and "task-same" in pair_cfg["wandb"]["tags"]
    results = json.loads((comp / "results.json").read_text())
    lines = results["tables"]["suite"].splitlines()
    assert lines[0] == "|  | topic (acc) | same (f1) | suite (macro avg) |"
    assert [r.split("|")[1].strip() for r in lines[2:]] == [
        "gpt pretrained", "gpt probe", "gpt probe, random-init body", "gpt scratch", "majority class", "TF-IDF + LR"]
    keys = {"topic": "test/acc", "same": "test/f1"}
    for row, run in (("gpt pretrained", "gpt-ft-s0"), ("gpt scratch", "gpt-scratch")):
        per_seed = _per_seed_macro(comp, run, keys)
        suite = results["suite"]["rows"][row]["suite"]
        assert suite["mean"] == pytest.approx(statistics.fmean(per_seed)) and suite["seeds"] == 2
        assert suite["low"] < suite["mean"] < suite["high"]
        assert results["wandb_summary"][f"suite/{row.replace(' ', '_')}"] == pytest.approx(suite["mean"])
    majority = [json.loads((comp / t / "gpt-ft-s0" / "results.json").read_text())["majority"][m]
                for t, m in keys.items()]
    assert results["wandb_summary"]["suite/majority_class"] == pytest.approx(statistics.fmean(majority))
    md = (comp / "report.md").read_text()
    assert "## Task suite (test split)" in md and "## What pretraining bought\n\n### Suite score\n" in md
    assert "## Fine-tuning (test split)" not in md and "same (f1): Fine-tuning:" in md


@pytest.mark.slow
def test_report_rebuilds_the_same_suite_tables(suite_compare, tmp_path):
    assert cli.main(["report", str(suite_compare), f"--out={tmp_path}"]) == 0
    first, again = (json.loads((d / "results.json").read_text()) for d in (suite_compare, tmp_path))
    assert again["tables"] == first["tables"] and again["suite"] == first["suite"]
    assert again["wandb_summary"] == first["wandb_summary"]


@pytest.mark.slow
def test_the_wandb_report_run_carries_the_suite_table_and_summary(suite_compare, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = compose([], ["wandb.mode=offline"]).cfg
    run_id = log_report_run(cfg.wandb, suite_compare, group="suite-1", name="suite-1-report")
    recs = inspect(next((suite_compare / "wandb").glob(f"offline-run-*-{run_id}")))
    results = json.loads((suite_compare / "results.json").read_text())
    s = summary(recs)
    assert s["tables/task_suite_test_split._type"] == "table-file"
    for key, value in results["wandb_summary"].items():
        assert s[key] == pytest.approx(value), key
    table = next((suite_compare / "wandb").glob("offline-run-*/files/media/table/tables/task_suite_test_split_*.json"))
    rows = json.loads(table.read_text())["data"]
    assert [r[0] for r in rows] == [line.split("|")[1].strip() for line in results["tables"]["suite"].splitlines()[2:]]


BAD = [
    ("unknown task", [GOOD[0], "wordnet-pairz"], "unknown task 'wordnet-pairz'"),
    ("pair task without its second column", [{"task": "pairs.jsonl", "text_column": "first", "pair": True}],
     "is a pair task (pair: true) but names no text_pair_column"),
    ("a task with one class", [GOOD[0], {"task": "one.csv"}], "only one class ('x') in the training split"),
]


@pytest.mark.parametrize("case,tasks,fragment", BAD, ids=[c[0] for c in BAD])
def test_a_bad_suite_stops_the_compare_before_it_starts(tmp_path, monkeypatch, capsys, case, tasks, fragment):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    assert cli.main(["compare", *_suite_inputs(tmp_path, tasks), "compare.families=[gpt]"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("famlab: error: ") and fragment in err[0], err
    assert not (tmp_path / "runs").exists()


def _ft(init: str, family: str, seeds: dict[str, float]) -> RunRecord:
    return finetune_record(family, init, seeds={s: {"test/acc": v, "test/f1": v / 2} for s, v in seeds.items()},
                           arm=None if init == "scratch" else family)


def test_suite_rows_key_seeds_by_pretraining_run_and_gains_test_the_suite_scores():
    """Synthetic run records: two pretraining runs x two seeds pretrained, two scratch seeds; the suite gain is
    Welch's test of the per-seed macro averages."""
    a, b = TaskSpec("a", "a.csv"), TaskSpec("b", "b.csv", metric="f1")
    tasks = [
        TaskRuns(a, [_ft("runs/x/gpt-pretrain-s0", "gpt", {"0": 0.8, "1": 0.7}),
                     _ft("runs/x/gpt-pretrain-s1", "gpt", {"0": 0.9, "1": 0.6}),
                     _ft("scratch", "gpt", {"0": 0.4, "1": 0.5})], {}),
        TaskRuns(b, [_ft("runs/x/gpt-pretrain-s0", "gpt", {"0": 0.6, "1": 0.4}),
                     _ft("runs/x/gpt-pretrain-s1", "gpt", {"0": 0.8, "1": 1.0}),
                     _ft("scratch", "gpt", {"0": 0.2, "1": 0.4})], {}),
    ]
    rows = suite_rows(tasks, {"gpt": "gpt"})
    assert list(rows) == ["gpt pretrained", "gpt scratch"]
    assert dict(rows["gpt pretrained"][1].seeds) == {"gpt-pretrain-s0/0": 0.3, "gpt-pretrain-s0/1": 0.2,
                                                     "gpt-pretrain-s1/0": 0.4, "gpt-pretrain-s1/1": 0.5}
    (gain,) = suite_gains(rows, {"gpt": "gpt"})
    pre = [(0.8 + 0.3) / 2, (0.7 + 0.2) / 2, (0.9 + 0.4) / 2, (0.6 + 0.5) / 2]
    scratch = [(0.4 + 0.1) / 2, (0.5 + 0.2) / 2]
    w = nested_welch([pre[:2], pre[2:]], [[v] for v in scratch], alternative="greater")  # one unit per pretraining run
    assert gain.diff == pytest.approx(w.diff) and gain.p == pytest.approx(w.p) and gain.p_holm == pytest.approx(w.p)
    assert sorted(gain.pretrained) == pytest.approx(sorted(pre))


@pytest.mark.parametrize("task", ["suite", "wordnet-pairs,wordnet-domain"])
def test_bundled_tasks_and_suites_pass_the_config_checks(task):
    """Names that are no file (``suite``, a list of bundled tasks) compose; their tasks are read later."""
    assert compose([], [f"data.task={task}"]).cfg.data.task == task


def test_a_missing_suite_file_exits_2_naming_it(tmp_path, capsys):
    assert cli.main(["compare", f"data.task={tmp_path / 'nope.yaml'}", "compare.families=[gpt]"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"data.task={tmp_path / 'nope.yaml'}: no such task file" in err[0], err
