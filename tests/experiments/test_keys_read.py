"""Every command reads every key it accepts: ``reads.READS`` against what each command's code reads.

Each command runs for real on a tiny setup while every field of the config dataclasses is recorded as the command's
code reads it (a test-only ``__getattribute__`` on each section class). Reads made while composing and validating
the config (``compose``, ``cross_checks``, ``check_*``, ``__post_init__``), by OmegaConf, ``dataclasses`` or
``copy`` (writing config.yaml, copying a config) are not the command reading a setting, and neither is reading a
field the command itself set first (``compose_finetune`` puts the run's tokenizer settings in place). The test
then asserts that the declared list and the recording agree: every key read is declared (else the command would
refuse a key it uses), and every declared key is read by some scenario (else it would accept a key it ignores).
For the commands that compose a config the list is derived from the plan their step takes
(``configuration/plans.py``): the type checker bounds what their code can read, and this test checks that it does.
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.configuration import config as config_module
from famlab.experiments.configuration.config import Config
from famlab.experiments.configuration.plans import PreparePlan, ProbePlan
from famlab.experiments.configuration.reads import (
    CONFIG_COMMANDS,
    PLANS,
    READS,
    check_overrides,
    describe,
    plan_keys,
    read_keys,
    reads,
    schema_keys,
)

ROOT = Path(__file__).resolve().parents[2]
SOURCES = tuple(str(ROOT / p) + "/" for p in ("experiments", "families", "objectives", "datamodules", "famlab"))
# validation, not use: composing a config checks every key, whichever command runs (and so do the functions named
# check_* / _check*, cross_checks and the dataclasses' __post_init__, wherever they are called)
COMPOSING = "compose.py:compose"
# a key a check parses for its caller: make_trainer passes check_lightning_settings(t)["devices"] to the Trainer
PARSED_BY_A_CHECK = {("check_lightning_settings", "trainer.devices")}
# keys whose reads depend on the family (num_decoder_layers is T5's): declared, and checked, as a whole section
SECTION_LEVEL = ("model",)


def _sections() -> dict[type, str]:
    """Each config dataclass and the dotted prefix of its fields (``TokenizerConfig`` -> ``data.tokenizer.``)."""
    out: dict[type, str] = {}

    def walk(obj: Any, prefix: str) -> None:
        out[type(obj)] = prefix
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")

    walk(Config(), "")
    return out


def _checking(frame: FrameType | None, key: str) -> bool:
    """Whether the read in ``frame`` is part of composing or checking a config rather than the command using it."""
    while frame is not None:
        name, path = frame.f_code.co_name, frame.f_code.co_filename
        checker = name.startswith(("check_", "_check")) or name in ("cross_checks", "__post_init__")
        if (checker and (name, key) not in PARSED_BY_A_CHECK) or f"{Path(path).name}:{name}" == COMPOSING:
            return True
        frame = frame.f_back
    return False


class Recorder:
    """Records the config keys famlab's own code reads, with where the first read happened."""

    def __init__(self) -> None:
        self.read: dict[str, str] = {}
        self.written: set[tuple[int, str]] = set()  # (id of a section object, field) the command set itself

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for cls, prefix in _sections().items():
            names = frozenset(f.name for f in dataclasses.fields(cls))
            monkeypatch.setattr(cls, "__getattribute__", self._getter(prefix, names))
            monkeypatch.setattr(cls, "__setattr__", self._setter(names))
        monkeypatch.setattr(config_module, "replace", self._replacer())

    def _replacer(self) -> Any:
        """The sections are frozen: a command sets a key by building a section with ``with_values`` (which calls
        ``dataclasses.replace``); the keys it sets there are its own, not read from the user's config."""
        recorder, replace = self, dataclasses.replace

        def replace_recorded(obj: Any, /, **changes: Any) -> Any:
            new = replace(obj, **changes)
            # what the command set in ``obj`` it still set in the copy
            recorder.written.update([(id(new), name) for i, name in recorder.written if i == id(obj)])
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_name == "with_values":
                frame = frame.f_back  # the caller of the outermost with_values
            if frame is not None and frame.f_code.co_filename.startswith(SOURCES):
                recorder.written.update((id(new), name) for name in changes if not _checking(frame, name))
            return new

        return replace_recorded

    def _getter(self, prefix: str, names: frozenset[str]) -> Any:
        recorder = self

        def __getattribute__(obj: Any, name: str) -> Any:
            value = object.__getattribute__(obj, name)
            if name in names and not dataclasses.is_dataclass(value) and (id(obj), name) not in recorder.written:
                frame = sys._getframe(1)
                key = prefix + name
                if frame.f_code.co_filename.startswith(SOURCES) and not _checking(frame, key):
                    where = f"{Path(frame.f_code.co_filename).relative_to(ROOT)}:{frame.f_lineno}"
                    recorder.read.setdefault(key, where)
            return value

        return __getattribute__

    def _setter(self, names: frozenset[str]) -> Any:
        recorder = self

        def __setattr__(obj: Any, name: str, value: Any) -> None:
            frame = sys._getframe(1)
            if name in names and frame.f_code.co_filename.startswith(SOURCES) and not _checking(frame, name):
                recorder.written.add((id(obj), name))
            object.__setattr__(obj, name, value)

        return __setattr__


