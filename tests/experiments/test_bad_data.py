"""Bad user data: one line on stderr, exit status 2, before any model trains, naming the file, column or key.

The catalogue: a corpus or task file that is not UTF-8, a task with one class (in the file, or in a comparison's
``compare.task_limit`` subsample), a missing text / label column, a subsample split left empty, a corpus smaller
than one batch, and task-suite files of any YAML shape.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml
from famlab.datamodules import DataError, load_corpus
from famlab.datamodules.suite import TaskSpec
from famlab.experiments.commands import cli
from famlab.experiments.configuration.config import CompareConfig, ConfigInputError, DataConfig
from famlab.experiments.configuration.task import check_compare_task, check_subsample, load_configured_task
from famlab.experiments.steps.compare_suite import check_tasks
from famlab.experiments.steps.suite import read_suite

from tests.experiments.reliability_helpers import write_corpus

FAST = ["wandb.mode=disabled", "trainer.progress_bar=false", "data.batch_size=8", "data.seq_len=32"]  # pretrain
FT = ["wandb.mode=disabled", "trainer.progress_bar=false"]  # finetune (it refuses keys it does not read)
# a comparison that stops at its first step if the task checks let it through: its corpus is empty
COMPARE = ["compare", "gpt", "compare.families=[gpt]", "compare.workers=1", "wandb.mode=disabled",
           "data.corpus={d}/empty.txt"]


def _csv(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    """A task file with text, label and split columns."""
    path.write_text("text,label,split\n" + "".join(f"{t},{lab},{s}\n" for t, lab, s in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("bad-data")
    write_corpus(d / "corpus.txt")
    (d / "empty.txt").write_text("")
    (d / "utf16.txt").write_bytes("a corpus saved as UTF-16.\nsecond line.\n".encode("utf-16"))
    (d / "latin1.csv").write_bytes("text,label\ncafe,a\ncaf\xe9,b\n".encode("latin-1"))
    (d / "one.csv").write_text("text,label\n" + "".join(f"t{i},same\n" for i in range(30)))
    (d / "nolabel.csv").write_text("sentence,topic\nhi there,a\nbye now,b\n")
    (d / "nolabel.jsonl").write_text('{"text": "hi", "label": "a"}\n{"text": "bye", "category": "b"}\n')
    # 95 % of the training rows are one class: a small subsample holds only it
    _csv(d / "skewed.csv", [(f"t{i}", "b" if i % 20 == 0 else "a", "train") for i in range(200)]
         + [(f"v{i}", "ab"[i % 2], "val") for i in range(10)] + [(f"s{i}", "ab"[i % 2], "test") for i in range(10)])
    # class c is rare in training and the only class of validation: a subsample without c leaves validation empty
    _csv(d / "rare.csv", [(f"t{i}", "c" if i == 7 else "ab"[i % 2], "train") for i in range(100)]
         + [(f"v{i}", "c", "val") for i in range(5)] + [(f"s{i}", "ab"[i % 2], "test") for i in range(10)])
    _csv(d / "good.csv", [(f"t{i}", "ab"[i % 2], "train") for i in range(30)]
         + [(f"v{i}", "ab"[i % 2], "val") for i in range(8)] + [(f"s{i}", "ab"[i % 2], "test") for i in range(8)])
    return d


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    """Runs in an empty folder with its own cache; checks that a refused run leaves that folder empty."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path.parent / f"{tmp_path.name}-cache"))
    yield tmp_path
    assert not list(tmp_path.iterdir()), "a refused run left files behind"


def one_error(capsys, args: list[str]) -> str:
    """Run the CLI; it must exit 2 with exactly one ``famlab: error:`` line and no traceback; returns that line."""
    capsys.readouterr()
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("famlab:")]
    assert len(lines) == 1 and lines[0].startswith("famlab: error: "), err[-2000:]
    assert "Traceback" not in err
    return lines[0]


def _compare(files: Path) -> list[str]:
    return [a.format(d=files) for a in COMPARE]


def _suite(path: Path, tasks: object) -> Path:
    path.write_text(yaml.safe_dump({"tasks": tasks}, sort_keys=False), encoding="utf-8")
    return path


