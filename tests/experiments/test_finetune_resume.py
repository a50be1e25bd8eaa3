"""Fine-tunes that resume exactly: a real `famlab finetune` process stopped by a real SIGTERM in one of its jobs
(grid point x seed), then `resume=auto`: finished jobs are skipped, the interrupted one continues from its
last.ckpt with the same per-step losses, and results.json equals an uninterrupted fine-tune's."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from famlab.datamodules import PositionTrackingLoader, ResumableSampler
from famlab.experiments.commands import cli
from famlab.experiments.plumbing.reliability import PREEMPTED_EXIT

from tests.experiments.reliability_helpers import fast_args, losses, write_corpus

ROOT = Path(__file__).resolve().parents[2]
STEPS = 16  # 192 training examples at batch 16 = 12 steps an epoch: a job crosses an epoch boundary
CUT = 10  # the interrupted job stops mid-epoch, after its first best checkpoint (validation every 3 steps)
CASES = {  # two jobs each: the second one is interrupted
    "seeds": (["finetune.seeds=[0,1]"], ["seed-0", "seed-1"]),
    "grid": (["finetune.lr_grid=[0.001,0.003]", "finetune.head_lr=0.01"], ["lr0.001-head0.01", "lr0.003-head0.01"]),
}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("ftresume")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        mp.setenv("WANDB_DIR", str(root / "wandb-dir"))
        for knob in ("FAMLAB_FAULT_SIGTERM_STEP", "FAMLAB_FAULT_SIGTERM_FIT", "FAMLAB_FAULT_NAN_STEPS",
                     "FAMLAB_FAULT_STEP_SLEEP"):
            mp.delenv(knob, raising=False)
        pre = root / "pre"  # a tiny pretraining run with dropout, so resuming must restore the RNG stream too
        assert cli.main([*fast_args(write_corpus(root / "corpus.txt"), pre, 4), "model.dropout=0.1"]) == 0
        yield root, pre, _task_csv(root / "task.csv")


def _task_csv(path: Path) -> Path:
    """240 sentences of 3 topics (192 train, 24 val, 24 test)."""
    import random

    words = {"animal": ["dog", "cat", "horse", "bird"], "colour": ["red", "blue", "green", "white"],
             "motion": ["run", "walk", "swim", "fly"]}
    rng = random.Random(0)
    lines = ["sentence,topic"] + [f"a {' '.join(rng.choices(words[t], k=4))} thing,{t}"
                                  for t in (list(words)[i % 3] for i in range(240))]
    path.write_text("\n".join(lines) + "\n")
    return path


def _args(env, run_dir: Path, case: str) -> list[str]:
    _, pre, task = env
    return ["finetune", f"init={pre}", f"data.task={task}", "data.text_column=sentence", "data.label_column=topic",
            f"finetune.max_steps={STEPS}", "finetune.val_every=3", "data.batch_size=16", "data.max_len=32",
            "data.num_workers=0", "trainer.log_every_n_steps=1", "trainer.progress_bar=false", "model.dropout=0.1",
            "wandb.mode=disabled", f"run_dir={run_dir}", *CASES[case][0]]


def _famlab(args: list[str], **knobs: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "famlab", *args], cwd=ROOT, env={**os.environ, **knobs},
                          capture_output=True, text=True, timeout=600)


def _files(path: Path) -> dict[str, tuple[int, str] | str]:
    """Modification time and content of every file; only the content of tokenizer.json, which every start copies
    again from the pretraining run."""
    out: dict[str, tuple[int, str] | str] = {}
    for p in sorted(path.rglob("*")):
        if p.is_file():
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out[str(p.relative_to(path))] = digest if p.name == "tokenizer.json" else (p.stat().st_mtime_ns, digest)
    return out


def _training_rows(run_dir: Path) -> list[dict[str, str]]:
    """metrics.csv's training and validation rows (their non-empty values; testing may add columns)."""
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = [{k: v for k, v in row.items() if v} for row in csv.DictReader(f)]
    return [row for row in rows if "train/loss" in row or "val/acc" in row]


def _results(run_dir: Path) -> dict:
    results = json.loads((run_dir / "results.json").read_text())
    results.pop("wall_s")
    return results


