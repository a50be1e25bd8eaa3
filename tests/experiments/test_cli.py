"""The famlab CLI: override formats, exit status 2 with one line on bad input, extensible command table."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.configuration.compose import split_args

ROOT = Path(__file__).resolve().parents[2]


def test_split_args_separates_presets_overrides_and_flags():
    presets, overrides, flags = split_args(["t5", "tiny", "a.b=1", "--c.d=None", "--dry-run", "x/y.yaml"])
    assert presets == ["t5", "tiny", "x/y.yaml"]
    assert overrides == ["a.b=1", "--c.d=None"]
    assert flags == ["--dry-run"]


def test_config_command_prints_resolved_yaml(capsys):
    """All three override formats reach the printed config; a literal None becomes null."""
    assert cli.main(["config", "tiny", "model.family=t5", "--model.dim=96", "optim.grad_clip=None"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["model"]["family"] == "t5" and cfg["model"]["dim"] == 96 and cfg["optim"]["grad_clip"] is None
    assert cfg["objective"]["name"] == "span"


@pytest.mark.parametrize(
    "args",
    [
        ["config", "gpt", "model.famly=x"],
        ["config", "gpt", "model.pos=xpos"],
        ["config", "bert", "objective.name=clm"],
        ["config", "gpt", "trainer.max_steps=many"],
        ["config", "nosuchpreset"],
        ["nosuchcommand"],
        ["finetune", "tiny"],  # init= missing
        ["finetune", "tiny", "init=/no/such/run"],
    ],
)
def test_bad_input_exits_2_with_one_line(args, capsys):
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("famlab: error: ") and "\n" not in err


def test_presets_command_lists_presets_and_pairs(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    for name in ("bert", "gpt", "t5", "tiny", "small", "base"):
        assert f"  {name} " in out
    assert "bert  mlm" in out and "t5    span" in out


def test_command_table_is_extensible(monkeypatch, capsys):
    """A new command is one table entry pointing at module:function."""
    monkeypatch.setitem(cli.COMMANDS, "echo", ("famlab.experiments.commands.cli:config_command", "test"))
    assert cli.main(["echo", "gpt", "model.dim=40"]) == 0
    assert "dim: 40" in capsys.readouterr().out


def test_python_m_experiments_error_is_one_line_without_traceback():
    """`python -m famlab pretrain gpt model.famly=x` exits 2 with one line (a real subprocess)."""
    proc = subprocess.run(
        [sys.executable, "-m", "famlab", "pretrain", "gpt", "model.famly=x"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    expected = "famlab: error: model.famly: Key 'famly' not in 'ModelConfig'. Did you mean: 'family'?"
    assert proc.stderr.strip() == expected
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["--help"], ["config", "gpt", "tiny"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(args):
    """``famlab config | head``: the pipe's reader closes before famlab writes (a real subprocess); famlab ends with
    141, as a shell tool that SIGPIPE ends, and no traceback (it printed one and exited 1 before)."""
    proc = subprocess.Popen([sys.executable, "-m", "famlab", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # no reader: famlab's first write fails with EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == cli.BROKEN_PIPE_EXIT == 141
    assert err == "", err


def test_ctrl_c_outside_training_is_one_line_exit_130_and_leaves_no_empty_run_dir(monkeypatch, tmp_path, capsys):
    """Ctrl-C while a command prepares, scores or probes (no fit to checkpoint): ``famlab: interrupted``, exit 130, no
    traceback, and the run directory it had just made (nothing trained in it) is removed as a refused run's is."""
    from famlab.experiments.commands import prepare
    from famlab.experiments.plumbing.rundir import make_run_dir

    monkeypatch.chdir(tmp_path)

    def interrupted(presets: list[str], overrides: list[str], flags: list[str]) -> int:
        (make_run_dir(None, "never", "gpt-probe-x") / "config.yaml").write_text("x: 1\n")  # a probe's setup
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare, "main", interrupted)
    assert cli.main(["prepare"]) == cli.INTERRUPTED_EXIT == 130
    assert capsys.readouterr().err.strip() == "famlab: interrupted"
    assert not (tmp_path / "runs").exists()


def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"famlab {version('famlab')}"


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_command_help_exits_0_and_creates_nothing(command, capsys, tmp_path, monkeypatch):
    """`famlab <command> --help`: what it does, its arguments and config sections; no file, no directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    assert cli.main([command, "tiny", "--help"]) == 0
    out = capsys.readouterr().out
    spec = cli.command(command)
    assert out.startswith(f"usage: famlab {command}") and spec.summary[1:] in out
    if spec.sections:
        assert "reads config: " + ", ".join(spec.sections) in out
    assert not list(tmp_path.iterdir())


def test_pretrain_help_in_a_real_process_trains_nothing(tmp_path):
    """The console entry: `famlab pretrain --help` exits 0 at once, writes no run directory and no cache."""
    env = {**os.environ, "FAMLAB_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "famlab", "pretrain", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage: famlab pretrain" in done.stdout and "presets: " in done.stdout
    assert not list(tmp_path.iterdir())


# a valid start of each command line, so the stray word is the only thing wrong
VALID_START = {"generate": ["run_dir"], "fill": ["run_dir"], "report": ["."], "sweep": ["pos_x_family"],
               "config": ["gpt"], "pretrain": ["gpt"], "finetune": ["gpt", "init=scratch"], "compare": ["tiny"],
               "export": ["run_dir", "out_dir"], "probe": ["gpt"], "eval": ["data.eval=wordnet"]}


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_unknown_flag_and_stray_word_exit_2_naming_them(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for bad in ("--dry-runn", "strayword"):
        args = [command, *VALID_START.get(command, []), bad]
        assert cli.main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith("famlab: error: ") and "\n" not in err and bad.lstrip("-") in err, (args, err)
    assert not list(tmp_path.iterdir())


def test_plain_tuple_entries_still_work(monkeypatch, capsys):
    """Another module's entry may be a plain ("module:function", "summary") tuple: it runs and has --help."""
    monkeypatch.setitem(cli.COMMANDS, "echo2", ("famlab.experiments.commands.cli:config_command", "print a config"))
    assert cli.main(["echo2", "--help"]) == 0 and "Print a config." in capsys.readouterr().out
    assert cli.main(["echo2", "gpt", "model.dim=48"]) == 0 and "dim: 48" in capsys.readouterr().out


def test_sweeps_are_addressed_by_name_and_listed(capsys):
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "sweeps (experiments/configs/sweeps/" in out and "  pos_x_family " in out
    assert cli.main(["sweep", "pos_x_family", "--dry-run"]) == 0
    assert "trials (grid), group pos-x-family" in capsys.readouterr().out
