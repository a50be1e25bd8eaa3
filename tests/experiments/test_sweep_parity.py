"""Sweep parity with W&B: every distribution as W&B's engine draws it, bayes, integers, command, GPU slots, groups."""

import copy
import importlib
import importlib.util
import json
import random
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.commands.sweep import device_slots, expand_grid, expand_random

# one parameter per distribution W&B's sweep schema accepts (keys are famlab config keys: sweeps check that)
EVERY_DISTRIBUTION = {
    "data.seed": {"value": 3},
    "model.pos": {"values": ["rope", "alibi", "learned"]},
    "model.norm": {"values": ["rmsnorm", "layernorm"], "probabilities": [0.3, 0.7]},
    "model.num_layers": {"min": 1, "max": 9},
    "objective.mask_rate": {"min": 0.1, "max": 0.3},
    "optim.lr": {"distribution": "log_uniform", "min": -9, "max": -4},
    "optim.eps": {"distribution": "log_uniform_values", "min": 1e-9, "max": 1e-6},
    "optim.weight_decay": {"distribution": "inv_log_uniform", "min": 0, "max": 2},
    "optim.lr_scale": {"distribution": "inv_log_uniform_values", "min": 0.1, "max": 10},
    "model.dim": {"distribution": "q_uniform", "min": 32, "max": 128, "q": 16},
    "model.num_heads": {"distribution": "q_log_uniform", "min": 0, "max": 3, "q": 2},
    "data.batch_size": {"distribution": "q_log_uniform_values", "min": 8, "max": 512, "q": 8},
    "objective.mean_span": {"distribution": "normal", "mu": 3, "sigma": 1},
    "objective.noise_density": {"distribution": "q_normal", "mu": 0.2, "sigma": 0.1, "q": 0.05},
    "optim.min_lr_ratio": {"distribution": "log_normal", "mu": -2, "sigma": 0.5},
    "trainer.max_steps": {"distribution": "q_log_normal", "mu": 3, "sigma": 0.5, "q": 10},
    "objective.span_p": {"distribution": "beta", "a": 2, "b": 5},
    "optim.warmup_steps": {"distribution": "q_beta", "a": 2, "b": 2, "q": 1},
    "data.seq_len": {"distribution": "q_uniform", "min": 16, "max": 96},  # W&B's default q: 1.0 (a float)
}


