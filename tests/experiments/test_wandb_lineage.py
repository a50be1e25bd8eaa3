"""W&B artifacts and lineage on real offline runs, read back with W&B's own reader (`wandb leet inspect`).

Also the quarantine test for `declare_use`: it writes the record W&B's `use_artifact` writes online through a
private method; this file fails if that method or its record changes.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.tracking.wandb_artifacts import (
    ARTIFACTS_FILE,
    log_model_mode,
    log_pretrain_artifacts,
    use_run_artifacts,
)


def records(wandb_dir: Path, run_id: str) -> list[dict]:
    """All records of one offline run (W&B's reader of the `.wandb` log)."""
    (path,) = wandb_dir.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def artifacts(recs: list[dict]) -> list[dict]:
    return [r["artifact"] for r in recs if r["type"] == "artifact"]


def fake_run_dir(root: Path) -> Path:
    """A pretraining run directory's files (bytes stand in for a tokenizer and checkpoints)."""
    run_dir = root / "pre"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "tokenizer.json").write_text('{"model": "tiny"}')
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"last" * 100)
    (run_dir / "checkpoints" / "best-step3.ckpt").write_bytes(b"best" * 100)
    return run_dir


def test_log_model_accepts_false_final_all_and_names_the_key():
    assert [log_model_mode(v) for v in (False, "false", "final", "all")] == ["false", "false", "final", "all"]
    with pytest.raises(ConfigInputError, match="wandb.log_model=some"):
        log_model_mode("some")


@pytest.mark.parametrize("mode", ["false", "final"])
def test_checkpoint_artifacts_and_their_use_by_a_later_run(tmp_path, mode):
    """Pretraining logs model-<id> (latest on the last, best on the best checkpoint) and declares the tokenizer;
    a fine-tune rebuilds the same artifacts (same digest) and declares their use (use_after_commit)."""
    import wandb

    run_dir = fake_run_dir(tmp_path)
    pre = wandb.init(project="t", dir=str(tmp_path), mode="offline", job_type="pretrain", reinit="create_new")
    entries = log_pretrain_artifacts(pre, run_dir, mode=mode, final_step=6)
    pre_id = pre.id
    pre.finish()
    ft = wandb.init(project="t", dir=str(tmp_path), mode="offline", job_type="finetune", reinit="create_new")
    declared = use_run_artifacts(ft, run_dir, run_dir / "checkpoints" / "last.ckpt")
    ft_id = ft.id
    ft.finish()

    logged = artifacts(records(tmp_path, pre_id))
    by_file = {json.loads(a["metadata"])["file"]: a for a in logged if a["type"] == "model"}
    models = by_file
    assert {a["name"] for a in models.values()} == {f"model-{pre_id}"}
    assert "best" in by_file["best-step3.ckpt"]["aliases"] and "best" not in by_file["last.ckpt"]["aliases"]
    order = [json.loads(a["metadata"])["file"] for a in logged if a["type"] == "model"]
    assert order == ["best-step3.ckpt", "last.ckpt"]  # W&B moves `latest` to the version logged last
    refs = [c.get("ref") for a in models.values() for c in a["manifest"]["contents"]]
    assert all(refs) if mode == "false" else not any(refs)  # false: path + checksum only; final: the bytes
    tok = next(a for a in logged if a["type"] == "tokenizer")
    assert tok["use_after_commit"] and tok["name"].startswith("tokenizer-")
    assert json.loads((run_dir / ARTIFACTS_FILE).read_text()) == entries

    used = artifacts(records(tmp_path, ft_id))
    assert all(a.get("use_after_commit") for a in used) and len(declared) == 2
    last = by_file["last.ckpt"]
    assert [(a["name"], a["digest"]) for a in used if a["type"] == "model"] == [(last["name"], last["digest"])]
    assert [a["digest"] for a in used if a["type"] == "tokenizer"] == [tok["digest"]]


def test_a_changed_checkpoint_is_not_declared(tmp_path):
    """The rebuilt artifact must have the logged digest: a checkpoint rewritten since is not claimed."""
    import wandb

    run_dir = fake_run_dir(tmp_path)
    pre = wandb.init(project="t", dir=str(tmp_path), mode="offline", reinit="create_new")
    log_pretrain_artifacts(pre, run_dir, mode="false", final_step=3)  # best at the final step: one version
    pre.finish()
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"changed")
    ft = wandb.init(project="t", dir=str(tmp_path), mode="offline", reinit="create_new")
    declared = use_run_artifacts(ft, run_dir, run_dir / "checkpoints" / "last.ckpt")
    ft.finish()
    assert len(declared) == 1 and declared[0].startswith("tokenizer-")
