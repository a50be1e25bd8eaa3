"""Sweep files: W&B's grid order, seeded random search, errors, dry run, and a real 2 x 2 sweep."""

import importlib
import importlib.util
import itertools
import json
import re
from pathlib import Path

import pytest
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.commands.sweep import expand_grid, expand_random, load_sweep, trial_command

BUNDLED = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "sweeps"


def write(tmp_path: Path, spec: dict) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_grid_matches_a_hand_expanded_grid():
    """Parameters sorted by name, the last one varying fastest; constants in every trial."""
    params = {"model.pos": {"values": ["rope", "alibi"]}, "model.family": {"values": ["gpt", "t5", "bert"]},
              "trainer.max_steps": {"value": 5}}
    expected = [{"model.family": f, "model.pos": p, "trainer.max_steps": 5}
                for f, p in itertools.product(["gpt", "t5", "bert"], ["rope", "alibi"])]
    assert expand_grid(params) == expected


@pytest.mark.parametrize("name", ["pos_x_family", "mask_rate", "norm_position", "objectives_x_family"])
def test_grid_matches_wandbs_sweep_engine(name):
    """Our expansion of each bundled file equals the `sweeps` package's (W&B's engine) trial order."""
    import warnings

    if importlib.util.find_spec("sweeps") is None:  # not installed: skip; installed but broken: fail
        pytest.skip("the sweeps package is not installed (.ci/run installs it)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweeps = importlib.import_module("sweeps")
    spec = load_sweep(BUNDLED / f"{name}.yaml")
    runs = []
    while (run := sweeps.next_run({"method": "grid", "parameters": spec["parameters"]}, runs)) is not None:
        run.state = sweeps.RunState.finished
        runs.append(run)
    theirs = [{k: v["value"] for k, v in r.config.items()} for r in runs]
    assert expand_grid(spec["parameters"]) == theirs


def test_random_search_is_seeded_and_in_range():
    params = {"optim.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2},
              "model.num_layers": {"min": 1, "max": 4}, "model.pos": {"values": ["rope", "alibi"]}}
    a, b, c = expand_random(params, 20, 0), expand_random(params, 20, 0), expand_random(params, 20, 1)
    assert a == b and a != c
    assert all(1e-4 <= t["optim.lr"] <= 1e-2 and t["model.num_layers"] in (1, 2, 3, 4) for t in a)
    assert {t["model.pos"] for t in a} == {"rope", "alibi"}


def test_args_no_hyphens_become_key_value_tokens():
    spec = {"command": ["${env}", "famlab", "pretrain", "tiny", "${args_no_hyphens}"]}
    cmd = trial_command(spec, {"model.pos": "rope", "objective.ul2_rates": [0.5, 0.5, 0.0]}, ["run_dir=x"])
    assert cmd[1:] == ["-m", "famlab", "pretrain", "tiny", "model.pos=rope", "objective.ul2_rates=[0.5,0.5,0.0]",
                       "run_dir=x"]


@pytest.mark.parametrize(("spec", "message"), [
    ({"method": "grid", "parameters": {"model.posx": {"values": [1]}}}, "model.posx"),
    ({"method": "bayes", "parameters": {"model.pos": {"values": ["rope"]}}}, "method=bayes needs W&B's server"),
    ({"method": "grid", "parameters": {"model.pos": {"values": ["nope"]}}, "command": ["famlab", "pretrain",
                                                                                      "${args_no_hyphens}"]}, "nope"),
])
def test_bad_sweep_files_exit_2_with_one_line(tmp_path, capsys, spec, message):
    assert cli.main(["sweep", str(write(tmp_path, spec)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("famlab: error:") and message in err and "\n" not in err


def test_dry_run_lists_every_trial(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sweep", str(BUNDLED / "pos_x_family.yaml"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.count("famlab pretrain tiny model.family=") == 15 and "15 trials (grid)" in out
    assert not (tmp_path / "runs").exists()  # nothing run, nothing written


def test_wandb_flag_fails_clearly_when_the_server_is_unreachable(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # discard port: nothing listens
    assert cli.main(["sweep", str(BUNDLED / "mask_rate.yaml"), "--wandb"]) == 2
    assert "not reachable" in capsys.readouterr().err


@pytest.mark.slow
def test_a_pos_x_family_sweep_runs_end_to_end(tmp_path, monkeypatch, capsys):
    """2 x 2 trials (model.pos x model.family) with the tiny preset: run dirs in one group, a summary per family,
    a plot, and `famlab report <sweep dir>` rebuilds the same report."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"document {i} about the cat and the dog number {i % 7}" for i in range(300)))
    spec = {"method": "grid", "metric": {"name": "val/loss", "goal": "minimize"},
            "parameters": {"model.family": {"values": ["gpt", "bert"]}, "model.pos": {"values": ["rope", "alibi"]},
                           "data.corpus": {"value": str(corpus)}, "data.tokenizer.vocab_size": {"value": 300},
                           "data.tokenizer.num_sentinels": {"value": 20},
                           "trainer.max_steps": {"value": 3}, "data.batch_size": {"value": 4},
                           "data.seq_len": {"value": 32}, "trainer.val_check_interval": {"value": 3},
                           "trainer.limit_val_batches": {"value": 2}, "wandb.mode": {"value": "disabled"},
                           "trainer.progress_bar": {"value": False}},
            "command": ["famlab", "pretrain", "tiny", "${args_no_hyphens}"]}
    assert cli.main(["sweep", str(write(tmp_path, spec)), "sweep.parallel=2"]) == 0
    sweep_dir = next((tmp_path / "runs").glob("sweep-s-*"))
    trials = json.loads((sweep_dir / "results.json").read_text())["trials"]
    board = {p.stem: json.loads(p.read_text()) for p in (sweep_dir / "jobs").glob("*.json")}  # the sweep's board
    assert len(board) == 4 and {(b["state"], b["result"]) for b in board.values()} == {("done", "exit status 0")}
    assert [(t["params"]["model.family"], t["params"]["model.pos"]) for t in trials] == [
        ("gpt", "rope"), ("gpt", "alibi"), ("bert", "rope"), ("bert", "alibi")]  # sorted keys, values as given
    numbers = json.loads((sweep_dir / "results.json").read_text())["numbers"]
    for t in trials:
        cfg = yaml.safe_load((Path(t["run_dir"]) / "config.yaml").read_text())
        assert cfg["model"]["pos"] == t["params"]["model.pos"] and cfg["wandb"]["group"] == sweep_dir.name
        assert t["status"] == "ok" and 0 < numbers[t["name"]]["value"] and 0 < numbers[t["name"]]["floor"]
    report = (sweep_dir / "report.md").read_text()
    assert report.count("| trial-") == 4 and "not comparable across bert, gpt" not in report
    assert "not comparable across gpt, bert" in report and "- gpt: trial-00" in report and "- bert: trial-00" in report
    # rope / alibi reach any length: every trial reports its validation loss at 2x and 4x the training length
    rows = [line for line in report.splitlines() if line.startswith("| trial-")]
    assert all(re.search(r"\| \d+\.\d{3} / \d+\.\d{3} \|", row) for row in rows), rows
    assert (sweep_dir / "sweep_model_pos.png").stat().st_size > 10_000
    (sweep_dir / "sweep_model_pos.png").unlink()
    assert cli.main(["report", str(sweep_dir)]) == 0  # rebuilt from the run directories: the same report
    assert (sweep_dir / "report.md").read_text() == report and (sweep_dir / "sweep_model_pos.png").is_file()
