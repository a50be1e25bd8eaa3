"""One import namespace: from a working directory with its own ``experiments/``, ``families/``, ``objectives/``
and ``datamodules/`` packages (common in research repositories), a sweep and a torchrun launch run famlab's code.

Each hostile package writes a marker file when imported; famlab must never import one of them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.experiments.reliability_helpers import write_corpus

HIJACK = "from pathlib import Path\nPath(__file__).parent.parent.joinpath('HIJACKED-{name}').write_text('imported')\n"
SETTINGS = {"data.seq_len": 32, "data.batch_size": 8, "trainer.max_steps": 2, "trainer.val_check_interval": 2,
            "trainer.limit_val_batches": 1, "trainer.progress_bar": False, "wandb.mode": "disabled"}


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A working directory whose own packages shadow famlab's four folder names."""
    for name in ("experiments", "families", "objectives", "datamodules"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(HIJACK.format(name=name))
    main = HIJACK.format(name="experiments-main") + "raise SystemExit(0)\n"
    (tmp_path / "experiments" / "__main__.py").write_text(main)
    return tmp_path


def _env(cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FAMLAB_RUN_DIR", "PYTHONPATH", "RANK", "WORLD_SIZE")}
    return {**env, "FAMLAB_CACHE": str(cwd / "cache"), "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_sweep_and_torchrun_run_famlab_code_from_a_hostile_working_directory(hostile):
    """`famlab sweep` (trials are `python -m famlab` subprocesses) and `torchrun ... -m famlab` (2 gloo ranks)."""
    corpus = write_corpus(hostile / "corpus.txt")
    params = {"data.corpus": {"value": str(corpus)}, **{k: {"value": v} for k, v in SETTINGS.items()}}
    spec = {"program": "famlab", "method": "grid", "parameters": params,
            "command": ["famlab", "pretrain", "gpt", "tiny", "${args_no_hyphens}"]}
    (hostile / "s.yaml").write_text(json.dumps(spec))  # JSON is YAML
    sweep = _run([sys.executable, "-m", "famlab", "sweep", "s.yaml"], hostile)
    assert sweep.returncode == 0, sweep.stdout[-2000:] + sweep.stderr[-2000:]
    (trial,) = hostile.glob("runs/sweep-s-*/trial-000")
    assert json.loads((trial / "results.json").read_text())["steps"] == 2

    overrides = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in SETTINGS.items()]
    launch = _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                   "-m", "famlab", "pretrain", "gpt", "tiny", f"data.corpus={corpus}", *overrides,
                   "trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", "run_dir=ddp"], hostile)
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert json.loads((hostile / "ddp" / "results.json").read_text())["steps"] == 2
    assert not list(hostile.glob("HIJACKED-*")), "a famlab process imported the working directory's own package"
