"""Run directories: a run's name, its directory (made, checked, removed when the run was refused), the files a run
writes there first (its config, JSON results), and :class:`RunDir` / :class:`CompareDir`, which read a run's (or a
comparison's) files back typed. The file names and paths are those of ``experiments/configuration/run_files.py``."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from famlab.experiments.analysis.results import (
    EvalRecord,
    FinetuneResult,
    Plan,
    PretrainResult,
    ProbeResult,
    read_config,
    read_result,
)
from famlab.experiments.analysis.yardsticks import read_metrics
from famlab.experiments.configuration.compose import to_plain, to_yaml
from famlab.experiments.configuration.config import Config, ConfigInputError
from famlab.experiments.configuration.plans import Recorded
from famlab.experiments.configuration.run_files import CONFIG, TOKENIZER, CompareFiles, RunFiles
from famlab.experiments.plumbing.console import LOG_NAME, quiet_libraries
from famlab.experiments.plumbing.launch_env import inherited_run_dir, publish_run_dir
from famlab.experiments.plumbing.prepare_once import env_rank
from famlab.experiments.plumbing.provenance import plugin_provenance


def pretrain_run_name(name: str | None, family: str, objective: str, size: str | None) -> str:
    """Readable pretraining run name: ``name`` when set, else ``<family>-<objective>-<size or custom>``."""
    return name or f"{family}-{objective}-{size or 'custom'}"


def task_run_name(name: str | None, family: str, job: Literal["finetune", "probe"], task: str) -> str:
    """Readable run name of a fine-tune (``<family>-ft-<task>``) or a probe (``<family>-probe-<task>``, never a
    pretraining run's name), ``task`` by its file stem; ``name`` when set."""
    short = Path(task).stem.replace(":", "-").replace("/", "-")
    return name or f"{family}-{'ft' if job == 'finetune' else 'probe'}-{short}"


CREATED_RUN_DIRS: list[Path] = []  # made by this process (with new parents); a run refused on bad input removes them


SETUP_FILES = {CONFIG, TOKENIZER}  # what a run writes before its first step


def remove_empty_run_dirs() -> None:
    """Remove the run directories this process created that hold nothing beyond setup (the run was refused).

    Only directories that did not exist before this process, and only when they hold no more than
    :data:`SETUP_FILES`: a run that trained a step keeps its directory whatever happens after.
    """
    while CREATED_RUN_DIRS:
        path = CREATED_RUN_DIRS.pop()  # innermost first
        if path.is_dir() and {p.name for p in path.iterdir()} <= SETUP_FILES:
            for name in SETUP_FILES:
                (path / name).unlink(missing_ok=True)
            path.rmdir()


def make_run_dir(run_dir: str | None, resume: str, name: str) -> Path:
    """Create the run directory (``run_dir`` or ``runs/<name>-<YYYYmmdd-HHMMSS>``).

    An explicit non-empty ``run_dir`` with ``resume=never`` would be overwritten, so it fails instead.
    """
    if env_rank() != 0:
        # a DDP worker (Lightning relaunches the command per rank; torchrun / SLURM start every rank):
        # rank 0 made and checked the directory and published it (experiments/plumbing/launch_env.py)
        path = Path(inherited_run_dir() or run_dir or "")
        if not str(path) or str(path) == ".":
            raise ConfigInputError("multi-process runs started by torchrun / SLURM need an explicit run_dir=")
        path.mkdir(parents=True, exist_ok=True)
        return path
    if run_dir:
        path = Path(run_dir).expanduser()
        if path.is_dir() and any(path.iterdir()) and resume == "never":
            raise ConfigInputError(f"run_dir={run_dir} exists and is not empty; pass resume=auto or a new run_dir")
    else:
        path = Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
        while path.exists():  # two runs started in the same second
            path = path.with_name(path.name + "x")
    try:
        CREATED_RUN_DIRS.extend(p for p in reversed([path, *path.parents]) if not p.exists())  # outermost first
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigInputError(f"run_dir={path} is not writable ({e.strerror})") from None
    publish_run_dir(path)  # inherited by the DDP ranks Lightning launches
    quiet_libraries(path / LOG_NAME)  # banners, tips and third-party warnings: into the run's log, not the console
    return path


def write_config(run_dir: Path, cfg: Recorded, prov: dict[str, object]) -> dict[str, Any]:
    """Write ``config.yaml`` (the whole resolved config, whatever part of it the step reads, + provenance); return
    the plain dict that was written."""
    cfg = dataclasses.replace(cfg, provenance={**prov, "plugins": plugin_provenance(cfg.plugins)})
    if env_rank() == 0:  # only rank 0 writes files
        RunDir(run_dir).config_file.write_text(to_yaml(cfg), encoding="utf-8")
    return to_plain(cfg)


def write_json(path: Path, data: Mapping[str, object]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n", encoding="utf-8")



@dataclasses.dataclass(frozen=True)
class RunDir(RunFiles):
    """A run directory: the path of each of its files (:class:`RunFiles`) and those files read back typed."""

    def config_data(self) -> dict[str, Any]:
        """``config.yaml`` as written: a plain mapping (what a reader that takes one section needs)."""
        data = yaml.safe_load(self.config_file.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}

    def config(self) -> Config:
        """``config.yaml`` as the typed :class:`Config` (:func:`read_config`: keys added since read as defaults)."""
        return read_config(self.config_data())

    def results_data(self) -> dict[str, Any]:
        """``results.json`` as written."""
        data = json.loads(self.results_file.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}

    def results(self) -> PretrainResult | FinetuneResult | ProbeResult | None:
        """``results.json`` as the record its ``job`` names; None for any other job (e.g. an evaluation)."""
        return read_result(self.results_data())

    def eval(self) -> EvalRecord | None:
        """``eval.json`` (a pretrained run's bits per byte and zero-shot scores); None where none was written."""
        if not self.eval_file.is_file():
            return None
        return EvalRecord.from_json(json.loads(self.eval_file.read_text(encoding="utf-8")))

    def metrics(self) -> list[dict[str, float]]:
        """``metrics.csv`` rows as dicts of floats (empty cells dropped); empty when there is none."""
        return read_metrics(self.metrics_file)


@dataclasses.dataclass(frozen=True)
class CompareDir(CompareFiles):
    """A comparison directory: the path of each of its files (:class:`CompareFiles`) and its plan read back."""

    def plan(self) -> Plan | None:
        """``plan.json``, the comparison's budget plan; None where none was written."""
        if not self.plan_file.is_file():
            return None
        return Plan.from_json(json.loads(self.plan_file.read_text(encoding="utf-8")))

    def is_comparison(self) -> bool:
        """The directory holds a comparison's plan."""
        return self.plan_file.is_file()