# (case, args, fragments of the one-line message); {d} = the fixture's folder
CASES = [
    ("UTF-16 corpus", ["pretrain", "gpt", "tiny", "data.corpus={d}/utf16.txt", *FAST],
     ["{d}/utf16.txt: no UTF-8 text", "the first at line 1, byte offset 0: 0xff", "UTF-16 byte-order mark"]),
    ("Latin-1 task file", ["finetune", "gpt", "tiny", "init=scratch", "data.task={d}/latin1.csv", *FT],
     ["{d}/latin1.csv: not UTF-8 text (byte 0xe9 at line 3, byte offset 21"]),
    ("one class", ["finetune", "gpt", "tiny", "init=scratch", "data.task={d}/one.csv", *FT],
     ["{d}/one.csv: only one class ('same')"]),
    ("missing text column (CSV)", ["finetune", "gpt", "tiny", "init=scratch", "data.task={d}/nolabel.csv", *FT],
     ["{d}/nolabel.csv line 2: no column 'text' (columns: sentence, topic), the text column"]),
    ("missing label column (CSV)", ["finetune", "gpt", "tiny", "init=scratch", "data.task={d}/nolabel.csv",
                                    "data.text_column=sentence", *FT],
     ["{d}/nolabel.csv line 2: no column 'label' (columns: sentence, topic), the label column"]),
    ("missing label column (JSONL, line 2)", ["finetune", "gpt", "tiny", "init=scratch",
                                              "data.task={d}/nolabel.jsonl", *FT],
     ["{d}/nolabel.jsonl line 2: no column 'label' (columns: text, category)"]),
]


@pytest.mark.parametrize("case,args,fragments", CASES, ids=[c[0] for c in CASES])
def test_bad_data_exits_2_with_one_line(files, cli_env, capsys, case, args, fragments):
    line = one_error(capsys, [a.format(d=files) for a in args])
    for fragment in fragments:
        assert fragment.format(d=files) in line, line


def test_corpus_smaller_than_one_batch(files, cli_env, capsys):
    """Two short documents cannot fill a batch of 8 blocks: refused after the tokenizer, before the model."""
    corpus = files / "two-docs.txt"
    corpus.write_text("a first short document.\n\nand a second one.\n")
    line = one_error(capsys, ["pretrain", "gpt", "tiny", f"data.corpus={corpus}", *FAST])
    assert str(corpus) in line and "fewer than one batch" in line and "batch_size=8" in line, line


def test_mixed_corpus_warns_with_the_first_bad_byte(tmp_path):
    """A corpus with some UTF-8 text keeps it; the warning names the line and byte offset of the first bad byte."""
    f = tmp_path / "mixed.txt"
    f.write_bytes(b"good line\nnaive caf\xe9\nanother good\n")
    with pytest.warns(UserWarning, match=r"mixed.txt: skipped 1 of 3 lines .*the first at line 2, byte offset 19: "
                                         r"0xe9"):
        corpus = load_corpus(str(f), val_fraction=0.0)
    assert corpus.train == ["good line", "another good"]


def test_binary_corpus_names_a_nul_byte(tmp_path):
    f = tmp_path / "nul.txt"
    f.write_bytes(b"abc\x00def\n")
    with pytest.raises(DataError, match=r"nul.txt: no UTF-8 text \(1 of 1 lines undecodable, the first at line 1, "
                                        r"byte offset 3: NUL; binary file\?\)"):
        load_corpus(str(f))


def test_task_file_with_a_bom_keeps_its_first_column(tmp_path):
    """A byte-order mark (Excel's "CSV UTF-8") does not become part of the first column's name."""
    f = tmp_path / "bom.csv"
    f.write_text("\ufefftext,label\n" + "".join(f"t{i},{i % 2}\n" for i in range(20)), encoding="utf-8")
    assert load_configured_task(_data(f)).labels == ["0", "1"]


def test_jsonl_task_with_a_bom_and_raw_line_separators(tmp_path):
    """JSON Lines end at "\\n" only: a raw U+2028 inside a string, or a leading byte-order mark, is not bad data."""
    f = tmp_path / "sep.jsonl"
    rows = [f'{{"text": "t{i}\u2028more\u0085end", "label": {i % 2}}}' for i in range(20)]
    f.write_bytes("\ufeff".encode() + "\r\n".join(rows).encode("utf-8"))
    task = load_configured_task(_data(f))
    assert task.labels == ["0", "1"] and all("\u2028more\u0085" in e.text for e in task.train)


def test_short_csv_row_is_refused_naming_the_column(tmp_path):
    f = tmp_path / "short.csv"
    f.write_text("label,text\na,x\nb\n")
    with pytest.raises(DataError, match=r"short.csv line 3: no value in column 'text' \(the text column\)"):
        load_configured_task(_data(f))