def engine():
    """W&B's ``sweeps`` package; skip only when it is not installed: an error importing it fails the test."""
    if importlib.util.find_spec("sweeps") is None:
        pytest.skip("the sweeps package is not installed (.ci/run installs it)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module("sweeps")


def write(tmp_path: Path, spec: dict, name: str = "s") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_random_search_draws_every_distribution_as_wandbs_engine():
    """Seeded alike, our draws equal the `sweeps` package's for all 18 distributions (ints stay ints)."""
    engine()
    from sweeps.random_search import random_search_next_runs

    spec = {"method": "random", "parameters": copy.deepcopy(EVERY_DISTRIBUTION)}
    random.seed(11)
    theirs = [{k: v["value"] for k, v in r.config.items()} for r in random_search_next_runs(spec, n=8)]
    ours = expand_random(EVERY_DISTRIBUTION, 8, 11)
    for t, o in zip(theirs, ours, strict=True):
        for key in EVERY_DISTRIBUTION:
            value = t[key].item() if hasattr(t[key], "item") else t[key]
            assert o[key] == value, key  # exactly: the same percentiles through the same scipy functions
    assert all(type(o[k]) is int for o in ours for k in ("model.num_layers", "model.dim", "data.batch_size",
                                                          "trainer.max_steps", "data.seq_len"))


def test_grid_expands_int_and_q_uniform_as_wandbs_engine():
    """int_uniform -> every integer; q_uniform -> arange(min, max, q) with max excluded, as W&B's grid."""
    sweeps = engine()
    params = {"model.num_layers": {"min": 1, "max": 3}, "model.dim": {"distribution": "q_uniform", "min": 32,
                                                                        "max": 96, "q": 32},
              "data.seq_len": {"distribution": "q_uniform", "min": 16, "max": 18}, "model.pos": {"value": "rope"}}
    runs = []
    while (run := sweeps.next_run({"method": "grid", "parameters": copy.deepcopy(params)}, runs)) is not None:
        run.state = sweeps.RunState.finished
        runs.append(run)
    theirs = [{k: v["value"] for k, v in r.config.items()} for r in runs]
    ours = expand_grid(params)
    assert ours == theirs and len(ours) == 3 * 2 * 2
    assert {type(t["data.seq_len"]) for t in ours} == {int}  # 16.0 / 17.0 from W&B's float q become ints


def test_q_uniform_dim_reaches_the_trial_as_an_integer(tmp_path, capsys, monkeypatch):
    """model.dim drawn with W&B's default q=1.0 is written model.dim=64, which the config accepts."""
    monkeypatch.chdir(tmp_path)
    spec = {"method": "grid", "parameters": {"model.dim": {"distribution": "q_uniform", "min": 64, "max": 65}},
            "command": ["famlab", "pretrain", "gpt", "tiny", "${args_no_hyphens}"]}
    assert cli.main(["sweep", str(write(tmp_path, spec)), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "model.dim=64 " in out and "64.0" not in out


def test_bayes_is_refused_locally_and_pointed_to_wandb(tmp_path, capsys, monkeypatch):
    """Locally: exit 2 naming --wandb. With --wandb the file passes validation and goes to the server."""
    spec = {"method": "bayes", "metric": {"name": "val/loss", "goal": "minimize"},
            "parameters": {"optim.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2}},
            "command": ["famlab", "pretrain", "tiny", "${args_no_hyphens}"]}
    path = write(tmp_path, spec)
    assert cli.main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "method=bayes" in err and "--wandb" in err and "\n" not in err
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens: the server step is reached
    assert cli.main(["sweep", str(path), "--wandb"]) == 2
    err = capsys.readouterr().err
    assert "not reachable" in err and "bayes" not in err


def test_a_file_without_command_fails_its_dry_run(tmp_path, capsys):
    spec = {"method": "grid", "parameters": {"model.pos": {"values": ["rope"]}}}
    assert cli.main(["sweep", str(write(tmp_path, spec)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("famlab: error:") and "no command" in err and "\n" not in err


@pytest.mark.parametrize(("param", "message"), [
    ({"distribution": "log_uniformx", "min": 1, "max": 2}, "log_uniformx"),
    ({"distribution": "q_log_uniform_values", "min": 8}, "needs max"),
    ({"min": 3, "max": 1}, "must be below"),
])
def test_bad_parameters_exit_2_naming_the_parameter(tmp_path, capsys, param, message):
    spec = {"method": "random", "parameters": {"model.dim": param}, "command": ["famlab", "${args_no_hyphens}"]}
    assert cli.main(["sweep", str(write(tmp_path, spec)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "model.dim" in err and message in err and "\n" not in err


def test_device_slots_are_disjoint():
    assert device_slots(2, ["0", "1", "2", "3"]) == ["0,1", "2,3"]
    assert device_slots(3, ["0", "1"]) == ["0", "1", "0"]  # more trials than GPUs: shared round-robin
    assert device_slots(2, []) == [None, None]


RECORDER = """import json, os, sys, time
start = time.time()
time.sleep(0.4)
args = dict(a.split("=", 1) for a in sys.argv[1:])
os.makedirs(args["run_dir"], exist_ok=True)
json.dump({"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "args": args, "start": start, "end": time.time()},
          open(os.path.join(args["run_dir"], "seen.json"), "w"))
"""


def test_parallel_trials_get_their_own_cuda_devices_and_each_sweep_its_own_group(tmp_path, capsys, monkeypatch):
    """A fake 4-GPU machine, sweep.parallel=2: overlapping trials saw disjoint CUDA_VISIBLE_DEVICES (read from
    the environment each trial process saw); a second invocation gets another W&B group; one W&B directory
    holds the sweep's report run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=80 * 2**30))
    script = tmp_path / "record.py"
    script.write_text(RECORDER)
    spec = {"method": "grid", "parameters": {"data.seed": {"values": [0, 1, 2, 3]}},
            "command": [sys.executable, str(script), "${args_no_hyphens}"]}
    path = write(tmp_path, spec)
    groups = []
    for _ in range(2):
        assert cli.main(["sweep", str(path), "sweep.parallel=2"]) == 0
        out = capsys.readouterr().out
        assert "wandb leet " in out and "wandb sync " in out
    sweeps = sorted((tmp_path / "runs").glob("sweep-s-*"))
    assert len(sweeps) == 2
    for sweep_dir in sweeps:
        seen = [json.loads((sweep_dir / f"trial-{i:03d}" / "seen.json").read_text()) for i in range(4)]
        assert {s["cuda"] for s in seen} == {"0,1", "2,3"}
        for a in seen:
            for b in seen:
                if a is not b and a["start"] < b["end"] and b["start"] < a["end"]:  # ran at the same time
                    assert a["cuda"] != b["cuda"]
        assert {s["args"]["wandb.dir"] for s in seen} == {str(sweep_dir.resolve())}
        groups.append({s["args"]["wandb.group"] for s in seen})
        assert len(list((sweep_dir / "wandb").glob("offline-run-*"))) == 1  # the sweep's report run
    assert groups[0] != groups[1] and all(len(g) == 1 for g in groups)
