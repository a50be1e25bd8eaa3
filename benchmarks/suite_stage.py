"""Seconds that a task suite adds to ``famlab compare``: the fine-tune + probe stage of each task, for one arm.

The stage a suite comparison repeats per task is what ``famlab compare`` does after pretraining: the linear
probe of the pretrained body (against ``finetune.probe_seeds`` random bodies), the fine-tune from it and the
family's scratch fine-tune (the protocol's lr grid x ``compare.seeds``), on the task's seeded subsample
(``compare.task_limit`` / ``compare.task_eval_limit``). This script runs that stage on a copy of a finished
comparison's pretraining run (nothing is written into the comparison), under the comparison's own defaults,
and records wall and process CPU seconds per job (CPU seconds vary less than wall time on a shared machine).

    python benchmarks/suite_stage.py <compare dir> gpt out/ [supersense pairs domain] [--set key=value]...

Writes ``out/timings.json``: task -> {probe, finetune, scratch, total} (wall s), ``*_cpu`` (CPU s), sizes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from famlab.datamodules.suite import BUNDLED_SUITE  # noqa: E402
from famlab.experiments.configuration.config import Config, with_values  # noqa: E402
from famlab.experiments.configuration.task import task_data  # noqa: E402
from famlab.experiments.plumbing.data_cache import with_vocab  # noqa: E402
from famlab.experiments.steps.compare_jobs import _finetune, _probe  # noqa: E402
from famlab.experiments.steps.compare_suite import SuiteTask, task_config  # noqa: E402
from famlab.experiments.steps.comparison import _subsampler, compose_all  # noqa: E402


def copy_pretrained(src: Path, name: str, out: Path) -> Path:
    """Copy the pretraining run ``src/name`` (config, results, last checkpoint) and the shared tokenizer."""
    pre = out / name
    (pre / "checkpoints").mkdir(parents=True, exist_ok=True)
    for f in ("config.yaml", "results.json", "tokenizer.json"):
        if (src / name / f).is_file():
            shutil.copy(src / name / f, pre / f)
    shutil.copy(src / name / "checkpoints" / "last.ckpt", pre / "checkpoints" / "last.ckpt")
    shutil.copy(src / "tokenizer.json", out / "tokenizer.json")
    return pre.resolve()


def arm_config(src: Path, family: str, out: Path, overrides: list[str]) -> Config:
    """The arm's config as ``famlab compare <overrides>`` builds it, with the comparison's steps and tokenizer."""
    from tokenizers import Tokenizer

    _, cfgs = compose_all([], [f"compare.families=[{family}]", "wandb.mode=disabled", *overrides])
    tokenizer = (out / "tokenizer.json").resolve()
    cfg = with_values(cfgs[family], {
        "trainer.max_steps": json.loads((src / "plan.json").read_text())["families"][family]["steps"],
        "data.tokenizer.path": str(tokenizer)})
    return with_vocab(cfg, Tokenizer.from_file(str(tokenizer)).get_vocab_size())


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall s, process CPU s) of ``fn()``."""
    wall, cpu = time.time(), time.process_time()
    fn()
    return round(time.time() - wall, 1), round(time.process_time() - cpu, 1)


def main(argv: list[str] | None = None) -> int:
    """Measure each named bundled task; prints one line per task and writes ``timings.json``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compare_dir", type=Path)
    ap.add_argument("family", choices=["bert", "gpt", "t5"])
    ap.add_argument("out", type=Path)
    ap.add_argument("tasks", nargs="*", default=[s.name for s in BUNDLED_SUITE])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a compare override the comparison was run with (e.g. model.dim=32), repeatable")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    pre = copy_pretrained(args.compare_dir, f"{args.family}-pretrain-s0", args.out)
    cfg = arm_config(args.compare_dir, args.family, args.out, args.set)
    seeds, subsample = list(cfg.compare.seeds), _subsampler(cfg.compare)
    path = args.out / "timings.json"
    timings = json.loads(path.read_text()) if path.is_file() else {}
    for name in args.tasks:
        spec = next(s for s in BUNDLED_SUITE if s.name == name)
        folder = args.out / name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        task = SuiteTask(spec, folder, subsample(task_data(cfg.data, spec), folder / "task.csv"))
        tcfg = task_config(cfg, task)
        jobs = {"probe": partial(_probe, tcfg, str(pre), folder / "probe", "suite-stage", []),
                "finetune": partial(_finetune, tcfg, str(pre), folder / "ft", seeds, "suite-stage", []),
                "scratch": partial(_finetune, tcfg, "scratch", folder / "scratch", seeds, "suite-stage", [])}
        row: dict[str, object] = {}
        for job, fn in jobs.items():
            row[job], row[f"{job}_cpu"] = timed(fn)
        row["total"] = round(sum(row[j] for j in jobs), 1)  # type: ignore[misc]
        row["total_cpu"] = round(sum(row[f"{j}_cpu"] for j in jobs), 1)  # type: ignore[misc]
        row["sizes"] = json.loads((folder / "ft" / "results.json").read_text())["sizes"]
        timings[name] = row
        print(name, row, flush=True)
        path.write_text(json.dumps(timings, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