@pytest.fixture(scope="module")
def references(env):
    """An uninterrupted fine-tune per case."""
    root = env[0]
    out = {}
    for case in CASES:
        run_dir = root / f"reference-{case}"
        done = _famlab(_args(env, run_dir, case))
        assert done.returncode == 0, done.stderr[-3000:]
        out[case] = run_dir
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_sigterm_in_the_second_job_then_resume_skips_the_first_and_matches(env, references, case):
    root = env[0]
    run_dir, (first, second) = root / f"interrupted-{case}", CASES[case][1]
    stopped = _famlab(_args(env, run_dir, case), FAMLAB_FAULT_SIGTERM_STEP=str(CUT), FAMLAB_FAULT_SIGTERM_FIT="2")
    assert stopped.returncode == PREEMPTED_EXIT, stopped.stderr[-3000:]
    assert "Traceback" not in stopped.stderr
    ckpt = run_dir / second / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"] == CUT
    assert (run_dir / first / "job.json").is_file() and not (run_dir / second / "job.json").exists()
    assert not (run_dir / "results.json").exists()
    # the command it prints resumes the whole fine-tune (the run directory, not the job's)
    (command,) = re.findall(r"Resume with: famlab (.*)$", stopped.stderr, flags=re.M)
    resume_args = shlex.split(command)
    assert resume_args[-2:] == [f"run_dir={run_dir}", "resume=auto"]
    before, metrics_before = _files(run_dir / first), _training_rows(run_dir / first)

    done = _famlab(resume_args)
    assert done.returncode == 0, done.stderr[-3000:]
    name = f"{run_dir.name}-{'s0' if case == 'seeds' else first}"
    assert f"fine-tuning job {name} is done ({run_dir / first / 'job.json'}); skipped" in done.stderr
    assert f"resumes from {ckpt}" in done.stderr
    after = _files(run_dir / first)
    # not retrained, not rewritten. The grid tests the selected point after every job (its metrics.csv gets the test
    # scores appended, hparams.yaml is written again) and drops the other point's checkpoints.
    tested = {"metrics.csv", "hparams.yaml"} if case == "grid" else set()
    dropped = {k for k in before if k not in after}
    assert all(k.endswith(".ckpt") for k in dropped) and (case == "grid" or not dropped)
    assert {k: v for k, v in before.items() if k not in dropped | tested} == {
        k: v for k, v in after.items() if k not in tested}
    assert _training_rows(run_dir / first) == metrics_before

    for job in (first, second):  # every step's training loss, the resumed job's included, equals the reference's
        expected, got = losses(references[case] / job), losses(run_dir / job)
        assert sorted(got) == sorted(expected) == list(range(STEPS))
        torch.testing.assert_close(torch.tensor([got[s] for s in range(STEPS)]),
                                   torch.tensor([expected[s] for s in range(STEPS)]), rtol=0, atol=0)
    assert _results(run_dir) == _results(references[case])

    # resume=auto on the finished fine-tune: says so, changes nothing it produced
    produced = _files(run_dir)
    again = _famlab(resume_args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{run_dir} is done (results.json); nothing to resume" in again.stderr
    assert _files(run_dir) == produced


@pytest.mark.slow
def test_signal_after_a_jobs_last_step_stops_before_the_next_job(env, references, monkeypatch, capsys):
    """SIGTERM at the last step of the first job: that job finishes and is recorded, the fine-tune exits 3 before
    the second; resumed, the second starts fresh. A job whose job.json was lost continues from its final last.ckpt
    without training. Both give the uninterrupted results."""
    root = env[0]
    run_dir = root / "boundary"
    args = _args(env, run_dir, "seeds")
    monkeypatch.setenv("FAMLAB_FAULT_SIGTERM_STEP", str(STEPS))
    assert cli.main(args) == PREEMPTED_EXIT
    monkeypatch.delenv("FAMLAB_FAULT_SIGTERM_STEP")
    err = capsys.readouterr().err
    assert f"preempted at step {STEPS}; checkpoint {run_dir / 'seed-0' / 'checkpoints' / 'last.ckpt'}" in err
    assert f"run_dir={run_dir} resume=auto" in err
    assert (run_dir / "seed-0" / "job.json").is_file() and not (run_dir / "seed-1").exists()
    assert cli.main([*args, "resume=auto"]) == 0
    assert _results(run_dir) == _results(references["seeds"])

    (run_dir / "seed-1" / "job.json").unlink()  # as if stopped between the fit's end and the record
    (run_dir / "results.json").unlink()
    steps_before = losses(run_dir / "seed-1")
    capsys.readouterr()
    assert cli.main([*args, "resume=auto"]) == 0
    assert "resumes from" in capsys.readouterr().err
    assert losses(run_dir / "seed-1") == steps_before  # nothing trained again
    assert _results(run_dir) == _results(references["seeds"])


@pytest.mark.slow
def test_resume_with_changed_settings_or_a_checkpoint_path_is_refused(env, references, capsys):
    run_dir = references["seeds"]
    before = _files(run_dir)
    capsys.readouterr()
    assert cli.main([*_args(env, run_dir, "seeds"), "finetune.max_steps=17", "resume=auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "finetune.max_steps=17 (stored 16)" in err[0] and str(run_dir / "config.yaml") in err[0]
    ckpt = run_dir / "seed-0" / "checkpoints" / "last.ckpt"
    assert cli.main([*_args(env, run_dir, "seeds"), f"resume={ckpt}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"resume={ckpt}" in err[0] and "resume=auto" in err[0]
    assert _files(run_dir) == before


def test_iterating_the_train_loader_leaves_the_global_rng_alone():
    """A new DataLoader iterator draws a worker base seed; from the global RNG it would shift a resumed run's
    dropout (its iterator starts mid-epoch, after the RNG states are restored)."""
    torch.manual_seed(0)
    before = torch.get_rng_state()
    loader = PositionTrackingLoader(list(range(8)), batch_size=2, sampler=ResumableSampler(8, shuffle=True, seed=0))
    assert [len(list(loader)) for _ in range(2)] == [4, 4]
    assert torch.equal(torch.get_rng_state(), before)


def test_resumed_config_may_change_where_it_runs_and_reports_only(tmp_path):
    from famlab.experiments.configuration.compose import to_plain, to_yaml
    from famlab.experiments.configuration.config import Config, ConfigInputError, WandbMode, with_values
    from famlab.experiments.plumbing.reliability import check_resumed_config

    (tmp_path / "config.yaml").write_text(to_yaml(Config(run_dir="a", provenance={"command": "famlab finetune"})))
    check_resumed_config(tmp_path / "fresh", to_plain(Config()))  # no config.yaml yet: nothing to compare
    free = with_values(Config(run_dir="b", resume="auto"), {
        "wandb.mode": WandbMode.disabled, "trainer.progress_bar": False, "data.cache_dir": "/elsewhere"})
    check_resumed_config(tmp_path, to_plain(free))
    changed = with_values(Config(resume="auto"), {"finetune.seeds": [0, 1], "optim.lr": 0.5})
    with pytest.raises(ConfigInputError, match=r"finetune\.seeds=\[0, 1\] \(stored \[0\]\), optim\.lr=0\.5 "
                                               r"\(stored 0\.001\); resume with the original settings"):
        check_resumed_config(tmp_path, to_plain(changed))


@pytest.mark.slow
def test_a_suite_resumes_task_by_task(env, monkeypatch, capsys):
    """A suite of the same task twice, stopped in the second: resumed, the first is not redone and the second
    continues, ending with the first one's scores and per-step losses (same task, same settings)."""
    import yaml
    from famlab.experiments.plumbing import faults

    root, _, task = env
    suite = root / "twice.yaml"
    entry = {"task": str(task), "text_column": "sentence", "label_column": "topic"}
    suite.write_text(yaml.safe_dump({"tasks": [{"name": "a", **entry}, {"name": "b", **entry}]}))
    run_dir = root / "suite"
    args = [a if not a.startswith("data.task=") else f"data.task={suite}" for a in _args(env, run_dir, "seeds")]
    args = [a for a in args if not a.startswith("finetune.seeds=")]
    monkeypatch.setattr(faults, "FITS_STARTED", [0])  # count this command's fits only
    monkeypatch.setenv("FAMLAB_FAULT_SIGTERM_STEP", str(CUT))
    monkeypatch.setenv("FAMLAB_FAULT_SIGTERM_FIT", "2")
    assert cli.main(args) == PREEMPTED_EXIT
    monkeypatch.delenv("FAMLAB_FAULT_SIGTERM_STEP")
    assert f"run_dir={run_dir} resume=auto" in capsys.readouterr().err  # the suite's directory, not the task's
    first = _files(run_dir / "a")
    assert cli.main([*args, "resume=auto"]) == 0
    assert f"{run_dir / 'a'} is done (results.json); nothing to resume" in capsys.readouterr().err
    assert _files(run_dir / "a") == first
    a, b = _results(run_dir / "a"), _results(run_dir / "b")
    assert a["seeds"] == b["seeds"] and a["grid"] == b["grid"]
    assert losses(run_dir / "a") == losses(run_dir / "b") and len(losses(run_dir / "b")) == STEPS
    results = json.loads((run_dir / "results.json").read_text())
    assert [t["name"] for t in results["tasks"]] == ["a", "b"]


@pytest.mark.slow
def test_select_seeds_trains_the_other_seeds_at_the_selected_point_only(env):
    """finetune.select_seeds=1: each grid point trains seed 0; the point with the better seed-0 validation score is
    the only one to train seeds 1 and 2, and every seed of it reads the test split."""
    root = env[0]
    run_dir = root / "select-one"
    args = [*_args(env, run_dir, "grid"), "finetune.seeds=[0,1,2]", "finetune.select_seeds=1"]
    assert cli.main(args) == 0
    results = json.loads((run_dir / "results.json").read_text())
    val0 = {(g["lr"], g["head_lr"]): g["val"]["0"] for g in results["grid"]}
    chosen = max(val0, key=lambda p: val0[p])
    assert (results["selected"]["lr"], results["selected"]["head_lr"]) == chosen
    assert all(g["val_mean"] == g["val"]["0"] for g in results["grid"])  # what the selection read
    assert sorted(results["seeds"]) == ["0", "1", "2"] and "select_seeds=1" in results["selection"]
    for point in CASES["grid"][1]:
        trained = sorted(p.name for p in (run_dir / point).glob("seed-*") if (p / "job.json").is_file())
        is_chosen = point == f"lr{chosen[0]:g}-head{chosen[1]:g}"
        assert trained == (["seed-0", "seed-1", "seed-2"] if is_chosen else ["seed-0"]), point
