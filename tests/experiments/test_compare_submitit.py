"""A comparison's jobs through submitit (``compare.launcher=slurm`` on a cluster; submitit's local executor here runs
the same path): each job a process of its own, the comparison directory the only state. Stopped inside a pretraining
job and resumed, it gives the tables of an uninterrupted comparison run by the local launcher."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.experiments.test_compare import strip_time_columns, tiny_inputs
from tests.experiments.test_compare_resume import famlab_env, inside_pretraining, kill_when

# one family keeps it near a minute per comparison; a pretraining long enough (40 steps, checkpointed every 10) to be
# stopped inside it
SETTINGS = ["compare.families=[gpt]", "trainer.max_steps=40", "trainer.val_check_interval=10", "compare.seeds=[0]",
            "compare.bpb_docs=8", "compare.zero_shot_items=12", "finetune.probe_seeds=[0,1]", "compare.workers=2"]


def tables(comp_dir: Path) -> dict[str, list[list[str]]]:
    """Every table of the comparison's results.json, timing columns aside."""
    data = json.loads((comp_dir / "results.json").read_text())
    return {name: strip_time_columns(table) for name, table in data["tables"].items()}


def famlab(root: Path, *extra: str) -> list[str]:
    args = [a for a in tiny_inputs(root) if not a.startswith(("compare.workers", "compare.seeds", "finetune.probe"))]
    return [sys.executable, "-m", "famlab", "compare", *args, *SETTINGS, *extra]


@pytest.mark.slow
def test_a_submitit_comparison_stopped_in_pretraining_resumes_to_the_local_launchers_tables(tmp_path):
    root = tmp_path
    ref = subprocess.run(famlab(root, "run_dir=ref"), cwd=root, env=famlab_env(root), capture_output=True, text=True,
                         timeout=900)
    assert ref.returncode == 0, ref.stderr[-3000:]
    comp_dir, out = root / "sub", root / "sub.out"
    with out.open("w") as stdout:
        env = famlab_env(root) | {"FAMLAB_FAULT_STEP_SLEEP": "0.05"}  # a pretraining outlasts its kill point
        proc = subprocess.Popen(famlab(root, "run_dir=sub", "compare.launcher=submitit-local"), cwd=root, env=env,
                                stdout=stdout, stderr=subprocess.PIPE, text=True)
        kill_when(proc, inside_pretraining(comp_dir, "gpt", 0.5), signal.SIGTERM)
        _, err = proc.communicate(timeout=600)
    assert proc.returncode == 3, err[-3000:]
    (record,) = (comp_dir / "jobs" / "submitit" / "submitted").glob("gpt-pretrain-s0.json")
    assert json.loads(record.read_text())["cluster"] == "local"  # it ran as a submitit job, not in a worker
    assert (comp_dir / "gpt-pretrain-s0" / "checkpoints" / "last.ckpt").is_file()
    assert not (comp_dir / "gpt-pretrain-s0" / "results.json").exists()  # stopped inside it
    last = err.strip().splitlines()[-1]
    assert last.startswith("famlab: resume with: famlab compare ") and "compare.launcher=submitit-local" in last
    command = [sys.executable, "-m", *shlex.split(last.removeprefix("famlab: resume with: "))]
    resumed = subprocess.run(command, cwd=root, env=famlab_env(root), capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    reference = tables(root / "ref")
    assert {"pretrain", "finetune", "probe"} <= set(reference) and tables(comp_dir) == reference