# -- a comparison's compare.task_limit subsample ---------------------------------------------------------------


def _data(task: Path, **settings: object) -> object:
    return DataConfig(task=str(task), **settings)  # type: ignore[arg-type]


def _compare_cfg(task: Path, limit: int | None, eval_limit: int | None = None,
                 seed: int = 0) -> tuple[DataConfig, CompareConfig]:
    return DataConfig(task=str(task), seed=seed), CompareConfig(task_limit=limit, task_eval_limit=eval_limit)


@pytest.mark.parametrize("task,limit,eval_limit,fragment", [
    ("skewed.csv", 5, None, "data.task={d}/skewed.csv: the compare.task_limit=5 subsample's 5 training examples "
                            "hold one class ('a') of the task's 2"),
    ("rare.csv", 20, None, "data.task={d}/rare.csv: the compare.task_limit=20 subsample would have an empty val "
                           "split: none of the task's 5 val examples has one of the 2 classes"),
    ("good.csv", 20, 0, "compare.task_eval_limit=0 would leave the validation and test splits of "
                        "data.task={d}/good.csv empty"),
])
def test_subsample_checks(files, task, limit, eval_limit, fragment):
    with pytest.raises(ConfigInputError) as e:
        check_compare_task(*_compare_cfg(files / task, limit, eval_limit))
    assert fragment.format(d=files) in str(e.value) and "\n" not in str(e.value)
    check_compare_task(*_compare_cfg(files / task, None))  # the whole task is fine
    check_compare_task(*_compare_cfg(files / "good.csv", limit))


def test_subsample_check_predicts_subsample_task(tmp_path):
    """check_subsample refuses exactly the subsamples that compare.subsample_task writes with one training class
    or an empty validation / test split, over random tasks, limits and seeds."""
    from famlab.experiments.steps.comparison import subsample_task

    rng = random.Random(0)
    refused = 0
    for case in range(60):
        classes = "abcdefgh"[: rng.randint(2, 8)]
        weights = [rng.random() ** 3 + 0.01 for _ in classes]
        train = [(f"t{i}", rng.choices(classes, weights)[0], "train") for i in range(rng.randint(4, 80))]
        train += [(f"u{i}", c, "train") for i, c in enumerate(classes)]  # every class once in the full task
        held = [(f"{s}{i}", rng.choices(classes, weights)[0], s) for s in ("val", "test")
                for i in range(rng.randint(1, 6))]
        path = _csv(tmp_path / f"task{case}.csv", train + held)
        data, compare = _compare_cfg(path, rng.randint(1, 30), rng.choice([None, 0, 1, 3]), seed=rng.randint(0, 5))
        limit, eval_limit = compare.task_limit, compare.task_eval_limit
        written = subsample_task(data, limit, tmp_path / f"sub{case}.csv", eval_limit)
        rows = [line.split(",") for line in written.read_text().splitlines()[1:]]
        bad = len({r[2] for r in rows if r[3] == "train"}) < 2 or not all(
            any(r[3] == s for r in rows) for s in ("val", "test"))
        task = load_configured_task(data)
        try:
            check_subsample(task, limit, eval_limit, seed=data.seed,
                            source=str(path))
        except ConfigInputError:
            assert bad, f"case {case}: refused a subsample that fine-tunes"
            refused += 1
        else:
            assert not bad, f"case {case}: let through a subsample with one class or an empty split"
    assert 5 < refused < 55  # both outcomes were exercised


def test_suite_compare_checks_each_task_subsample(files, cli_env, capsys):
    """famlab compare with a suite: a task whose subsample holds one class fails before the comparison starts."""
    suite = _suite(files / "skewed-suite.yaml", {"good": {"spec": "good.csv"}, "skewed": {"spec": "skewed.csv"}})
    line = one_error(capsys, [*_compare(files), f"data.task={suite}", "compare.task_limit=5"])
    assert f"data.task={suite}: task 'skewed' ({files}/skewed.csv): the compare.task_limit=5 subsample" in line, line


def test_check_tasks_takes_the_single_task(files):
    """compare_suite.check_tasks(data, compare, None) checks the single task data.task as it checks a suite's."""
    with pytest.raises(ConfigInputError, match="compare.task_limit=5 subsample's 5 training examples hold one class"):
        check_tasks(*_compare_cfg(files / "skewed.csv", 5), None)
    with pytest.raises(DataError, match="only one class"):
        check_tasks(*_compare_cfg(files / "one.csv", None), None)
    check_tasks(*_compare_cfg(files / "good.csv", 20), None)


