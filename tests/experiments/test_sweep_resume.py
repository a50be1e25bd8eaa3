"""``famlab sweep ... run_dir=<dir> resume=auto``: finished trials are skipped, an interrupted one continues from its
last.ckpt, the summary equals an uninterrupted sweep's, and a resume under other settings is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from famlab.experiments.commands import cli

# a stand-in for a trial's command: writes its arguments and a results.json, as a finished famlab run would
TRIAL = """import json, os, sys
args = dict(a.split("=", 1) for a in sys.argv[1:])
os.makedirs(args["run_dir"], exist_ok=True)
with open(os.path.join(args["run_dir"], "calls.txt"), "a") as f:
    f.write(json.dumps(args) + "\\n")
if args.get("model.dim") == os.environ.get("FAIL_DIM"):
    sys.exit(3)
json.dump({}, open(os.path.join(args["run_dir"], "results.json"), "w"))
"""


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


def stand_in_spec(tmp_path: Path, dims: list[int]) -> dict:
    (tmp_path / "trial.py").write_text(TRIAL)
    return {"method": "grid", "parameters": {"model.dim": {"values": dims}},
            "command": [sys.executable, str(tmp_path / "trial.py"), "${args_no_hyphens}"]}


def calls(trial_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (trial_dir / "calls.txt").read_text().splitlines()]


def test_resume_runs_only_the_unfinished_trials_with_resume_auto(tmp_path, monkeypatch, capsys):
    """The stand-in trial with model.dim=48 fails without results.json; the resume reruns only it."""
    monkeypatch.chdir(tmp_path)
    spec = write_spec(tmp_path / "s.yaml", stand_in_spec(tmp_path, [32, 48]))
    monkeypatch.setenv("FAIL_DIM", "48")
    assert cli.main(["sweep", str(spec), "run_dir=sw", "wandb.mode=disabled"]) == 1
    assert (tmp_path / "sw" / "sweep_config.yaml").is_file() and (tmp_path / "sw" / "sweep.yaml").is_file()
    assert (f"1 of 2 trials did not finish; to resume them: famlab sweep {spec} wandb.mode=disabled run_dir=sw "
            "resume=auto") in capsys.readouterr().out
    assert cli.main(["sweep", str(spec), "run_dir=sw", "resume=auto", "--dry-run", "wandb.mode=disabled"]) == 0
    out = capsys.readouterr().out
    assert "trial-000: model.dim=32  (done: results.json; skipped)" in out and "1 left to run in sw" in out
    monkeypatch.delenv("FAIL_DIM")
    assert cli.main(["sweep", str(spec), "run_dir=sw", "resume=auto", "wandb.mode=disabled"]) == 0
    out = capsys.readouterr().out
    assert "trial-000 is done" in out and "trial-001 started" in out
    assert len(calls(tmp_path / "sw" / "trial-000")) == 1  # not run again
    first, second = calls(tmp_path / "sw" / "trial-001")
    assert "resume" not in first and second["resume"] == "auto" and second["wandb.mode"] == "disabled"
    results = json.loads((tmp_path / "sw" / "results.json").read_text())
    assert [t["status"] for t in results["trials"]] == ["ok", "ok"]


@pytest.mark.parametrize(("change", "named"), [
    (["sweep.seeds=[0,1]"], "sweep.seeds=[0, 1] (stored None)"),
    ("values", "sweep file parameters.model.dim.values=[32, 64] (stored [32, 48])"),
])
def test_a_resume_under_other_settings_is_refused_naming_the_keys(tmp_path, monkeypatch, capsys, change, named):
    monkeypatch.chdir(tmp_path)
    spec = stand_in_spec(tmp_path, [32, 48])
    path = write_spec(tmp_path / "s.yaml", spec)
    assert cli.main(["sweep", str(path), "run_dir=sw", "wandb.mode=disabled"]) == 0
    before = sorted(p.name for p in (tmp_path / "sw").iterdir())
    if change == "values":
        spec["parameters"]["model.dim"]["values"] = [32, 64]
        write_spec(path, spec)
        change = []
    capsys.readouterr()
    assert cli.main(["sweep", str(path), "run_dir=sw", "resume=auto", "wandb.mode=disabled", *change]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("famlab: error: resume=auto: sw holds a sweep with other settings") and named in err
    assert "\n" not in err and sorted(p.name for p in (tmp_path / "sw").iterdir()) == before


def test_parallel_and_wandb_settings_may_change_on_resume(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = write_spec(tmp_path / "s.yaml", stand_in_spec(tmp_path, [32, 48]))
    assert cli.main(["sweep", str(path), "run_dir=sw", "wandb.mode=disabled"]) == 0
    assert cli.main(["sweep", str(path), "run_dir=sw", "resume=auto", "sweep.parallel=2", "wandb.mode=disabled",
                     "wandb.project=elsewhere"]) == 0
    assert "2 trials" in capsys.readouterr().out
    assert all(len(calls(tmp_path / "sw" / t)) == 1 for t in ("trial-000", "trial-001"))


@pytest.mark.parametrize(("args", "message"), [
    (["resume=auto"], "resume=auto needs run_dir=<the sweep's directory>"),
    (["run_dir=taken"], "run_dir=taken exists and is not empty; pass resume=auto"),
    (["run_dir=taken", "resume=auto"], "holds no sweep.yaml; it is not a sweep directory"),
    (["run_dir=sw", "resume=auto", "--wandb"], "run_dir= and resume= (the local sweep's directory) do not apply"),
])
def test_bad_resume_arguments_exit_2_with_one_line(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    path = write_spec(tmp_path / "s.yaml", stand_in_spec(tmp_path, [32]))
    assert cli.main(["sweep", str(path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("famlab: error:") and message in err and "\n" not in err
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine" and not (tmp_path / "sw").exists()


def tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every file below ``path`` with its size and modification time (ns)."""
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_an_interrupted_sweep_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch, capsys):
    """Two real tiny pretraining trials (2 and 4 steps). A SIGTERM after step 3 stops the second one, as a scheduler
    would, with its last.ckpt; the resume leaves the first trial untouched, continues the second from step 3, and the
    summary and each trial's final metrics equal those of the same sweep run without interruption."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"document {i} about the cat and the dog number {i % 7}" for i in range(300)))
    fixed = {"data.corpus": str(corpus), "data.tokenizer.vocab_size": 300, "data.tokenizer.num_sentinels": 20,
             "model.dim": 32, "model.num_layers": 2, "data.seq_len": 32, "data.batch_size": 4,
             "trainer.val_check_interval": 2, "trainer.limit_val_batches": 2, "trainer.progress_bar": False}
    spec = {"method": "grid", "metric": {"name": "val/loss", "goal": "minimize"},
            "parameters": {"trainer.max_steps": {"values": [2, 4]}, **{k: {"value": v} for k, v in fixed.items()}},
            "command": ["famlab", "pretrain", "gpt", "tiny", "${args_no_hyphens}"]}
    path = write_spec(tmp_path / "s.yaml", spec)
    sweep = ["sweep", str(path), "wandb.mode=disabled"]

    assert cli.main([*sweep, "run_dir=full"]) == 0  # the uninterrupted sweep

    monkeypatch.setenv("FAMLAB_FAULT_SIGTERM_STEP", "3")  # reaches only the 4-step trial
    assert cli.main([*sweep, "run_dir=cut"]) == 1
    monkeypatch.delenv("FAMLAB_FAULT_SIGTERM_STEP")
    cut = tmp_path / "cut"
    assert (cut / "trial-000" / "results.json").is_file() and not (cut / "trial-001" / "results.json").exists()
    assert (cut / "trial-001" / "checkpoints" / "last.ckpt").is_file()
    first = {**tree(cut / "trial-000"), "log": (cut / "trial-000.log").stat().st_mtime_ns}
    capsys.readouterr()

    assert cli.main([*sweep, "run_dir=cut", "resume=auto"]) == 0
    out = capsys.readouterr().out
    assert "trial-000 is done" in out and "trial-001 started" in out
    assert {**tree(cut / "trial-000"), "log": (cut / "trial-000.log").stat().st_mtime_ns} == first  # not rerun
    resumed = json.loads((cut / "trial-001" / "results.json").read_text())
    assert resumed["steps"] == 4 and resumed["first"] == {}  # continued from its checkpoint, not started afresh
    assert yaml.safe_load((cut / "trial-001" / "config.yaml").read_text())["wandb"]["mode"] == "disabled"

    full, again = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("full", "cut"))
    assert again["numbers"] == full["numbers"]
    assert [(t["name"], t["params"], t["status"]) for t in again["trials"]] == [
        (t["name"], t["params"], t["status"]) for t in full["trials"]]
    for trial in ("trial-000", "trial-001"):
        a, b = (json.loads((tmp_path / d / trial / "results.json").read_text()) for d in ("full", "cut"))
        keys = ("steps", "final", "length_extrapolation")
        assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
