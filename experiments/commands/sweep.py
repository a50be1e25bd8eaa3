"""``famlab sweep <file.yaml>``: run a W&B sweep file locally, or register it with a W&B server (``--wandb``).

The file is W&B's own format: ``method`` (grid | random | bayes), ``parameters`` (``values`` / ``value`` /
``min`` + ``max`` / any ``distribution`` W&B accepts, :mod:`famlab.experiments.configuration.sweep_params`), ``metric``,
``command`` with ``${args_no_hyphens}``. The grid is expanded as W&B's sweep engine does it
(``itertools.product`` over the parameters **sorted by name**, the last name varying fastest); random search
draws ``sweep.count`` trials as W&B's engine does, seeded with ``sweep.seed`` (both checked against the
``sweeps`` package in the tests). ``bayes`` needs W&B's server: ``--wandb`` registers the file there.
Every trial is a subprocess running the file's command with its ``key=value`` tokens plus
``run_dir=<sweep dir>/trial-NNN``, ``wandb.group=<sweep dir name>`` (one group per invocation) and
``wandb.dir=<sweep dir>`` (one W&B directory per sweep), and the ``wandb.*`` settings given to the sweep. With
``sweep.parallel=N`` on a GPU machine, the trials running at one time get disjoint ``CUDA_VISIBLE_DEVICES``.
A file whose command runs a famlab command may only set keys that command reads
(:mod:`famlab.experiments.configuration.reads`): W&B's agent passes every parameter to it.

``famlab sweep <name | file.yaml> [--dry-run] [--wandb] [sweep.parallel=N] [sweep.count=N] [sweep.seed=N]
[sweep.seeds=[0,1]] [wandb.*=...] [run_dir=<dir> [resume=auto]]``

Resuming: the sweep's directory is ``runs/sweep-<name>-<time>``, or ``run_dir=<dir>``. ``run_dir=<that dir>
resume=auto`` with the same sweep file and settings skips the trials that finished (their run directory holds
``results.json``, the last file a famlab run writes), reruns the others with ``resume=auto`` (an interrupted trial
continues from its own ``checkpoints/last.ckpt``; one that never started starts afresh) and writes the summary
over every trial. The sweep file and the settings that choose the trials (``sweep.seeds``; ``sweep.count`` and
``sweep.seed`` for random search) are stored in the directory (``sweep.yaml``, ``sweep_config.yaml``); a resume
under others is refused naming the keys. ``sweep.parallel`` and ``wandb.*`` may change.

The summary (report.md, results.json, one plot per swept parameter) is :mod:`famlab.experiments.analysis.sweep_report`.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import random
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import Enum
from pathlib import Path
from typing import cast
from urllib.parse import urlparse

import yaml
from famlab.experiments.analysis.results import JsonDict
from famlab.experiments.analysis.sweep_report import SWEEP_FILE, SweepRecord, SweepSpec, metric_warning, write_report
from famlab.experiments.configuration.compare_defaults import visible_gpus
from famlab.experiments.configuration.compose import (
    compose,
    flatten,
    load_yaml,
    schema,
    split_args,
    sweep_path,
    to_plain,
)
from famlab.experiments.configuration.config import ConfigInputError, SweepConfig, WandbConfig
from famlab.experiments.configuration.plans import SweepPlan
from famlab.experiments.configuration.reads import READS, check_overrides
from famlab.experiments.configuration.run_files import LAST_CKPT, RESULTS
from famlab.experiments.configuration.sweep_params import distribution, grid_values, sample
from famlab.experiments.plumbing import live, plugins
from famlab.experiments.plumbing.console import heartbeat_seconds
from famlab.experiments.plumbing.resume import check_directory_resume
from famlab.experiments.tracking.wandb_dashboard import sweep_dashboard_step
from famlab.experiments.tracking.wandb_report import log_report_run, pretraining_dirs, print_wandb_commands
from famlab.objectives.registry import own_setting_names
from omegaconf import OmegaConf

METHODS = ("grid", "random", "bayes")
SETTINGS_FILE = "sweep_config.yaml"  # the sweep's own settings, beside sweep.yaml: what a resume is checked against
DONE_FILE = RESULTS  # the last file a famlab run writes: a trial whose run directory holds it is finished
# the trials' wandb.* settings: the sweep's own group and directory, and the settings given to the sweep
FORWARDED = ("wandb.project", "wandb.entity", "wandb.mode", "wandb.tags", "wandb.log_model")


class SweepError(ConfigInputError):
    """A bad sweep file (unknown method, parameter, distribution)."""


def load_sweep(path: Path, *, remote: bool = False) -> SweepSpec:
    """Read and check a sweep file; every parameter must be a famlab config key.

    ``remote`` (``--wandb``): the file goes to W&B's server, which also runs ``method: bayes``.
    """
    if not path.is_file():
        raise SweepError(f"sweep file {path} does not exist")
    data = OmegaConf.to_container(load_yaml(path))
    assert isinstance(data, dict)
    method = data.get("method")
    if method not in METHODS:
        raise SweepError(f"{path}: method={method!r} is not one of: {', '.join(METHODS)}")
    if method == "bayes" and not remote:
        raise SweepError(f"{path}: method=bayes needs W&B's server to choose trials; register it with "
                         f"`famlab sweep {path} --wandb` and run the `wandb agent` command it prints")
    params = data.get("parameters")
    if not isinstance(params, dict) or not params:
        raise SweepError(f"{path}: parameters must be a non-empty mapping of config keys")
    keys = schema()
    own = {f"objective.{name}" for name in own_setting_names()}  # a registered objective's own settings (plugins)
    for key, p in params.items():
        if key not in own and OmegaConf.select(keys, key, default="__missing__") == "__missing__":
            raise SweepError(f"{path}: parameter {key!r} is not a famlab config key (see `famlab config`)")
        try:
            distribution(key, p)
            if method == "grid":
                grid_values(key, p)
        except ConfigInputError as e:
            raise SweepError(f"{path}: {e}") from None
    if "command" not in data and "program" not in data:
        raise SweepError(f"{path}: no command; add e.g. `command: [famlab, pretrain, ${{args_no_hyphens}}]` "
                         "(block list form, one token per line)")
    if not isinstance(data.get("command", []), list):
        raise SweepError(f"{path}: command must be a list of tokens")
    spec = cast(SweepSpec, data)  # a W&B sweep file: its method, parameters and command are checked above
    target = famlab_command(spec)
    if target in READS:  # W&B's agent passes every parameter to the command: each must be a key it reads
        try:
            check_overrides(target, [f"{key}=" for key in params])
        except ConfigInputError as e:
            raise SweepError(f"{path}: {e} (W&B's agent passes every parameter to the command)") from None
    return spec


def famlab_command(spec: SweepSpec) -> str | None:
    """The famlab command a sweep file's trials run (``pretrain`` in ``[famlab, pretrain, tiny, ...]``), or None
    for another program."""
    tokens = [str(t) for t in spec.get("command") or ["${program}", "${args_no_hyphens}"]]
    tokens = [str(spec.get("program", "")) if t == "${program}" else t for t in tokens if t != "${env}"]
    for i, tok in enumerate(tokens[:-1]):
        if Path(tok).name == "famlab" or (tok == "-m" and i > 0 and tokens[i + 1] == "famlab"):
            rest = tokens[i + 1:] if tok != "-m" else tokens[i + 2:]
            return rest[0] if rest and not rest[0].startswith("$") else None
    return None


def _keep_ints(trial: Mapping[str, object]) -> dict[str, object]:
    """An integral float for an integer config key becomes an int (``q_uniform`` with the default ``q: 1.0``
    draws 64.0, which ``model.dim`` would refuse)."""
    keys = schema()
    out: dict[str, object] = {}
    for key, value in trial.items():
        default = OmegaConf.select(keys, key, default=None)
        is_int_key = isinstance(default, int) and not isinstance(default, bool)
        out[key] = int(value) if is_int_key and isinstance(value, float) and value.is_integer() else value
    return out


def expand_grid(params: dict[str, JsonDict]) -> list[dict[str, object]]:
    """W&B's grid order: product over parameters sorted by name (the last name varies fastest)."""
    names = sorted(params)
    grids = [grid_values(n, params[n]) for n in names]
    return [_keep_ints(dict(zip(names, combo, strict=True))) for combo in itertools.product(*grids)]