def test_single_task_compare_checks_its_subsample(files, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    line = one_error(capsys, [*_compare(files), f"data.task={files}/skewed.csv", "compare.task_limit=5"])
    assert f"data.task={files}/skewed.csv: the compare.task_limit=5 subsample" in line, line


# -- task-suite files ---------------------------------------------------------------------------------------------


def test_suite_mapping_form_equals_the_list_form(files):
    mapping = files / "map.yaml"
    mapping.write_text("tasks:\n"
                       "  topics: {spec: good.csv, text_column: text, label_column: label}\n"
                       "  sentiment: {task: rare.csv, metric: f1}\n"
                       "  plain: skewed.csv\n")
    listed = _suite(files / "list.yaml", [
        {"name": "topics", "task": "good.csv", "text_column": "text", "label_column": "label"},
        {"name": "sentiment", "spec": "rare.csv", "metric": "f1"},
        {"name": "plain", "task": "skewed.csv"}])
    specs = read_suite(str(mapping))
    assert specs == read_suite(str(listed))
    assert [s.name for s in specs] == ["topics", "sentiment", "plain"]
    assert specs[0] == TaskSpec("topics", str(files / "good.csv")) and specs[1].metric == "f1"


SUITE_SHAPES = [
    ("a scalar", "3\n", "a suite file is a mapping with 'tasks:', not int"),
    ("an empty file", "", "not an empty file"),
    ("a list of numbers", "tasks: [1, 2]\n", "line 1: a task is a spec string or a mapping, not int"),
    ("tasks: null", "tasks:\n", "expected a non-empty list (or a mapping of name: task) under 'tasks:', got nothing"),
    ("missing spec", "tasks:\n  topics: {text_column: text}\n", "line 2: no 'task' (or 'spec')"),
    ("a name without a task", "tasks:\n  topics:\n", "line 2: task 'topics' has no task"),
    ("unknown key in a task", "tasks:\n  topics: {spec: good.csv, colour: red}\n", "line 2: unknown key 'colour'"),
    ("one task without its dash", "tasks: {task: good.csv, text_column: text}\n",
     "'tasks:' maps 'task' to 'good.csv', which reads as one task's settings"),
    ("a name used twice", "tasks:\n  a: good.csv\n  a: rare.csv\n",
     "line 3: task name 'a' is used twice (also line 2)"),
    ("a boolean name", "tasks:\n  yes: good.csv\n", "line 2: task name True is not a string; quote it"),
    ("a path as a name", "tasks:\n  ../up: good.csv\n", "task name '../up' is not a plain folder name"),
    ("a list as a column", "tasks:\n  - {task: good.csv, label_column: [a, b]}\n",
     "line 2: label_column: ['a', 'b'] is not a column name"),
    ("a bad tagged value", "tasks: !!int abc\n", "not valid YAML (invalid literal for int()"),
    ("tabs", "tasks:\n\t- good.csv\n", "line 2: not valid YAML"),
    ("two documents", "tasks: [good.csv]\n---\ntasks: [rare.csv]\n", "not valid YAML (but found another document)"),
    ("deep nesting", "tasks: " + "[" * 5000 + "]" * 5000 + "\n", "YAML nested too deeply"),
    ("not UTF-8", b"tasks:\n  - caf\xe9.csv\n", "not UTF-8 text (byte 0xe9 at line 2, byte offset 14)"),
]


@pytest.mark.parametrize("case,text,fragment", SUITE_SHAPES, ids=[c[0] for c in SUITE_SHAPES])
def test_suite_shapes_fail_with_one_line_naming_the_file(files, case, text, fragment):
    path = files / f"shape-{SUITE_SHAPES.index((case, text, fragment))}.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError) as e:
        read_suite(str(path))
    message = str(e.value)
    assert message.startswith(str(path)) and "\n" not in message and fragment in message, message


def test_bad_suite_shape_through_the_cli(files, cli_env, capsys):
    """famlab finetune and famlab compare refuse the same suite file in one line, before anything trains."""
    path = files / "scalar-tasks.yaml"
    path.write_text("tasks: 3\n")
    for args in (["finetune", "gpt", "tiny", "init=scratch", *FT], _compare(files)):
        line = one_error(capsys, [*args, f"data.task={path}"])
        assert f"{path}: expected a non-empty list" in line, line


def test_suite_mapping_form_through_the_cli(files, cli_env, capsys):
    """A mapping-form suite reaches task loading: its one-class task is refused before the first task trains."""
    path = files / "map-one.yaml"
    path.write_text("tasks:\n  fine: {spec: good.csv}\n  single: {spec: one.csv}\n")
    line = one_error(capsys, ["finetune", "gpt", "tiny", "init=scratch", f"data.task={path}", *FT])
    assert f"{files}/one.csv: only one class ('same')" in line, line


ATOMS = [None, True, False, 0, 3, -1.5, "", "good.csv", "rare.csv", "nope.csv", "wordnet-pairs", "wordnet-pairz",
         "hf:glue:sst2", "../x", "a/b", "text", "label", "f1", "auc", "yes", [], {}]
TASKS = ["good.csv", "rare.csv", "wordnet-pairs", "hf:glue:sst2", "nope.csv", "wordnet-pairz"]
KEYS = ["tasks", "name", "task", "spec", "text_column", "text_pair_column", "label_column", "split_column", "pair",
        "metric", "topics", "good", "x", 1, True, None]


def _random_value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.random()
    if depth > 3 or kind < 0.4:
        return rng.choice(ATOMS)
    if kind < 0.7:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(KEYS): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _random_suite_text(rng: random.Random) -> str:
    """A random suite: mostly ``tasks:`` over random entries; some text-level damage too."""
    tasks = _random_value(rng)
    if rng.random() < 0.6:  # entries shaped like tasks, in the list or mapping form
        entries = [({rng.choice(KEYS[2:10]): rng.choice(ATOMS)} if rng.random() < 0.3 else {})
                   | {rng.choice(["task", "spec"]): rng.choice(TASKS)} for _ in range(rng.randint(1, 3))]
        names = ["topics", "good", "x", "sentiment", "sst2", 1, True, None]
        tasks = entries if rng.random() < 0.5 else {rng.choice(names): e for e in entries}
    doc = {"tasks": tasks} if rng.random() < 0.85 else tasks
    if isinstance(doc, dict) and rng.random() < 0.2:
        doc[rng.choice(KEYS)] = rng.choice(ATOMS)
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=rng.random() < 0.5)
    if rng.random() < 0.25:  # damage: cut, or insert YAML punctuation
        at = rng.randint(0, len(text))
        text = text[:at] if rng.random() < 0.5 else text[:at] + rng.choice(":-[]{}&*!|>'\"\t#%@`,?") + text[at:]
    return text


