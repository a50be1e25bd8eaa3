"""Launching past one machine, simulated on localhost with gloo: torchrun as 2 nodes x 1 process, and SLURM.

Both launchers start every rank at once, so these runs also show data preparation done once: rank 0
trains the tokenizer and writes the token files, the other rank waits and loads the same bytes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from famlab.experiments.plumbing.reliability import PREEMPTED_EXIT

from tests.experiments.launch_trace_script import TRACE_ENV
from tests.experiments.reliability_helpers import fast_args, step_rows, write_corpus

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ["-m", "tests.experiments.launch_trace_script"]
PLAN, CUT = 6, 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(root: Path, trace: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "FAMLAB_RUN_DIR"))}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return {**env, "FAMLAB_CACHE": str(root / "cache"), "WANDB_MODE": "offline", TRACE_ENV: str(trace),
            "OMP_NUM_THREADS": "1", **extra}


def _start_all(commands: list[tuple[list[str], dict[str, str]]]) -> list[subprocess.CompletedProcess]:
    """Start every process at once (as a launcher does), then wait for all of them."""
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for cmd, env in commands]
    done = []
    for p, (cmd, _) in zip(procs, commands, strict=True):
        out, err = p.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(cmd, p.returncode, out, err))
    return done


def _records(trace: Path) -> list[dict]:
    return [json.loads((trace / f"rank{r}.json").read_text()) for r in range(2)]


def _assert_prepared_once_and_shared(trace: Path, environment: str) -> None:
    """The tokenizer trained once, the corpus prepared once (by rank 0), both ranks on the same bytes."""
    assert (trace / "trained.txt").read_text().split() == ["0"], "the tokenizer was not trained exactly once"
    assert (trace / "tokenized.txt").read_text().split() == ["0"], "the corpus was not prepared once, by rank 0"
    r0, r1 = _records(trace)
    assert (r0["global_rank"], r1["global_rank"], r0["world_size"], r1["world_size"]) == (0, 1, 2, 2)
    assert r0["environment"] == r1["environment"] == environment
    for key in ("tokenizer", "token_dir", "train_sha", "val_sha"):
        assert r0[key] == r1[key], f"ranks differ in {key}"


def _assert_resumed_to_plan(run_dir: Path) -> None:
    assert json.loads((run_dir / "results.json").read_text())["steps"] == PLAN
    assert sorted(step_rows(run_dir)) == list(range(PLAN))


def _torchrun(args: list[str], tmp: Path, trace: Path, port: int, **extra: str) -> list[tuple[list[str], dict]]:
    """One ``torchrun`` per simulated node: ``--nnodes 2 --nproc-per-node 1 --node-rank <n>``, rendezvous on
    127.0.0.1 (the README's line with the host and port of this machine)."""
    return [([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
              "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port), *SCRIPT, *args],
             _env(tmp, trace, **extra)) for node in range(2)]


@pytest.mark.slow
def test_torchrun_two_nodes_prepare_once_train_preempt_and_resume(tmp_path):
    """2 nodes x 1 process: data prepared once by rank 0; SIGTERM at step 3 checkpoints; resume=auto finishes."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir = tmp_path / "two-nodes"
    args = [*fast_args(corpus, run_dir, PLAN), "trainer.accelerator=cpu", "trainer.devices=1",
            "trainer.num_nodes=2", "trainer.strategy=ddp"]
    first = _start_all(_torchrun(args, tmp_path, tmp_path / "t1", free_port(), FAMLAB_FAULT_SIGTERM_STEP=str(CUT)))
    assert "resume=auto" in first[0].stderr, first[0].stderr[-3000:]
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == CUT
    _assert_prepared_once_and_shared(tmp_path / "t1", "TorchElasticEnvironment")

    second = _start_all(_torchrun([*args, "resume=auto"], tmp_path, tmp_path / "t2", free_port()))
    assert [p.returncode for p in second] == [0, 0], second[0].stderr[-3000:] + second[1].stderr[-3000:]
    assert not (tmp_path / "t2" / "trained.txt").exists()  # the cached tokenizer is reused on resume
    _assert_resumed_to_plan(run_dir)


def _srun(args: list[str], tmp: Path, trace: Path, port: int, **extra: str) -> list[tuple[list[str], dict]]:
    """What ``srun`` starts for ``--ntasks-per-node=2`` on one node: 2 processes with SLURM's variables."""
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "famlab-test", "SLURM_NTASKS": "2",
             "SLURM_NTASKS_PER_NODE": "2", "SLURM_NODEID": "0", "SLURM_NODELIST": "127.0.0.1",
             "MASTER_PORT": str(port)}
    return [([sys.executable, *SCRIPT, *args],
             _env(tmp, trace, **slurm, SLURM_PROCID=str(r), SLURM_LOCALID=str(r), **extra)) for r in range(2)]


@pytest.mark.slow
def test_slurm_ranks_come_from_slurm_and_sigusr1_checkpoints_and_resumes(tmp_path):
    """SLURM variables -> Lightning's SLURMEnvironment; SIGUSR1 at step 3 saves last.ckpt, exits 3, resume=auto
    finishes the plan; Lightning's own requeue checkpoint (hpc_ckpt) is not written."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir = tmp_path / "slurm"
    args = [*fast_args(corpus, run_dir, PLAN), "trainer.accelerator=cpu", "trainer.devices=2",
            "trainer.strategy=ddp"]
    first = _start_all(_srun(args, tmp_path, tmp_path / "t1", free_port(), FAMLAB_FAULT_SIGTERM_STEP=str(CUT),
                             FAMLAB_FAULT_SIGNAL="USR1"))
    assert first[0].returncode == PREEMPTED_EXIT, first[0].stderr[-3000:] + first[1].stderr[-3000:]
    assert f"got {signal.Signals.SIGUSR1.name}" in first[0].stderr and "SLURM job 4242" in first[0].stderr
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == CUT
    _assert_prepared_once_and_shared(tmp_path / "t1", "SLURMEnvironment")

    second = _start_all(_srun([*args, "resume=auto"], tmp_path, tmp_path / "t2", free_port()))
    assert [p.returncode for p in second] == [0, 0], second[0].stderr[-3000:] + second[1].stderr[-3000:]
    _assert_resumed_to_plan(run_dir)
    assert not list(run_dir.rglob("hpc_ckpt*"))