def run_recorded(monkeypatch: pytest.MonkeyPatch, command: str, scenarios: list[list[str]]) -> dict[str, str]:
    """Run ``famlab <command> <args>`` for each scenario while recording; every run must succeed."""
    recorder = Recorder()
    with monkeypatch.context() as mp:
        recorder.install(mp)
        for args in scenarios:
            assert cli.main([command, *args]) == 0, args
    return recorder.read


def assert_declared_is_read(command: str, read: dict[str, str], *, section_level: bool = False) -> None:
    """The recording and ``READS[command]`` agree: each key read is declared; each declared key (or, with
    ``section_level``, each declared pattern) was read."""
    undeclared = {k: where for k, where in read.items() if not reads(command, k)}
    assert not undeclared, f"famlab {command} reads keys READS does not declare (it would refuse them): {undeclared}"
    patterns = [p for p in READS[command] if not p.startswith("-")]
    if section_level:
        unread = [p for p in patterns if not any(k == p or k.startswith(p + ".") for k in read)]
    else:
        whole = [p for p in patterns if p in SECTION_LEVEL]
        unread = sorted(k for k in read_keys(command) - set(read) if not k.startswith(tuple(f"{p}." for p in whole)))
        unread += [p for p in whole if not any(k.startswith(p + ".") for k in read)]
    assert not unread, f"famlab {command} declares keys no run of it read (it would accept and ignore them): {unread}"


# --- a tiny workspace: corpus, task, one pretrained GPT -----------------------------------------------------------

MODEL = ["model.dim=32", "model.num_layers=2"]
DATA = ["data.tokenizer.vocab_size=300", "data.tokenizer.num_sentinels=20", "data.seq_len=32", "data.batch_size=4"]
PRETRAIN = ["trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.limit_val_batches=2",
            "trainer.progress_bar=false"]