def expand_random(params: dict[str, JsonDict], count: int, seed: int) -> list[dict[str, object]]:
    """``count`` trials as W&B's engine draws them after ``random.seed(seed)`` (parameters in sorted order)."""
    rng = random.Random(seed)
    return [_keep_ints({n: sample(n, params[n], rng) for n in sorted(params)}) for _ in range(count)]


def device_slots(parallel: int, gpus: list[str]) -> list[str | None]:
    """``CUDA_VISIBLE_DEVICES`` per worker slot: disjoint GPU sets when there are enough, else one GPU each
    shared round-robin; ``None`` (leave the environment alone) without GPUs."""
    if not gpus:
        return [None] * parallel
    if parallel > len(gpus):
        return [gpus[k % len(gpus)] for k in range(parallel)]
    per = len(gpus) // parallel
    return [",".join(gpus[k * per:(k + 1) * per]) for k in range(parallel)]


def _token(key: str, value: object) -> str:
    if isinstance(value, Enum):  # a config value (wandb.mode=disabled), passed on as the value it was given as
        value = value.value
    if isinstance(value, (list, dict)):
        value = json.dumps(value).replace(" ", "")
    elif value is None:
        value = "None"
    elif isinstance(value, bool):
        value = str(value).lower()
    return f"{key}={value}"


