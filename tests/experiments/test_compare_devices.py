"""Several devices: a comparison is launched once whatever the devices, a preset's global batch is the same on 1, 2 or 8
devices, a job on several devices is its own process group, and a failing rank is one line.

GPUs are simulated (``torch.cuda.device_count``) for placement and planning; the real runs use two CPU processes
with gloo, the same Lightning launcher and DDP code paths as on GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.configuration.compose import compose
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.plumbing import process_group
from famlab.experiments.plumbing.signals import Preempted
from famlab.experiments.plumbing.world import check_world, planned_world
from famlab.experiments.steps.pretrain import device_batch

from tests.experiments import group_jobs
from tests.experiments.reliability_helpers import fast_args, write_corpus
from tests.experiments.test_compare import tiny_inputs

ROOT = Path(__file__).resolve().parents[2]
DDP = ["trainer.devices=2", "trainer.accelerator=cpu", "trainer.strategy=ddp"]


@pytest.fixture
def eight_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


# --- the recipe does not depend on the hardware ---------------------------------------------------------------------

@pytest.mark.parametrize(("devices", "world", "per_device"), [("auto", 8, 8), ("1", 1, 64), ("2", 2, 32)])
def test_pretrain_small_on_eight_gpus_trains_the_presets_global_batch(eight_gpus, devices, world, per_device):
    """``famlab pretrain gpt small`` on 8 GPUs: 8 ranks of 64 / 8 (never 8 x 64); the FLOPs a rank logs per
    micro-batch times the world are the global batch's."""
    cfg = compose(["gpt", "small"], [f"trainer.devices={devices}"]).cfg
    assert cfg.data.batch_size == 64
    assert (planned_world(cfg.trainer), device_batch(cfg.data.batch_size, cfg.trainer)) == (world, per_device)
    assert world * device_batch(cfg.data.batch_size, cfg.trainer) == cfg.data.batch_size


def test_accumulation_shares_the_global_batch_and_an_uneven_one_is_refused(eight_gpus):
    cfg = compose(["gpt", "small"], ["trainer.accumulate_grad_batches=4"]).cfg
    assert device_batch(cfg.data.batch_size, cfg.trainer) == 2  # 64 / (8 ranks x 4 micro-batches)
    cfg = compose(["gpt", "small"], ["data.batch_size=36"]).cfg
    with pytest.raises(ConfigInputError, match=r"data.batch_size=36 is the global batch .* use a multiple of 8"):
        device_batch(cfg.data.batch_size, cfg.trainer)


def test_a_launcher_that_starts_another_world_than_planned_is_refused():
    with pytest.raises(ConfigInputError, match="planned for 2 rank"):
        check_world(2, 4)


