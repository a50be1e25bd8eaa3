"""Shared pieces of the reliability tests: a small corpus, fast run arguments, per-step losses."""

from __future__ import annotations

import csv
import random
from pathlib import Path

WORDS = "the cat dog runs fast slow red blue green sky sea tree house big small eats sleeps jumps over under".split()


def write_corpus(path: Path, lines: int = 300, seed: int = 0) -> Path:
    """A small plain-text corpus (one sentence a line)."""
    rng = random.Random(seed)
    text = [" ".join(rng.choices(WORDS, k=rng.randint(8, 20))) + "." for _ in range(lines)]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def fast_args(corpus: Path, run_dir: Path, steps: int) -> list[str]:
    """A tiny GPT pretraining run, one training-loss row per step, no W&B."""
    return [
        "pretrain", "gpt", "tiny", f"data.corpus={corpus}", "data.seq_len=32", "data.batch_size=8",
        f"trainer.max_steps={steps}", "trainer.val_check_interval=4", "trainer.limit_val_batches=1",
        "trainer.log_every_n_steps=1", "trainer.progress_bar=false", "wandb.mode=disabled", f"run_dir={run_dir}",
    ]


def step_rows(run_dir: Path, column: str = "train/loss") -> dict[int, dict[str, str]]:
    """``step -> row`` of metrics.csv rows that have ``column``; a step logged twice keeps the later row."""
    rows: dict[int, dict[str, str]] = {}
    with open(run_dir / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get(column):
                rows[int(row["step"])] = row
    return rows


def losses(run_dir: Path) -> dict[int, float]:
    return {step: float(row["train/loss"]) for step, row in step_rows(run_dir).items()}