def trial_command(spec: SweepSpec, trial: Mapping[str, object], extra: list[str]) -> list[str]:
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
    rest = cmd[3:] if cmd[1:3] == ["-m", "famlab"] else cmd[1:]
    names, rest = plugins.take(rest)  # the trial's own command imports them first; so does its check here
    plugins.load(names)
    presets, overrides, _ = split_args(rest[1:])
    return presets, overrides


def run_trial(cmd: list[str], log_path: Path, devices: str | None = None, append: bool = False,
              status: Path | None = None) -> int:
    """Run one trial's command with its output in ``log_path`` (appended to when ``append``: a resumed trial
    keeps the log of its interrupted part); returns its exit status. ``status``: the trial's file on the sweep's
    board (:mod:`famlab.experiments.plumbing.live`), which its fits report their progress into."""
    with log_path.open("a" if append else "w", encoding="utf-8") as f:
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
        if devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = devices
        if status is not None:
            env[live.PROGRESS_ENV] = str(status)
        return subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=False).returncode


def register_wandb(spec: SweepSpec, project: str, entity: str | None) -> str:
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
        sweep_id = wandb.sweep(dict(spec), project=project, entity=entity)
    except Exception as e:  # noqa: BLE001 - auth / server errors become one line
        raise SweepError(f"--wandb: registering the sweep failed: {str(e).splitlines()[0] if str(e) else e}") from None
    where = f"{entity}/{project}" if entity else project
    return f"wandb agent {where}/{sweep_id}"


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab sweep <file.yaml> [--dry-run] [--wandb] [sweep.*=...] [wandb.*=...] [run_dir= resume=]``."""
    check_arguments(presets, overrides, flags)
    path = sweep_path(presets[0])
    spec = load_sweep(path, remote="--wandb" in flags)
    cfg: SweepPlan = compose([], overrides).cfg
    if "--wandb" in flags:
        if cfg.run_dir or cfg.resume != "never":
            raise SweepError("famlab sweep --wandb: W&B's server runs the trials, so run_dir= and resume= (the local "
                             "sweep's directory) do not apply; drop them or drop --wandb")
        print(register_wandb(spec, cfg.wandb.project, cfg.wandb.entity))
        return 0
    trials = expand_trials(spec, cfg.sweep, path)
    sweep_dir, resuming = sweep_directory(cfg.run_dir, cfg.resume, path)
    if resuming:
        check_resumed_sweep(sweep_dir, spec, cfg.sweep)
    fixed = spec["parameters"].get("wandb.group", {}).get("value")  # a file that names its group keeps it
    # default: one group per sweep directory (name + timestamp)
    group = cfg.wandb.group or (str(fixed) if fixed else sweep_dir.name)
    extra = forwarded_settings(cfg.wandb, cfg.plugins, overrides) + (["resume=auto"] if resuming else [])
    records, commands = trial_commands(spec, trials, sweep_dir, group, cfg.wandb.dir, extra)
    done = {r["name"] for r in records if resuming and (Path(r["run_dir"]) / DONE_FILE).is_file()}
    if warning := metric_warning(spec, commands):
        print(warning, flush=True)
    if "--dry-run" in flags:
        for r, cmd in zip(records, commands, strict=True):
            print(f"{r['name']}: " + " ".join(_token(k, v) for k, v in r["params"].items())
                  + (f"  (done: {DONE_FILE}; skipped)" if r["name"] in done else ""))
            print("    " + shlex.join(["famlab", *cmd[3:]] if cmd[1:3] == ["-m", "famlab"] else cmd))
        left = f", {len(records) - len(done)} left to run in {sweep_dir}" if resuming else ""
        print(f"{len(records)} trials ({spec['method']}), group {group}{left}")
        return 0
    if not resuming:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / SWEEP_FILE).write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
        write_settings(sweep_dir, cfg.sweep, cfg.wandb, cfg.plugins)
    statuses = run_trials(records, commands, trials, sweep_dir, max(1, cfg.sweep.parallel), done=done,
                          resumed=resuming)
    for r, rc in zip(records, statuses, strict=True):
        r["status"] = "ok" if rc == 0 else f"failed ({rc})"
    print(write_report(sweep_dir, spec, records, name=path.stem, group=group), end="")
    log_report_run(cfg.wandb, sweep_dir, group=group, name=f"{sweep_dir.name}-report",
                   sources=pretraining_dirs(sweep_dir))
    sweep_dashboard_step(cfg.wandb, sweep_dir)
    print_wandb_commands(sweep_dir)
    failed = sum(rc != 0 for rc in statuses)
    if failed:
        kept = [o for o in overrides if o.removeprefix("--").split("=", 1)[0] not in ("run_dir", "resume")]
        again = shlex.join(["famlab", "sweep", presets[0], *kept, f"run_dir={sweep_dir}", "resume=auto"])
        print(f"[famlab sweep] {failed} of {len(statuses)} trials did not finish; to resume them: {again}")
    return 0 if not failed else 1


def check_arguments(presets: list[str], overrides: list[str], flags: list[str]) -> None:
    """One sweep name or file, the two known flags, and only the keys the sweep reads (``sweep.*``, ``wandb.*``,
    ``run_dir``, ``resume``)."""
    if len(presets) != 1:
        got = f"got {presets[1]!r} after {presets[0]!r}" if presets else "got none"
        raise SweepError(f"famlab sweep takes one sweep name or file.yaml ({got}); see famlab sweep --help")
    bad = [f for f in flags if f not in ("--dry-run", "--wandb")]
    if bad:
        raise SweepError(f"famlab sweep: unknown flag {bad[0]} (valid: --dry-run, --wandb)")
    check_overrides("sweep", overrides)  # a trial's settings belong in the sweep file, as W&B's agent reads them


def sweep_directory(run_dir: str | None, resume: str, path: Path) -> tuple[Path, bool]:
    """The sweep's directory (``run_dir``) and whether this invocation resumes it (``resume``).

    ``run_dir`` names it (else ``runs/sweep-<name>-<time>``); ``resume=auto`` resumes the sweep stored there, or
    starts one there when the directory is empty or missing. Nothing is created here (a dry run writes nothing).

    Raises:
        SweepError: ``resume=auto`` without ``run_dir``, a checkpoint path as ``resume``, a non-empty ``run_dir``
            without ``resume=auto``, or one that holds something other than a sweep.
    """
    check_directory_resume(resume, run_dir, f"a sweep resumes each trial from the trial's own {LAST_CKPT}",
                           "the sweep's directory", "runs/sweep-<name>-<time>", SweepError)
    if not run_dir:
        sweep_dir = Path("runs") / f"sweep-{path.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        while sweep_dir.exists():  # two sweeps started in the same second
            sweep_dir = sweep_dir.with_name(sweep_dir.name + "x")
        return sweep_dir, False
    sweep_dir = Path(run_dir).expanduser()
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise SweepError(f"run_dir={run_dir} is a file, not a sweep directory")
    started = sweep_dir.is_dir() and any(sweep_dir.iterdir())
    if started and resume == "never":
        raise SweepError(f"run_dir={run_dir} exists and is not empty; pass resume=auto to resume the sweep "
                         "there, or a new run_dir")
    if started and not (sweep_dir / SWEEP_FILE).is_file():
        raise SweepError(f"resume=auto: run_dir={run_dir} holds no {SWEEP_FILE}; it is not a sweep directory")
    return sweep_dir, started


def write_settings(sweep_dir: Path, sweep: SweepConfig, w: WandbConfig, plugin_modules: list[str]) -> None:
    """Store the sweep's own settings (``sweep.*``, ``wandb.*`` and ``plugins``) beside ``sweep.yaml``, for resuming."""
    settings = {"sweep": to_plain(sweep), "wandb": to_plain(w), "plugins": list(plugin_modules)}
    (sweep_dir / SETTINGS_FILE).write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")


