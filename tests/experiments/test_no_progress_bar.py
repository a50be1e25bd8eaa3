"""Off a terminal no command draws a progress bar: a log file gets famlab's lines, never a bar's box characters or
carriage-return redraws (experiments/plumbing/console.py, ``progress_bar``)."""

import os
import subprocess
import sys

import pytest
from famlab.experiments.plumbing import console
from test_compare import tiny_inputs

BAR_MARKS = ("━", "\r")  # rich's bar glyph, and the carriage return every redrawing bar (rich, tqdm) writes


@pytest.mark.slow
def test_finetune_with_stdout_to_a_file_writes_no_progress_bar(tmp_path):
    """``famlab finetune`` with trainer.progress_bar at its default (true) and stdout, stderr a file: the fit, its
    validation and its test pass (``Testing 184/184`` before) leave no bar in the file, and the run still finishes."""
    env = {k: v for k, v in os.environ.items() if k != console.VERBOSE_ENV}
    env |= {"WANDB_MODE": "disabled", "FAMLAB_CACHE": str(tmp_path / "cache"), "TOKENIZERS_PARALLELISM": "false"}
    read = ("data.corpus", "data.task", "data.text_column", "data.label_column", "data.tokenizer", "data.batch_size",
            "data.max_len", "model.dim", "finetune.max_steps", "finetune.val_every")
    args = [a for a in tiny_inputs(tmp_path) if a.startswith(read)]  # trainer.progress_bar left at its default
    log = tmp_path / "finetune.log"
    with log.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "famlab", "finetune", "gpt", *args, "init=scratch",
                               "finetune.seeds=[0]", "run_dir=ft"], cwd=tmp_path, env=env, stdout=out,
                              stderr=subprocess.STDOUT, timeout=600)
    text = log.read_text()
    assert done.returncode == 0, text[-3000:]
    assert (tmp_path / "ft").is_dir()
    assert not [line for line in text.split("\n") if any(mark in line for mark in BAR_MARKS)], text[-3000:]


def test_the_bar_needs_a_terminal_as_well_as_the_setting(monkeypatch):
    """``progress_bar``: the setting and a terminal on stdout; either missing, no bar."""

    class Stream:
        def __init__(self, tty: bool) -> None:
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    for tty in (True, False):
        monkeypatch.setattr(sys, "stdout", Stream(tty))
        assert console.progress_bar(True) is tty
        assert console.progress_bar(False) is False
