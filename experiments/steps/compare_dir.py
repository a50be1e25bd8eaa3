"""A comparison's directory: created, or reopened to resume, with the settings it was started with.

A comparison is a directory of jobs. ``comparison.yaml`` (every arm's composed config) is written before any job
runs; each job's completion is its own marker, written last and whole: a pretraining run's ``results.json`` (then
its ``eval.json``), a probe's ``results.json``, a fine-tune's ``results.json`` (and, inside it, one ``job.json`` per
grid point and seed). ``famlab compare <same args> run_dir=<comparison dir> resume=auto`` recomposes the
comparison, refuses settings that differ from ``comparison.yaml`` (naming the keys), skips the finished jobs,
continues interrupted runs from their own ``last.ckpt`` and rebuilds the report from the directories, as
``famlab report`` does, so a resumed comparison's report equals an uninterrupted one's.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import yaml
from famlab.experiments.configuration.compose import flatten, to_plain
from famlab.experiments.configuration.config import CompareConfig, Config, ConfigInputError
from famlab.experiments.configuration.plans import ComparePlan
from famlab.experiments.configuration.run_files import LAST_CKPT
from famlab.experiments.plumbing.resume import RESUME_FREE_KEYS, check_directory_resume

SETTINGS_FILE = "comparison.yaml"
# what a resumed comparison may change besides where it runs and how it reports: the tokenizer path is set by the
# comparison itself (its own tokenizer.json); the worker count follows the machine (one per GPU) and does not change
# results (the same jobs, configs and seeds in any number of workers)
FREE_KEYS = (*RESUME_FREE_KEYS, "data.tokenizer.path", "compare.workers")


def log(message: str) -> None:
    print(f"[famlab compare {time.strftime('%H:%M:%S')}] {message}", flush=True)


def open_dir(cmp: CompareConfig, cfgs: dict[str, ComparePlan], *, run_dir: str | None, resume: str, name: str | None,
             size: str | None) -> tuple[Path, bool]:
    """The comparison directory, absolute, and whether it resumes one: ``run_dir`` (or a new ``runs/compare-...``,
    named by ``name`` or the families and the ``size`` preset).

    Absolute, so every path its jobs record (``run_dir``, a fine-tune's ``init``) is the same when the comparison is
    resumed from another working directory.

    Raises:
        ConfigInputError: ``resume`` other than never / auto; ``resume=auto`` without ``run_dir``; a non-empty
            ``run_dir`` without ``resume=auto`` or that holds no comparison; settings that differ from it.
    """
    check_directory_resume(resume, run_dir, "a comparison resumes as a whole", "the comparison directory",
                           "runs/compare-...")
    if not run_dir:
        return make_compare_dir(cmp, cfgs, name=name, size=size or "custom"), False
    path = Path(run_dir).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigInputError(f"run_dir={run_dir} is a file, not a directory")
    if path.is_dir() and any(path.iterdir()):
        if resume != "auto":
            raise ConfigInputError(f"run_dir={run_dir} exists and is not empty; pass resume=auto to resume the "
                                   "comparison in it, or a new run_dir")
        if not (path / SETTINGS_FILE).is_file():
            raise ConfigInputError(f"run_dir={run_dir} holds no famlab comparison (no {SETTINGS_FILE}); "
                                   "resume=auto resumes a directory that famlab compare made")
        check_settings(path / SETTINGS_FILE, cfgs)
        log(f"{path}: resuming (finished jobs are read back, interrupted runs continue from their {LAST_CKPT})")
        return path.absolute(), True
    path.mkdir(parents=True, exist_ok=True)
    log(f"{path}: arms {', '.join(cfgs)}, budget matched on {cmp.match.value}, scale {size or 'custom'}")
    return path.absolute(), False


def make_compare_dir(cmp: CompareConfig, cfgs: dict[str, ComparePlan], *, name: str | None, size: str) -> Path:
    """Absolute ``runs/compare-<name>-<timestamp>/``, created (a second comparison in the same second gets an ``x``);
    ``name`` unset: the families (and ``-objectives`` for arms of objectives) and the ``size`` preset."""
    families = list(dict.fromkeys(c.model.family.value for c in cfgs.values()))
    name = name or f"{'-'.join(families)}{'-objectives' if cmp.objectives else ''}-{size}"
    comp_dir = Path("runs") / f"compare-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    while comp_dir.exists():
        comp_dir = comp_dir.with_name(comp_dir.name + "x")
    comp_dir.mkdir(parents=True)
    what = "arms" if cmp.objectives else "families"
    log(f"{comp_dir}: {what} {', '.join(cfgs)}, budget matched on {cmp.match.value}, scale {size}")
    return comp_dir.absolute()


def settings(cfgs: dict[str, ComparePlan]) -> dict[str, dict[str, object]]:
    """Every arm's composed config, flat (``model.dim``), as ``comparison.yaml`` stores it."""
    return {arm: flatten(to_plain(cfg)) for arm, cfg in cfgs.items()}


def write_settings(comp_dir: Path, cfgs: dict[str, ComparePlan], presets: list[str], overrides: list[str]) -> None:
    """``comparison.yaml``: the command's presets and overrides, and each arm's composed config."""
    data = {"presets": list(presets), "overrides": list(overrides), "arms": settings(cfgs)}
    tmp = comp_dir / (SETTINGS_FILE + ".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    tmp.replace(comp_dir / SETTINGS_FILE)


def check_settings(path: Path, cfgs: dict[str, ComparePlan]) -> None:
    """Refuse to resume under settings other than ``comparison.yaml``'s, naming the keys (and the arms)."""
    try:
        stored = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("arms")
    except (yaml.YAMLError, AttributeError):
        stored = None
    if not isinstance(stored, dict):
        raise ConfigInputError(f"resume=auto: {path} is not a famlab comparison's settings file")
    now = settings(cfgs)
    if set(stored) != set(now):
        raise ConfigInputError(f"resume=auto: {path} has arms {sorted(stored)}, these settings give {sorted(now)} "
                               "(compare.families / compare.objectives differ); resume with the original settings")

    def free(key: str) -> bool:
        return any(key == k or key.startswith(k + ".") for k in FREE_KEYS)

    # a key added to famlab after the comparison started reads as its default (what the stored runs used)
    defaults = flatten(to_plain(Config()))
    changed: dict[str, tuple[object, object]] = {}
    for arm, new in now.items():
        old = {**{k: v for k, v in defaults.items() if k not in stored[arm]}, **stored[arm]}
        for key in sorted(set(old) | set(new)):
            if not free(key) and old.get(key, "<unset>") != new.get(key, "<unset>"):
                changed.setdefault(key, (new.get(key, "<unset>"), old.get(key, "<unset>")))
    if changed:
        shown = ", ".join(f"{k}={v} (stored {o})" for k, (v, o) in list(changed.items())[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise ConfigInputError(f"resume=auto: {path} was written with other settings: {shown}{more}; resume with "
                               "the original settings, or start a new comparison")


def resume_command(comp_dir: Path, presets: list[str], overrides: list[str]) -> str:
    """The command line that resumes the comparison in ``comp_dir``: the same presets and overrides."""
    kept = [o for o in overrides if not o.lstrip("-").startswith(("run_dir=", "resume="))]
    args = [*presets, *kept, f"run_dir={comp_dir}", "resume=auto"]
    return " ".join(["famlab", "compare", *(shlex.quote(a) for a in args)])