def check_resumed_sweep(sweep_dir: Path, spec: SweepSpec, sweep: SweepConfig) -> None:
    """Refuse to resume ``sweep_dir`` with a sweep file or trial-choosing settings other than the stored ones.

    A resumed sweep skips the trials its directory says are finished: under another file, another grid or other
    random draws, ``trial-003`` would name another trial and the summary would mix two sweeps. ``sweep.parallel``
    and ``wandb.*`` change how the trials run and report, not what they compute, and may differ.
    """
    stored_spec = yaml.safe_load((sweep_dir / SWEEP_FILE).read_text(encoding="utf-8")) or {}
    old, new = flatten(stored_spec), flatten(spec)
    changed = [(f"sweep file {k}", new.get(k, "<unset>"), old.get(k, "<unset>"))
               for k in sorted(set(old) | set(new)) if old.get(k, "<unset>") != new.get(k, "<unset>")]
    settings_path = sweep_dir / SETTINGS_FILE
    if settings_path.is_file():
        stored = (yaml.safe_load(settings_path.read_text(encoding="utf-8")) or {}).get("sweep") or {}
        keys = ["seeds"] + (["count", "seed"] if spec.get("method") == "random" else [])
        now = to_plain(sweep)
        changed += [(f"sweep.{k}", now.get(k), stored.get(k, "<unset>")) for k in keys if now.get(k) != stored.get(k)]
    else:  # a sweep directory from before the settings were stored: the file is all there is to compare
        print(f"famlab: WARNING {settings_path} is missing; only the sweep file is checked against {SWEEP_FILE}",
              file=sys.stderr)
    if changed:
        shown = ", ".join(f"{k}={v} (stored {o})" for k, v, o in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise SweepError(f"resume=auto: {sweep_dir} holds a sweep with other settings: {shown}{more}; resume with "
                         "the original sweep file and settings, or start a new run_dir")


def forwarded_settings(w: WandbConfig, plugin_modules: list[str], overrides: list[str]) -> list[str]:
    """The ``wandb.*`` settings given to the sweep, as ``key=value`` tokens for every trial (the sweep's report
    run uses them too), and the ``plugins``. The group and the W&B directory are set per sweep by
    :func:`trial_commands`."""
    given = {token.removeprefix("--").split("=", 1)[0] for token in overrides}
    forwarded = [_token(key, getattr(w, key.split(".", 1)[1])) for key in FORWARDED if key in given]
    return forwarded + ([plugins.override(plugin_modules)] if plugin_modules else [])  # every trial imports them too


def expand_trials(spec: SweepSpec, sweep: SweepConfig, path: Path) -> list[dict[str, object]]:
    """The file's trials (grid, or ``sweep.count`` random draws), each once per ``sweep.seeds`` entry."""
    params = spec["parameters"]
    if spec["method"] == "grid":
        trials = expand_grid(params)
    else:
        trials = expand_random(params, sweep.count or int(spec.get("run_cap", 10)), sweep.seed)
    if sweep.seeds:  # every trial once per seed, seeds varying fastest; the summary averages over them
        if "seed" in params:
            raise SweepError(f"{path}: sweep.seeds and a `seed` parameter both replicate trials; use one of them")
        trials = [{**t, "seed": s} for t in trials for s in sweep.seeds]
    return trials


def trial_commands(
    spec: SweepSpec, trials: list[dict[str, object]], sweep_dir: Path, group: str, wandb_dir: str | None,
    settings: Sequence[str] = (),
) -> tuple[list[SweepRecord], list[list[str]]]:
    """Each trial's record (name, params, run_dir) and command line, every command composed first so a bad
    trial fails before anything runs.

    ``settings`` (``key=value`` tokens: the sweep's ``wandb.*`` settings, ``resume=auto``) go to every trial after
    its own run directory, group and W&B directory, except where the trial sets the key itself.
    """
    records: list[SweepRecord] = []
    commands: list[list[str]] = []
    target = famlab_command(spec)
    for i, trial in enumerate(trials):
        trial_name = f"trial-{i:03d}"
        extra = [f"run_dir={sweep_dir / trial_name}", f"wandb.group={group}",
                 f"wandb.dir={wandb_dir or sweep_dir.resolve()}", *settings]
        extra = [e for e in extra if e.split("=", 1)[0] not in trial]
        cmd = trial_command(spec, trial, extra)
        t_presets, t_over = _command_overrides(cmd)
        if target is not None:
            check_overrides(target, t_over)  # the trial's own famlab command would refuse it
        compose(t_presets, [o for o in t_over if not o.startswith("run_dir=")])  # fail before running anything
        commands.append(cmd)
        records.append({"name": trial_name, "params": trial, "run_dir": str(sweep_dir / trial_name)})
    return records, commands


def run_trials(
    records: list[SweepRecord], commands: list[list[str]], trials: list[dict[str, object]], sweep_dir: Path,
    parallel: int, done: Collection[str] = (), resumed: bool = False,
) -> list[int]:
    """Run the trials, ``parallel`` at a time on disjoint device slots; returns their exit statuses.

    ``resumed``: this invocation resumes the sweep. The trials named in ``done`` finished in an earlier invocation:
    they are not run again, their run directories and logs are left as they are, and they count as exit status 0;
    the others append to their logs.
    """
    slots: queue.Queue[str | None] = queue.Queue()
    for devices in device_slots(parallel, visible_gpus("auto")):  # each trial picks its own accelerator
        slots.put(devices)

    def go(i: int) -> int:
        if records[i]["name"] in done:
            print(f"[famlab sweep] {records[i]['name']} is done ({Path(records[i]['run_dir']) / DONE_FILE}); skipped",
                  flush=True)
            return 0
        devices = slots.get()  # the trials running at one time hold distinct slots
        gpu = "" if devices is None else f" (CUDA_VISIBLE_DEVICES={devices})"
        print(f"[famlab sweep] {records[i]['name']} started{gpu}: "
              f"{' '.join(_token(k, v) for k, v in trials[i].items())}", flush=True)
        status, started = board.folder / f"{records[i]['name']}.json", time.time()
        live.write_status(status, state="running", started=started)
        rc = -1
        try:
            rc = run_trial(commands[i], sweep_dir / f"{records[i]['name']}.log", devices, append=resumed, status=status)
        finally:
            slots.put(devices)
            live.write_status(status, state="done" if rc == 0 else "failed", started=started, ended=time.time(),
                              result=f"exit status {rc}")
        print(f"[famlab sweep] {records[i]['name']} finished with exit status {rc}", flush=True)
        return rc

    board = live.Board(sweep_dir / "jobs", [live.Entry(r["name"], "trial") for r in records if r["name"] not in done])
    live.clear_unfinished(board.folder)
    board.folder.mkdir(parents=True, exist_ok=True)
    with live.live_view(board, live=live.live_wanted(), every_s=heartbeat_seconds()), \
            ThreadPoolExecutor(max_workers=parallel) as pool:
        return list(pool.map(go, range(len(records))))
