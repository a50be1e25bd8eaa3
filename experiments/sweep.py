"""``famlab sweep <file.yaml>``: run a W&B sweep file locally, or register it with a W&B server (``--wandb``).

The file is W&B's own format: ``method`` (grid | random), ``parameters`` (``values`` / ``value`` /
``min`` + ``max`` / ``distribution``), ``metric``, ``command`` with ``${args_no_hyphens}``. The grid is
expanded as W&B's sweep engine does it (``itertools.product`` over the parameters **sorted by name**, the
last name varying fastest; verified against the ``sweeps`` package in the tests); random search draws
``sweep.count`` trials from a generator seeded with ``sweep.seed``. Every trial is a subprocess running the
file's command with its ``key=value`` tokens plus ``run_dir=<sweep dir>/trial-NNN`` and ``wandb.group``.

``famlab sweep file.yaml [--dry-run] [--wandb] [sweep.parallel=N] [sweep.count=N] [sweep.seed=N] [sweep.seeds=[0,1]]``

The summary (report.md, results.json, one plot per swept parameter) is :mod:`famlab.experiments.sweep_report`.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import random
import shlex
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml
from famlab.experiments.compose import compose, load_yaml, schema
from famlab.experiments.config import ConfigInputError
from famlab.experiments.sweep_report import metric_warning, write_report
from omegaconf import OmegaConf

METHODS = ("grid", "random")
DISTRIBUTIONS = ("constant", "categorical", "uniform", "int_uniform", "log_uniform_values", "q_uniform", "normal")


class SweepError(ConfigInputError):
    """A bad sweep file (unknown method, parameter, distribution)."""


def load_sweep(path: Path) -> dict[str, Any]:
    """Read and check a sweep file; every parameter must be a famlab config key."""
    if not path.is_file():
        raise SweepError(f"sweep file {path} does not exist")
    spec = OmegaConf.to_container(load_yaml(path))
    assert isinstance(spec, dict)
    method = spec.get("method")
    if method not in METHODS:
        raise SweepError(f"{path}: method={method!r} is not one of: {', '.join(METHODS)} (bayes needs a W&B server)")
    params = spec.get("parameters")
    if not isinstance(params, dict) or not params:
        raise SweepError(f"{path}: parameters must be a non-empty mapping of config keys")
    keys = schema()
    for key, p in params.items():
        if OmegaConf.select(keys, key, default="__missing__") == "__missing__":
            raise SweepError(f"{path}: parameter {key!r} is not a famlab config key (see `famlab config`)")
        if not isinstance(p, dict) or not ({"values", "value", "min", "max", "distribution"} & set(p)):
            raise SweepError(f"{path}: parameter {key} needs values, value, or min/max")
        dist = p.get("distribution")
        if dist is not None and dist not in DISTRIBUTIONS:
            valid = ", ".join(DISTRIBUTIONS)
            raise SweepError(f"{path}: parameter {key}: distribution={dist!r} is not one of: {valid}")
        if method == "grid" and "values" not in p and "value" not in p and dist != "int_uniform" and not (
            isinstance(p.get("min"), int) and isinstance(p.get("max"), int)
        ):
            raise SweepError(f"{path}: method=grid needs values / value / integer min+max for parameter {key}")
    if not isinstance(spec.get("command", []), list):
        raise SweepError(f"{path}: command must be a list of tokens")
    return spec


def _grid_values(p: dict[str, Any]) -> list[Any]:
    if "values" in p:
        return list(p["values"])
    if "value" in p:
        return [p["value"]]
    return list(range(int(p["min"]), int(p["max"]) + 1))  # int_uniform on a grid: every integer


def expand_grid(params: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """W&B's grid order: product over parameters sorted by name (the last name varies fastest)."""
    names = sorted(params)
    grids = [_grid_values(params[n]) for n in names]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grids)]


def _sample(p: dict[str, Any], rng: random.Random) -> Any:
    dist = p.get("distribution")
    if "value" in p or dist == "constant":
        return p["value"]
    if "values" in p or dist == "categorical":
        return rng.choice(list(p["values"]))
    lo, hi = p["min"], p["max"]
    if dist == "int_uniform" or (dist is None and isinstance(lo, int) and isinstance(hi, int)):
        return rng.randint(int(lo), int(hi))
    if dist == "log_uniform_values":
        return math.exp(rng.uniform(math.log(lo), math.log(hi)))
    if dist == "q_uniform":
        q = p.get("q", 1.0)
        return round(rng.uniform(lo, hi) / q) * q
    if dist == "normal":
        return rng.gauss(p.get("mu", 0.0), p.get("sigma", 1.0))
    return rng.uniform(float(lo), float(hi))


