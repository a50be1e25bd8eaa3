"""benchmarks/gpu_check.py, the first-contact check for a GPU: its CPU smoke mode gives every row, each ok or skipped
for want of CUDA; a kernel that drifts from its reference fails its row; the GPU command lines are valid famlab ones."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from famlab.experiments.configuration.compose import compose, split_args
from famlab.experiments.configuration.reads import check_overrides
from famlab.experiments.steps.comparison import compose_all

ROOT = Path(__file__).resolve().parents[2]
KERNEL_ROWS = ["device", "attn.flash_causal", "attn.t5_bias", "attn.alibi", "lm_loss"]
ALL_ROWS = [*KERNEL_ROWS, "pretrain.bert", "pretrain.gpt", "pretrain.t5", "workers.compare", "compile.gpt",
            "ddp.finetune"]


def _load():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


gpu_check = _load()


def _smoke(tmp_path: Path, capsys, *extra: str) -> tuple[int, list[dict], str]:
    out = tmp_path / "table.json"
    status = gpu_check.main(["--cpu-smoke", "--json", str(out), "--workdir", str(tmp_path / "runs"), *extra])
    return status, json.loads(out.read_text())["rows"], capsys.readouterr().out


def test_cpu_smoke_kernel_rows_are_ok_and_match_their_references(tmp_path, capsys):
    """The in-process rows on the CPU: flash for causal attention, both biased schemes' gradients and the chosen LM
    loss within fp32 tolerance of their references; the printed table has one line per row."""
    status, rows, printed = _smoke(tmp_path, capsys, "--only", "device,attn,lm_loss")
    assert status == 0
    assert [r["name"] for r in rows] == KERNEL_ROWS
    assert all(r["result"] == "ok" for r in rows), rows
    for r in rows[1:]:
        assert 0 <= r["values"]["max_rel_err"] < gpu_check.TOLERANCE[torch.float32]
    by_name = {r["name"]: r for r in rows}
    assert "ran flash" in by_name["attn.flash_causal"]["meaning"]
    assert "bias grad too" in by_name["attn.t5_bias"]["meaning"]  # T5's bias is learned: its gradient is compared
    assert "fused linear_cross_entropy" in by_name["lm_loss"]["meaning"]  # what dispatch chooses on a CPU
    lines = printed.splitlines()
    assert lines[0].split() == ["check", "result", "number", "meaning"]
    assert [line.split()[0] for line in lines[2:2 + len(rows)]] == KERNEL_ROWS


def _detached_bias_attention(q, k, v, bias, *, scale, dropout):
    """famlab's biased attention with the bound of a bug: the bias's gradient dropped."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.detach(), scale=scale)


def test_a_biased_kernel_that_drops_the_bias_gradient_fails_its_row(monkeypatch, tmp_path):
    """The row compares the bias's gradient too: the kernel dispatch chooses on the CPU, without it, fails."""
    monkeypatch.setattr("famlab.families.blocks.attention.biased_attention", _detached_bias_attention)
    mode = gpu_check.Mode(cuda=False, workdir=tmp_path, deadline=float("inf"))
    row = gpu_check.run_check("attn.t5_bias", lambda: gpu_check.biased_row("t5_bias", mode))
    assert row.result == "FAIL: 4 tensors against the reference's 5 (a gradient is missing)", row.result


def test_a_fused_loss_off_the_dense_reference_fails_its_row(monkeypatch, tmp_path):
    """A fused LM loss that scores the ignored positions (-100 read as token 0) is off the dense reference: FAIL."""
    from famlab.families.kernels.linear_cross_entropy import linear_cross_entropy

    monkeypatch.setattr("famlab.objectives.objective.linear_cross_entropy",
                        lambda h, w, labels, **kw: linear_cross_entropy(h, w, labels.clamp(min=0), **kw))
    mode = gpu_check.Mode(cuda=False, workdir=tmp_path, deadline=float("inf"))
    row = gpu_check.run_check("lm_loss", lambda: gpu_check.lm_loss_row(mode))
    assert row.result.startswith("FAIL: grad of the hidden states off the reference: Mismatched elements"), row.result


def test_ddp_is_skipped_on_one_gpu(tmp_path):
    """With one CUDA device the 2-rank fine-tune is a skipped row, not a failure (decided before CUDA is touched)."""
    mode = gpu_check.Mode(cuda=True, workdir=tmp_path, deadline=float("inf"), cuda_count=1)
    assert gpu_check.run_check("ddp.finetune", lambda: gpu_check.ddp_row(mode)).result == "skipped: one GPU"


def test_the_gpu_command_lines_are_valid_famlab_command_lines(tmp_path):
    """Every command the GPU mode runs reads only keys its command reads and composes (trainer.accelerator=gpu
    stands in as auto: this machine has no GPU, which composition would refuse)."""
    mode = gpu_check.Mode(cuda=True, workdir=tmp_path, deadline=float("inf"), cuda_count=2)
    lines = [gpu_check.pretrain_args(f, mode, tmp_path / f, 100) for f in gpu_check.FAMILIES]
    lines += [gpu_check.compile_args(mode, tmp_path / "c", 40), gpu_check.compare_args(mode, tmp_path / "cmp"),
              gpu_check.ddp_args(mode, tmp_path / "d", gpu_check.small_task(tmp_path / "task.csv"))]
    for args in lines:
        assert "trainer.accelerator=gpu" in args and "trainer.precision=bf16-mixed" in args
        presets, overrides, flags = split_args([a.replace("accelerator=gpu", "accelerator=auto") for a in args[1:]])
        check_overrides(args[0], overrides)
        if args[0] == "compare":
            base, arms = compose_all(presets, overrides)
            assert sorted(arms) == ["bert", "gpt"] and base.compare.workers == 2
        else:
            cfg = compose(presets, overrides).cfg
            assert cfg.trainer.precision == "bf16-mixed" and not flags
    assert [a for a in lines[0] if a.startswith("trainer.max_steps")] == ["trainer.max_steps=100"]
    assert lines[0][2] == "small"  # the small preset's shapes (experiments/configs/small.yaml)


@pytest.mark.slow  # 3-8 minutes on 2 cores, by their load: three pretraining runs and a comparison, each a process
def test_cpu_smoke_runs_every_check_and_each_is_ok_or_skipped_for_want_of_cuda(tmp_path, capsys, monkeypatch):
    """The whole table at tiny shapes: every row present in order, every row that ran is ok, the pretraining rows
    read tokens/s and MFU from their runs' metrics.csv, and the comparison's two workers overlapped."""
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    status, rows, printed = _smoke(tmp_path, capsys)
    assert [r["name"] for r in rows] == ALL_ROWS
    ran = [r for r in rows if not r["result"].startswith("skipped")]
    assert all(r["result"] == "ok" for r in ran), [r for r in ran if r["result"] != "ok"]
    assert status == 0
    skipped = {r["name"]: r["result"] for r in rows if r["result"].startswith("skipped")}
    assert set(skipped) == {"compile.gpt", "ddp.finetune"}
    assert all(reason.startswith("skipped: no CUDA") for reason in skipped.values())
    by_name = {r["name"]: r for r in rows}
    for family in gpu_check.FAMILIES:
        values = by_name[f"pretrain.{family}"]["values"]
        assert values["tokens_per_sec"] > 0 and 0 < values["mfu"] < 1
    assert by_name["workers.compare"]["values"]["overlap_s"] > 0
    assert f"{len(rows)}/{len(rows)} ok or skipped" in printed