def test_suite_fuzz_any_yaml_shape_is_a_suite_or_one_line_naming_the_file(files):
    """Over many random YAML shapes read_suite returns a valid suite or raises a ValueError (ConfigInputError /
    DataError) whose one line names the file; never another exception type."""
    rng = random.Random(1)
    path = files / "fuzz.yaml"
    outcomes = {"suite": 0, "refused": 0}
    for case in range(600):
        text = _random_suite_text(rng)
        path.write_text(text, encoding="utf-8")
        try:
            specs = read_suite(str(path))
        except ValueError as e:
            message = str(e)
            assert str(path) in message and "\n" not in message, (case, text, message)
            outcomes["refused"] += 1
            continue
        assert specs and all(isinstance(s, TaskSpec) for s in specs), (case, text)
        assert len({s.name for s in specs}) == len(specs) and all("/" not in s.name for s in specs), (case, text)
        outcomes["suite"] += 1
    assert outcomes["suite"] > 50 and outcomes["refused"] > 300, outcomes



def test_a_comparison_on_a_corpus_smaller_than_one_batch_stops_before_any_job(files, cli_env, capsys):
    """Refused right after the tokenizer, before the scratch baselines: one line, exit 2, no comparison left."""
    corpus = files / "two-docs.txt"
    corpus.write_text("a first short document.\n\nand a second one.\n" * 3)
    args = ["compare", "compare.families=[gpt,t5]", "compare.workers=1", "wandb.mode=disabled",
            f"data.corpus={corpus}", "data.tokenizer.vocab_size=300", "data.tokenizer.num_sentinels=20",
            f"data.task={files}/good.csv", "compare.task_limit=None", "run_dir=cmp"]
    line = one_error(capsys, args)
    assert str(corpus) in line and "fewer than one batch" in line, line
    assert not (Path.cwd() / "cmp").exists()