def test_compare_small_on_eight_gpus_runs_eight_one_gpu_workers_at_the_global_batch(eight_gpus, tmp_path, capsys,
                                                                                  monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", "small", "--dry-run"]) == 0
    out = capsys.readouterr().out
    held = ", ".join(f"worker {i} on GPU {i}" for i in range(8))
    assert f"workers: 8 side by side, 1 GPU each: {held}; 1 device per job" in out
    assert "global batch: 64 pretraining, 64 fine-tuning" in out and "rank(s) loads 64 and 64" in out
    assert "compare.workers: 8  # famlab compare default" in out
    assert list(tmp_path.iterdir()) == []


# --- launched once ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variable", ["WORLD_SIZE", "SLURM_STEP_NUM_TASKS"])
def test_compare_started_as_several_processes_is_refused_before_making_anything(tmp_path, monkeypatch, capsys,
                                                                                variable):
    """Under torchrun or ``srun --ntasks=2`` every process would make its own comparison directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, "2")
    assert cli.main(["compare", *tiny_inputs(tmp_path), f"run_dir={tmp_path / 'cmp'}"]) == 2
    err = capsys.readouterr().err
    assert "famlab compare owns its comparison directory and runs once" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "cmp").exists()


def test_fsdp_is_refused_in_one_line_and_a_sharded_checkpoint_never_restarts_silently(tmp_path, capsys):
    assert cli.main(["config", "gpt", "tiny", "trainer.strategy=fsdp"]) == 2
    assert "trainer.strategy=fsdp is not supported: its checkpoints are sharded" in capsys.readouterr().err
    from famlab.experiments.plumbing.resume import resolve_resume

    (tmp_path / "checkpoints" / "last.ckpt").mkdir(parents=True)  # what a sharded strategy writes
    cfg = compose(["gpt", "tiny"], ["resume=auto"]).cfg
    with pytest.raises(ConfigInputError, match="is a sharded checkpoint directory"):
        resolve_resume(cfg.resume, tmp_path / "checkpoints")


# --- a job's own process group ---------------------------------------------------------------------------------------

def test_a_job_group_hands_back_its_result_its_failure_in_one_line_or_its_stop(tmp_path):
    assert process_group.run(group_jobs.double, 21, spec=tmp_path / "double") == 42
    with pytest.raises(process_group.JobFailed, match=r"^rank 0: ValueError: bad value 3 \(the ranks' output: "):
        process_group.run(group_jobs.fail, 3, spec=tmp_path / "fail")
    assert "Traceback" in (tmp_path / "fail.rank0.err").read_text()
    with pytest.raises(Preempted) as stopped:
        process_group.run(group_jobs.stop, 0, spec=tmp_path / "stop")
    assert (stopped.value.step, stopped.value.run_dir) == (7, Path("run"))


def test_a_job_group_does_not_inherit_a_launchers_world(monkeypatch):
    for key, value in (("LOCAL_RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1234"), ("FAMLAB_RUN_DIR", "x"),
                       ("SLURM_PROCID", "3")):
        monkeypatch.setenv(key, value)
    env = process_group.child_env(("2", "3"), threads=4)
    assert not {"LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT", "FAMLAB_RUN_DIR", "SLURM_PROCID"} & set(env)
    assert (env["CUDA_VISIBLE_DEVICES"], env["OMP_NUM_THREADS"]) == ("2,3", "4")


# --- real processes (gloo) -------------------------------------------------------------------------------------------

def _famlab(args: list[str], root: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "FAMLAB_CACHE": str(root / "cache"), "WANDB_MODE": "offline", **extra}
    env.pop("FAMLAB_RUN_DIR", None)
    return subprocess.run([sys.executable, "-m", "famlab", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_a_rank_that_dies_is_one_line_naming_it_and_the_others_do_not_hang(tmp_path):
    """Rank 1 fails after step 2: the command ends (no collective timeout), and stderr names rank 1, its error, where
    its traceback is and the resume command."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir = tmp_path / "run"
    done = _famlab([*fast_args(corpus, run_dir, 6), *DDP], tmp_path, FAMLAB_FAULT_RAISE_STEP="2",
                   FAMLAB_FAULT_RANKS="1")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("famlab: rank")]
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("famlab: rank 1 of 2 failed: RuntimeError: injected failure after step 2")
    assert "resume with: famlab pretrain" in lines[0] and f"run_dir={run_dir.resolve()} resume=auto" in lines[0]
    assert "FAMLAB_FAULT_RAISE_STEP" in (run_dir / "rank1-error.log").read_text()
    assert "Traceback" not in done.stderr


def _comparison_dirs(root: Path) -> list[Path]:
    return sorted((root / "runs").glob("compare-*")) if (root / "runs").exists() else []


@pytest.mark.slow
@pytest.mark.parametrize(("families", "workers"), [("[gpt]", 1), ("[bert,t5]", 2)])
def test_a_comparison_of_two_device_jobs_runs_once_and_finishes_every_job(tmp_path, families, workers):
    """2 devices per job (gloo): one comparison directory, every job finished by its own 2-rank process group; with 2
    workers, two such groups side by side."""
    dropped = ("compare.workers", "compare.seeds", "finetune.probe")
    args = [a for a in tiny_inputs(tmp_path) if not a.startswith(dropped)]
    done = _famlab(["compare", *args, f"compare.families={families}", f"compare.workers={workers}", "compare.seeds=[0]",
                    "finetune.probe_seeds=[0]", *DDP], tmp_path)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    (comp,) = _comparison_dirs(tmp_path)  # never one per rank
    results = json.loads((comp / "results.json").read_text())
    arms = families.strip("[]").split(",")
    assert sorted(results["families"]) == sorted(arms)
    for arm in arms:
        for run in (f"{arm}-pretrain-s0", f"{arm}-ft-s0", f"{arm}-scratch", f"{arm}-probe-s0"):
            assert (comp / run / "results.json").is_file(), run
        for run in (f"{arm}-pretrain-s0", f"{arm}-ft-s0", f"{arm}-scratch"):  # the fits ran as 2-rank groups
            assert (comp / "jobs" / "groups" / f"{run}.result").is_file(), run
        ran = yaml.safe_load((comp / f"{arm}-pretrain-s0" / "config.yaml").read_text())["trainer"]
        assert (ran["devices"], ran["strategy"]) == (2, "ddp")
    assert "2 devices per job (each job its own 2-rank DDP world" in done.stdout + done.stderr