FINETUNE = ["finetune.max_steps=2", "finetune.val_every=1", "data.max_len=32", "trainer.progress_bar=false"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``corpus.txt``, a 3-class ``task.csv`` and ``runs/base`` (a GPT pretrained for 3 steps), in one folder."""
    root = tmp_path_factory.mktemp("keys")
    rng = random.Random(0)
    words = {"animal": ["dog", "cat", "horse", "bird"], "colour": ["red", "blue", "green"], "motion": ["run", "swim"]}
    docs = [" ".join(rng.choices(sum(words.values(), []), k=30)) for _ in range(300)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    rows = [f"a {' '.join(rng.choices(words[t], k=4))} thing,{t},{(['train'] * 3 + ['val', 'test'])[i % 5]}"
            for i, t in enumerate(list(words) * 20)]
    (root / "task.csv").write_text("text,label,split\n" + "\n".join(rows) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        assert cli.main(["pretrain", "gpt", "tiny", f"data.corpus={root / 'corpus.txt'}", *MODEL, *DATA, *PRETRAIN,
                         "wandb.mode=disabled", f"run_dir={root / 'runs' / 'base'}"]) == 0
    return root


@pytest.fixture
def in_workspace(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("FAMLAB_CACHE", str(workspace / "cache"))
    return workspace


@pytest.mark.slow
def test_pretrain_reads_what_it_declares(in_workspace, monkeypatch):
    """With W&B on (offline), so the wandb.* keys and the W&B chart axis (compare.match) are read too."""
    read = run_recorded(monkeypatch, "pretrain", [
        ["gpt", "tiny", "data.corpus=corpus.txt", *MODEL, *DATA, *PRETRAIN, "wandb.mode=offline", "run_dir=runs/p"]])
    assert_declared_is_read("pretrain", read)


@pytest.mark.slow
def test_finetune_reads_what_it_declares(in_workspace, monkeypatch):
    """A run's body (W&B on), a scratch body trained by epochs (its tokenizer from data.corpus), and a probe."""
    read = run_recorded(monkeypatch, "finetune", [
        ["init=runs/base", *MODEL, "data.task=task.csv", *FINETUNE, "wandb.mode=offline", "run_dir=runs/f1"],
        ["tiny", "init=scratch", *MODEL, *DATA[:2], "data.corpus=corpus.txt", "data.task=task.csv", *FINETUNE,
         "finetune.max_steps=None", "finetune.epochs=1", "wandb.mode=disabled", "run_dir=runs/f2"],
        ["init=runs/base", *MODEL, "data.task=task.csv", "data.max_len=32", "finetune.mode=probe",
         "finetune.probe_seeds=[0]", "wandb.mode=disabled", "run_dir=runs/f3"],
    ])
    assert_declared_is_read("finetune", read)


def test_prepare_reads_what_it_declares(in_workspace, monkeypatch):
    read = run_recorded(monkeypatch, "prepare", [["data.corpus=corpus.txt", "data.tokenizer.vocab_size=500",
                                                  "run_dir=prepared"]])
    assert_declared_is_read("prepare", read)


@pytest.mark.slow
def test_probe_reads_what_it_declares(in_workspace, monkeypatch):
    read = run_recorded(monkeypatch, "probe", [
        ["runs/base", *MODEL, "data.task=task.csv", "data.max_len=32", "finetune.probe_seeds=[0]",
         "wandb.mode=offline", "run_dir=runs/pr"]])
    assert_declared_is_read("probe", read)


TRIAL = """import json, os, sys
args = dict(a.split("=", 1) for a in sys.argv[1:])
os.makedirs(args["run_dir"], exist_ok=True)
json.dump(args, open(os.path.join(args["run_dir"], "args.json"), "w"))
"""


def test_sweep_reads_what_it_declares_and_its_trials_get_the_wandb_settings(tmp_path, monkeypatch, capsys):
    """A random search (sweep.count, sweep.seed), replicated (sweep.seeds), run in a named directory with W&B
    settings that every trial gets (read by the sweep to pass them on); the trials are a stand-in program."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trial.py").write_text(TRIAL)
    spec = {"method": "random", "parameters": {"optim.lr": {"min": 0.001, "max": 0.01}},
            "command": [sys.executable, str(tmp_path / "trial.py"), "${args_no_hyphens}"]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    wandb = ["wandb.project=p", "wandb.entity=e", "wandb.tags=[a]", "wandb.log_model=false", "wandb.mode=offline",
             "wandb.group=g", "wandb.dir=wb"]
    read = run_recorded(monkeypatch, "sweep", [
        ["s.yaml", "sweep.count=2", "sweep.seed=3", "sweep.seeds=[0]", "sweep.parallel=1", *wandb, "run_dir=runs/sw",
         "resume=auto"]])
    assert_declared_is_read("sweep", read)
    for trial in ("trial-000", "trial-001"):
        args = json.loads((tmp_path / "runs" / "sw" / trial / "args.json").read_text())
        assert {k: args[k] for k in ("wandb.project", "wandb.mode", "wandb.tags", "wandb.group")} == {
            "wandb.project": "p", "wandb.mode": "offline", "wandb.tags": '["a"]', "wandb.group": "g"}
    capsys.readouterr()


@pytest.mark.slow
def test_compare_reads_what_it_declares(in_workspace, monkeypatch):
    """A one-family comparison, W&B on; checked per declared section (its keys are every command's keys)."""
    read = run_recorded(monkeypatch, "compare", [
        ["data.corpus=corpus.txt", "data.task=task.csv", *MODEL, *DATA, *FINETUNE, "trainer.max_steps=4",
         "trainer.val_check_interval=2", "trainer.limit_val_batches=2", "compare.families=[gpt]", "compare.seeds=[0]",
         "compare.task_limit=None", "finetune.probe_seeds=[0]", "compare.workers=1", "wandb.mode=offline",
         "run_dir=runs/cmp"]])
    assert_declared_is_read("compare", read, section_level=True)


# --- the declaration itself, the CLI and the option commands ------------------------------------------------------

def test_every_pattern_names_keys_of_the_schema():
    keys = schema_keys()
    for command in CONFIG_COMMANDS:
        for p in READS[command]:
            bare = p.lstrip("-")
            assert bare == "*" or any(k == bare or k.startswith(bare + ".") for k in keys), (command, p)


def test_a_plans_keys_are_its_properties_with_its_views_expanded():
    """What a command reads is derived from the plan its step takes (configuration/plans.py): each property is a key
    of the schema (a misspelled one would drop out of the list unseen), a view's keys are listed one by one, a
    section-typed property is the whole section, and a key the command sets itself is not read from the user."""
    assert set(plan_keys(PreparePlan)) == {"data.cache_dir", "data.tokenizer", "data.seed", "data.corpus",
                                           "data.val_fraction", "run_dir"}
    keys = schema_keys()
    for command, plan in PLANS.items():
        for key in plan_keys(plan):
            assert any(k == key or k.startswith(key + ".") for k in keys), (command, key)
    assert "data.tokenizer" in set(plan_keys(ProbePlan)) and not reads("probe", "data.tokenizer.kind")
    assert READS["finetune"][READS["finetune"].index("trainer") + 1] == "-trainer.max_steps"
    assert not reads("compare", "init") and reads("compare", "finetune.lr") and not reads("compare", "finetune.seeds")


def test_every_command_that_takes_overrides_declares_what_it_reads():
    """bench's options are the fields of BenchSettings, which its own parser checks; every other command is here."""
    assert set(cli.COMMANDS) - set(READS) == {"bench"} and cli.command("bench").flags is None


def test_help_prints_the_declared_keys(capsys):
    for command in READS:
        assert cli.main([command, "--help"]) == 0
        out = capsys.readouterr().out
        line = ("reads config: " if command in CONFIG_COMMANDS else "options: ") + ", ".join(describe(command))
        assert line in out or not READS[command], (command, out)


@pytest.mark.parametrize(("args", "key"), [
    (["pretrain", "gpt", "finetune.lr=0.1"], "finetune.lr"),
    (["pretrain", "gpt", "compare.seeds=[1]"], "compare.seeds"),
    (["pretrain", "gpt", "init=scratch"], "init"),
    (["pretrain", "gpt", "data={task: x.csv}"], "data.task"),
    (["finetune", "gpt", "init=scratch", "optim.lr=0.1"], "optim.lr"),
    (["finetune", "gpt", "init=scratch", "trainer.max_steps=5"], "trainer.max_steps"),
    (["finetune", "gpt", "init=scratch", "compare.families=[gpt]"], "compare.families"),
    (["probe", "gpt", "finetune.lr=0.1"], "finetune.lr"),
    (["compare", "finetune.seeds=[0,1]"], "finetune.seeds"),
    (["sweep", "pos_x_family", "model.dim=64"], "model.dim"),
    (["eval", "runs/x", "data.eval=wordnet", "seed=1"], "seed"),
    (["generate", "runs/x", "prompt=a", "text=b"], "text"),
    (["export", "runs/x", "out", "prompt=a"], "prompt"),
    (["report", "runs/x", "seed=1"], "seed"),
])
def test_an_override_the_command_does_not_read_exits_2_before_anything_runs(args, key, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"famlab: error: famlab {args[0]} does not read {key}") and "\n" not in err
    assert f"famlab {args[0]} reads: " in err
    assert not list(tmp_path.iterdir())  # refused before anything ran: no run directory, no cache


def test_the_message_names_the_commands_that_read_the_key(capsys):
    assert cli.main(["pretrain", "gpt", "finetune.lr=0.1"]) == 2
    assert "it is read by famlab finetune, compare" in capsys.readouterr().err


def test_a_misspelled_key_in_a_section_read_gets_the_schemas_suggestion(capsys):
    assert cli.main(["pretrain", "gpt", "model.dimm=3"]) == 2
    assert "Did you mean: 'dim'?" in capsys.readouterr().err


def test_presets_may_set_keys_the_command_does_not_read(tmp_path, capsys):
    """A preset is a bundle for several commands: its unread keys pass; here composing fails on the override
    trainer.max_steps=0 afterwards, past the check."""
    preset = tmp_path / "mine.yaml"
    preset.write_text(yaml.safe_dump({"finetune": {"lr": 0.5}, "compare": {"seeds": [1]}, "init": "scratch"}))
    assert cli.main(["pretrain", "gpt", str(preset), "trainer.max_steps=0"]) == 2
    err = capsys.readouterr().err
    assert "trainer.max_steps" in err and "does not read" not in err


def test_config_accepts_every_key(capsys):
    assert cli.main(["config", "gpt", "finetune.lr=0.5", "compare.seeds=[1]", "sweep.parallel=2", "init=scratch"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["finetune"]["lr"] == 0.5 and cfg["sweep"]["parallel"] == 2


def test_the_option_commands_declare_their_parsers_options():
    from famlab.experiments.commands import evaluate, generate

    assert set(READS["eval"]) == set(evaluate._options(["data.eval=wordnet"]))
    assert set(READS["generate"]) == set(generate.OPTIONS) - {"text"}
    assert set(READS["fill"]) == set(generate.OPTIONS) - {"prompt"}


def test_check_overrides_reads_section_mappings_key_by_key():
    check_overrides("finetune", ["finetune={lr: 0.1, seeds: [0]}", "--data.task=x.csv"])
    with pytest.raises(ValueError, match="does not read optim.lr"):
        check_overrides("finetune", ["optim={eps: 1e-6, lr: 0.1}"])


# --- sweep files: W&B's agent passes every parameter to the command --------------------------------------------

BUNDLED = ROOT / "experiments" / "configs" / "sweeps"


@pytest.mark.parametrize("path", sorted(BUNDLED.glob("*.yaml")), ids=lambda p: p.stem)
def test_bundled_sweep_files_vary_only_keys_their_command_reads(path):
    from famlab.experiments.commands.sweep import famlab_command, load_sweep

    spec = load_sweep(path)  # refuses a parameter its command does not read
    command = famlab_command(spec)
    assert command in READS and all(reads(command, key) for key in spec["parameters"])


def test_a_sweep_file_varying_a_key_its_command_ignores_is_refused(tmp_path, capsys):
    spec = {"method": "grid", "parameters": {"finetune.lr": {"values": [0.1, 0.2]}},
            "command": ["famlab", "pretrain", "tiny", "${args_no_hyphens}"]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    assert cli.main(["sweep", str(tmp_path / "s.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "famlab pretrain does not read finetune.lr" in err and "W&B's agent" in err and "\n" not in err
