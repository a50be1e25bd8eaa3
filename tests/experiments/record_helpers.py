"""Synthetic run records for the report's helpers: real ``RunRecord``s with the fields a test sets and placeholder
values (zero sizes, empty scores) for the fields the helper under test does not read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from famlab.experiments.analysis.results import (
    EvalRecord,
    FinetuneResult,
    PretrainResult,
    ProbeResult,
    ProbeScore,
    RunRecord,
    read_config,
)


def pretrain_record(family: str, *, objective: str | None = None, path: str = "runs/x/pretrain",
                    config: dict[str, Any] | None = None, eval: dict[str, Any] | None = None) -> RunRecord:
    """A pretraining run's record (``config`` and ``eval`` as its ``config.yaml`` and ``eval.json`` hold them)."""
    results = PretrainResult(family=family, objective=objective, run_dir=path, steps=1, num_params=1, first={},
                             final={}, wall_s=0.0)
    return RunRecord(path=Path(path), config=read_config(config or {}), results=results,
                     eval=EvalRecord.from_json(eval) if eval is not None else None)


def finetune_record(family: str, init: str, *, seeds: dict[str, dict[str, float]] | None = None,
                    grid: list[dict[str, Any]] | None = None, selected: dict[str, float] | None = None,
                    sizes: dict[str, int] | None = None, config: dict[str, Any] | None = None,
                    arm: str | None = None) -> RunRecord:
    """A fine-tune's record (``arm`` as ``report.label_arms`` would set it)."""
    results = FinetuneResult(family=family, init=init, task="task.csv", num_classes=2,
                             sizes=sizes or {"train": 0, "val": 0, "test": 0}, pooling="mean", grid=grid,
                             selected=selected, seeds=seeds or {}, mean={}, std={}, majority={}, wall_s=0.0)
    return RunRecord(path=Path(f"runs/x/{family}-ft"), config=read_config(config or {}), results=results, arm=arm)


def probe_result(pretrained_acc: float, random_acc: list[float], init: str = "runs/x/gpt-pretrain-s0") -> ProbeResult:
    """A probe's results: the pretrained body's test accuracy and each random-init body's."""
    return ProbeResult(family="gpt", init=init, task="task.csv", num_classes=2, sizes={"train": 0, "val": 0, "test": 0},
                       pooling="mean", selection="best", pretrained=_body(pretrained_acc),
                       random={str(s): _body(a) for s, a in enumerate(random_acc)},
                       random_mean={}, random_std={}, gain=None, wall_s=0.0)


def _body(acc: float) -> ProbeScore:
    """A probed body with only its test accuracy set."""
    return ProbeScore(c=0.0, val_acc=0.0, test={"test/acc": acc})
