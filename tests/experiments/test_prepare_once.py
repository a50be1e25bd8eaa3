"""Ranks other than 0 wait for rank 0's prepared files; rank 0 never waits; a missing file times out in one line."""

from __future__ import annotations

import threading
import time

import pytest
from famlab.experiments.plumbing.prepare_once import PrepareTimeout, wait_for_rank_zero


def test_other_ranks_wait_until_rank_zero_wrote_the_file(tmp_path):
    ready = tmp_path / "meta.json"
    threading.Timer(0.3, ready.write_text, args=("{}",)).start()
    t0 = time.monotonic()
    wait_for_rank_zero(ready, "the token files", rank=1, poll_s=0.02)
    assert ready.exists() and time.monotonic() - t0 >= 0.25


def test_rank_zero_does_not_wait(tmp_path):
    t0 = time.monotonic()
    wait_for_rank_zero(tmp_path / "never", "the tokenizer", rank=0)
    assert time.monotonic() - t0 < 0.1


def test_a_file_that_never_comes_times_out_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FAMLAB_PREPARE_TIMEOUT", "0.2")
    with pytest.raises(PrepareTimeout, match=r"rank 1 waited 0 s for rank 0 to prepare the tokenizer .*data.cache_dir"):
        wait_for_rank_zero(tmp_path / "never", "the tokenizer", rank=1, poll_s=0.02)
