"""The famlab CLI: override formats, exit status 2 with one line on bad input, extensible command table."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from famlab.experiments import cli

ROOT = Path(__file__).resolve().parents[2]


def test_split_args_separates_presets_overrides_and_flags():
    presets, overrides, flags = cli.split_args(["t5", "tiny", "a.b=1", "--c.d=None", "--dry-run", "x/y.yaml"])
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
    monkeypatch.setitem(cli.COMMANDS, "echo", ("famlab.experiments.cli:config_command", "test"))
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
