"""The console shows famlab's own lines: W&B banners, Lightning tips and third-party warnings go to the run's log."""

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import lightning.pytorch  # noqa: F401 - sets its loggers' INFO level, as in every famlab run
import pytest
from famlab.experiments.plumbing import console
from test_compare import tiny_inputs

LIBRARY_CHATTER = ("wandb:", "GPU available", "TPU available", "Tip:", "LOCAL_RANK", "PossibleUserWarning")


def test_library_logging_and_foreign_warnings_go_to_the_log_famlab_warnings_stay(tmp_path, monkeypatch):
    """Lightning's INFO lines and a warning raised by a library land in the log file; a famlab warning is shown
    as usual (stderr; here pytest's recorder); a second call moves the output to the next run's log."""
    monkeypatch.delenv(console.VERBOSE_ENV, raising=False)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)  # restored after the test
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    console.quiet_libraries(first)
    logging.getLogger("lightning.pytorch.utilities.rank_zero").info("GPU available: False, used: False")
    with pytest.warns(UserWarning, match="famlab fell back to eager"):
        console.quiet_libraries(first)  # inside pytest's recorder: route from here
        warnings.warn_explicit("a library's deprecation", DeprecationWarning, "/site-packages/lib/x.py", 3)
        famlab_file = str(Path(console.__file__).resolve())
        warnings.warn_explicit("famlab fell back to eager", UserWarning, famlab_file, 7)
    console.quiet_libraries(second)
    logging.getLogger("lightning.pytorch").info("second run's tip")
    text = first.read_text()
    assert "GPU available" in text and "a library's deprecation" in text and "famlab fell back" not in text
    assert "second run's tip" in second.read_text() and "second run's tip" not in text


def test_a_removed_run_directory_never_breaks_the_code_that_logs(tmp_path, monkeypatch, capsys):
    """The log's directory deleted while the process goes on: the line reaches stderr, nothing raises."""
    import shutil

    monkeypatch.delenv(console.VERBOSE_ENV, raising=False)
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    (tmp_path / "run").mkdir()
    console.quiet_libraries(tmp_path / "run" / "famlab.log")
    shutil.rmtree(tmp_path / "run")
    logging.getLogger("lightning.pytorch").info("after the run directory went")
    assert "after the run directory went" in capsys.readouterr().err


def test_famlab_verbose_leaves_the_libraries_alone(tmp_path, monkeypatch):
    """Verbose: nothing is routed, and a routing made earlier in the process (a notebook's previous run, an earlier
    test) is undone: Lightning's console handler, its propagate flag and W&B's banners come back."""
    monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
    monkeypatch.setenv(console.VERBOSE_ENV, "1")
    console.quiet_libraries(tmp_path / "x.log")  # whatever an earlier test routed is put back first
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    logger = logging.getLogger("lightning.pytorch")
    before = (list(logger.handlers), logger.propagate)
    monkeypatch.delenv(console.VERBOSE_ENV)
    console.quiet_libraries(tmp_path / "routed.log")
    assert (list(logger.handlers), os.environ.get("WANDB_SILENT")) != (before[0], None)
    monkeypatch.setenv(console.VERBOSE_ENV, "1")
    console.quiet_libraries(tmp_path / "y.log")
    assert (list(logger.handlers), logger.propagate) == before and "WANDB_SILENT" not in os.environ
    logger.info("shown on the console again")
    assert not (tmp_path / "routed.log").exists() and not (tmp_path / "y.log").exists()
    assert warnings.showwarning is console._CONSOLE_SHOW


@pytest.mark.slow
def test_a_comparison_prints_only_famlab_lines_with_a_heartbeat(tmp_path):
    """A test-scale comparison with real offline W&B runs, stdout a pipe: no W&B banner or Lightning tip reaches
    stdout or stderr, every run's famlab.log holds them, and the comparison prints one line a "minute" (here a second)
    with its running jobs' progress, instead of each fit's own heartbeat. Each training step sleeps 50 ms (the test
    hook), so that a pretraining of 60 steps outlasts several heartbeats however fast the machine."""
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_SILENT", console.VERBOSE_ENV)}
    env |= {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb"), "FAMLAB_CACHE": str(tmp_path / "cache"),
            "FAMLAB_HEARTBEAT_S": "1", "FAMLAB_FAULT_STEP_SLEEP": "0.05"}  # a pretraining lasts > 3 heartbeats
    args = [a for a in tiny_inputs(tmp_path) if not a.startswith("wandb.mode")]
    done = subprocess.run([sys.executable, "-m", "famlab", "compare", *args, "compare.families=[gpt,t5]",
                           "trainer.max_steps=60", "compare.bpb_docs=8", "compare.zero_shot_items=12",
                           "run_dir=cmp"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = done.stdout + done.stderr
    assert not [line for line in shown.splitlines() if any(c in line for c in LIBRARY_CHATTER)]
    logs = "".join(p.read_text() for p in (tmp_path / "cmp").glob("*/famlab.log"))
    assert "GPU available" in logs
    tail = done.stdout.splitlines()[-14:]  # the last lines: the verdict, where the report is, the W&B view
    assert any(line.startswith("## What pretraining bought") for line in tail) and "## Pretraining" not in done.stdout
    assert any(line.startswith("The whole report") and "cmp/report.md" in line for line in tail)
    assert tail[-1].startswith("W&B runs: wandb leet ")
    board = [line for line in done.stdout.splitlines() if "jobs done" in line]  # the board's line a "minute"
    assert any("-pretrain-s0 step " in line and "loss" in line for line in board), done.stdout[-3000:]
    assert not any("steps/s" in line for line in done.stdout.splitlines())  # no fit's own heartbeat besides it


def test_verbose_flag_of_any_command_shows_the_libraries_output(monkeypatch, capsys):
    """``famlab <command> --verbose`` is FAMLAB_VERBOSE=1 for that run; without it nothing is set."""
    from famlab.experiments.commands import cli

    monkeypatch.delenv(console.VERBOSE_ENV, raising=False)
    assert cli.main(["config", "gpt", "tiny"]) == 0 and not console.verbose()
    assert cli.main(["config", "gpt", "tiny", "--verbose"]) == 0 and console.verbose()
    assert "--verbose" in cli._help()


def test_the_prepare_progress_line_keeps_a_log_file_to_a_line_a_heartbeat(monkeypatch):
    """Off a terminal the progress of a prepare prints at most once per heartbeat period (a minute by default),
    not every two seconds: a 3 GB corpus in a log file is a few dozen lines, not thousands."""
    import io
    import time

    from famlab.experiments.plumbing.data_cache import ProgressLine

    out = io.StringIO()
    line = ProgressLine(every_s=0.0, stream=out)
    assert line.every_s == 60.0
    monkeypatch.setenv("FAMLAB_HEARTBEAT_S", "0.01")
    fast = ProgressLine(every_s=0.0, stream=out)
    fast("encode", 0, 10_000_000)  # a new phase: its first half second prints nothing
    time.sleep(0.6)
    fast("encode", 5_000_000, 10_000_000)
    assert out.getvalue().startswith("prepare: encode 5 / 10 MB (50 %)") and out.getvalue().endswith("\n")