def expand_random(params: dict[str, dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` trials drawn from a ``random.Random(seed)`` (parameters visited in sorted order)."""
    rng = random.Random(seed)
    return [{n: _sample(params[n], rng) for n in sorted(params)} for _ in range(count)]


def _token(key: str, value: Any) -> str:
    if isinstance(value, (list, dict)):
        value = json.dumps(value).replace(" ", "")
    elif value is None:
        value = "None"
    elif isinstance(value, bool):
        value = str(value).lower()
    return f"{key}={value}"


def trial_command(spec: dict[str, Any], trial: dict[str, Any], extra: list[str]) -> list[str]:
    """The file's command with W&B's macros expanded; ``famlab`` runs as ``python -m famlab``."""
    args = [_token(k, v) for k, v in trial.items()] + extra
    out: list[str] = []
    for tok in spec.get("command") or ["${program}", "${args_no_hyphens}"]:
        if tok == "${args_no_hyphens}":
            out += args
        elif tok == "${args}":
            out += [f"--{a}" for a in args]
        elif tok == "${env}":
            continue
        elif tok in ("${interpreter}", "python"):
            out.append(sys.executable)
        elif tok == "${program}":
            out.append(str(spec.get("program", "famlab")))
        else:
            out.append(str(tok))
    if out and out[0] == "famlab":
        out = [sys.executable, "-m", "famlab", *out[1:]]
    return out


def _command_overrides(cmd: list[str]) -> tuple[list[str], list[str]]:
    """Presets and overrides of a famlab command line (after the subcommand), for validating trials."""
    from famlab.experiments.cli import split_args

    rest = cmd[3:] if cmd[1:3] == ["-m", "famlab"] else cmd[1:]
    presets, overrides, _ = split_args(rest[1:])
    return presets, overrides


def run_trial(cmd: list[str], log_path: Path) -> int:
    with log_path.open("w", encoding="utf-8") as f:
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=False).returncode


def register_wandb(spec: dict[str, Any], project: str, entity: str | None) -> str:
    """Register the sweep with the W&B server; returns the ``wandb agent`` command. Fails clearly offline."""
    base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    url = urlparse(base)
    host, port = url.hostname or "api.wandb.ai", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as e:
        raise SweepError(
            f"--wandb: W&B server {base} is not reachable ({e}); run the sweep locally without --wandb"
        ) from None
    import wandb

    try:
        sweep_id = wandb.sweep(spec, project=project, entity=entity)
    except Exception as e:  # noqa: BLE001 - auth / server errors become one line
        raise SweepError(f"--wandb: registering the sweep failed: {str(e).splitlines()[0] if str(e) else e}") from None
    where = f"{entity}/{project}" if entity else project
    return f"wandb agent {where}/{sweep_id}"


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab sweep <file.yaml> [--dry-run] [--wandb] [sweep.*=...]``."""
    files = [p for p in presets if p.endswith((".yaml", ".yml"))]
    if len(files) != 1 or len(presets) != 1:
        raise SweepError("usage: famlab sweep <file.yaml> [--dry-run] [--wandb] [sweep.parallel=N] [sweep.count=N]")
    bad = [f for f in flags if f not in ("--dry-run", "--wandb")]
    if bad:
        raise SweepError(f"famlab sweep: unknown flag {bad[0]} (valid: --dry-run, --wandb)")
    bad_keys = [o for o in overrides if not o.lstrip("-").startswith(("sweep.", "wandb."))]
    if bad_keys:
        raise SweepError(f"famlab sweep: {bad_keys[0]} - only sweep.* and wandb.* settings apply to the sweep itself")
    path = Path(files[0])
    spec = load_sweep(path)
    cfg = compose([], overrides).cfg
    if "--wandb" in flags:
        print(register_wandb(spec, cfg.wandb.project, cfg.wandb.entity))
        return 0
    params = spec["parameters"]
    if spec["method"] == "grid":
        trials = expand_grid(params)
    else:
        trials = expand_random(params, cfg.sweep.count or int(spec.get("run_cap", 10)), cfg.sweep.seed)
    if cfg.sweep.seeds:  # every trial once per seed, seeds varying fastest; the summary averages over them
        if "seed" in params:
            raise SweepError(f"{path}: sweep.seeds and a `seed` parameter both replicate trials; use one of them")
        trials = [{**t, "seed": s} for t in trials for s in cfg.sweep.seeds]
    name = path.stem
    sweep_dir = Path("runs") / f"sweep-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    fixed = params.get("wandb.group", {}).get("value")  # a file that names its group keeps it
    group = cfg.wandb.group or fixed or f"sweep-{name}"
    records, commands = [], []
    for i, trial in enumerate(trials):
        trial_name = f"trial-{i:03d}"
        extra = [f"run_dir={sweep_dir / trial_name}", f"wandb.group={group}"]
        extra = [e for e in extra if e.split("=", 1)[0] not in trial]
        cmd = trial_command(spec, trial, extra)
        t_presets, t_over = _command_overrides(cmd)
        compose(t_presets, [o for o in t_over if not o.startswith("run_dir=")])  # fail before running anything
        commands.append(cmd)
        records.append({"name": trial_name, "params": trial, "run_dir": str(sweep_dir / trial_name)})
    if warning := metric_warning(spec, commands):
        print(warning, flush=True)
    if "--dry-run" in flags:
        for r, cmd in zip(records, commands, strict=True):
            print(f"{r['name']}: " + " ".join(_token(k, v) for k, v in r["params"].items()))
            print("    " + shlex.join(["famlab", *cmd[3:]] if cmd[1:3] == ["-m", "famlab"] else cmd))
        print(f"{len(records)} trials ({spec['method']}), group {group}")
        return 0
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")

    def go(i: int) -> int:
        print(f"[famlab sweep] {records[i]['name']} started: {' '.join(_token(k, v) for k, v in trials[i].items())}",
              flush=True)
        rc = run_trial(commands[i], sweep_dir / f"{records[i]['name']}.log")
        print(f"[famlab sweep] {records[i]['name']} finished with exit status {rc}", flush=True)
        return rc

    with ThreadPoolExecutor(max_workers=max(1, cfg.sweep.parallel)) as pool:
        statuses = list(pool.map(go, range(len(records))))
    for r, rc in zip(records, statuses, strict=True):
        r["status"] = "ok" if rc == 0 else f"failed ({rc})"
    print(write_report(sweep_dir, spec, records, name=name, group=group), end="")
    return 0 if all(rc == 0 for rc in statuses) else 1
