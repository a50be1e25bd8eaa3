"""The plan tells the truth about cost and data: ``famlab compare --dry-run`` prices each pretraining job from its
planned FLOPs on this machine and counts each arm's passes over the prepared corpus (warning past about 4, after
Muennighoff et al. 2023); the report shows the passes and names an arm trained past its best on repeated data."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import pytest
import yaml
from famlab.experiments.analysis.repetition import RISE_MARGIN, rise
from famlab.experiments.analysis.report import build_report
from famlab.experiments.analysis.results import ArmBudget, PretrainResult
from famlab.experiments.commands import cli
from famlab.experiments.plumbing.data_cache import with_vocab
from famlab.experiments.steps.compare_budget import (
    CPU_MFU,
    Rate,
    assumed_ids,
    duration,
    plan_budget,
    pretrain_seconds,
)
from famlab.experiments.steps.comparison import compose_all

from tests.generated_data import CorpusSpec, corpus_files


def _corpus(root: Path) -> Path:
    """A generated Latin corpus of 250 short documents (a few thousand tokens: far less than any preset reads)."""
    files, rel = corpus_files(CorpusSpec("latin", "short"), random.Random("plan-cost"))
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root / rel


def _train_tokens(cache: Path) -> int:
    """The prepared corpus's training-split tokens, read from its stream file as a pretraining run cuts blocks."""
    (streams,) = [p for p in cache.glob("prepared/*/streams-sep*.json") if not p.parent.is_symlink()]  # no alias
    return int(json.loads(streams.read_text())["tokens"]["train"])


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


def test_dry_run_prices_each_job_and_warns_past_four_passes(workspace, capsys):
    """`famlab compare small --dry-run`: unknown passes before the corpus is prepared; once `famlab prepare` has
    prepared it, each arm's passes are its planned corpus tokens over the training split, with the warning."""
    corpus = _corpus(workspace)
    data = [f"data.corpus={corpus}"]
    assert cli.main(["compare", "small", "--dry-run", *data]) == 0
    before = capsys.readouterr().out
    assert "passes over the corpus" in before and "unknown until prepared" in before and "WARNING" not in before
    assert not (workspace / "cache" / "prepared").exists()  # the dry run prepared nothing

    assert cli.main(["prepare", "small", *data]) == 0
    capsys.readouterr()
    assert cli.main(["compare", "small", "--dry-run", *data]) == 0
    out = capsys.readouterr().out
    train = _train_tokens(workspace / "cache")
    rows = {m[1]: int(m[2].replace(",", "")) for m in re.finditer(r"^  (bert|gpt|t5) .*?  ([\d,]{9,})  ", out, re.M)}
    assert set(rows) == {"bert", "gpt", "t5"}  # each arm's planned corpus tokens, from the budget table
    (passes,) = [line for line in out.splitlines() if line.startswith("passes over the corpus")]
    assert f"{train:,} training tokens" in passes
    for arm, tokens in rows.items():
        assert f"{arm} {tokens / train:.2f}" in passes
    (warning,) = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert "bert, gpt, t5" in warning and "Muennighoff et al. 2023" in warning and "docs/data.md" in warning
    assert "measured fp32 matmul" in out and f"assumed {CPU_MFU:.0%} MFU" in out  # the CPU's rate and the stated MFU
    jobs = [line for line in out.splitlines() if re.match(r"  \d+\. pretrain ", line)]
    assert len(jobs) == 3 and all(re.search(r"steps, ~[\d.,]+ (s|min|h|days|years) -> ", line) for line in jobs)


def test_a_pretraining_jobs_time_is_its_planned_flops_at_the_sustained_rate():
    """FLOPs / (sustained rate x devices per job), written in the largest unit of at least 1.5."""
    budget = ArmBudget(steps=10, flops_per_step=10**14, corpus_tokens_per_step=1, flops=10**15, corpus_tokens=10,
                       params=1, non_embedding_params=1, batch_shape="B=1", dim=1, ffn_dim=1, num_layers=1)
    assert pretrain_seconds(budget, Rate(1e12, 1, "")) == 1000.0
    assert pretrain_seconds(budget, Rate(1e12, 4, "")) == 250.0
    assert math.isnan(pretrain_seconds(budget, Rate(math.nan, 1, "")))
    assert [duration(s) for s in (45, 1000, 3 * 3600, 3 * 86400, 2 * 365 * 86400, math.nan)] == [
        "45 s", "17 min", "3.0 h", "3.0 days", "2.0 years", "unknown"]


def test_rise_is_the_last_loss_above_the_later_halfs_minimum_by_the_margin():
    """The later half's minimum, not the run's: an early minimum does not make a late plateau a rise."""
    assert rise([5.0, 4.0, 3.5, 3.4, 3.4 * (1 + RISE_MARGIN) + 1e-6]) == pytest.approx((3.4, 3.4 * 1.01 + 1e-6))
    assert rise([5.0, 4.0, 3.5, 3.4, 3.4 * (1 + RISE_MARGIN) - 1e-6]) is None
    assert rise([2.0, 4.0, 3.0, 3.0, 3.0]) is None  # the whole run's minimum is early; the later half is flat
    assert rise([3.0, 2.0, 3.5]) is None  # too few checks to speak of a later half


def _pretrain_dir(comp: Path, arm: str, objective: str, losses: list[float]) -> None:
    """A pretraining run directory as the report reads it: config.yaml, results.json and metrics.csv."""
    run = comp / f"{arm}-pretrain-s0"
    run.mkdir()
    config = {"seed": 0, "model": {"family": arm}, "objective": {"name": objective}, "size": "tiny"}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    final = {"val/loss": losses[-1], "val/ppl": math.exp(losses[-1]), "val/unigram_loss": 6.0}
    result = PretrainResult(family=arm, objective=objective, run_dir=str(run), steps=50, num_params=1000,
                            first={}, final=final, wall_s=1.0)
    (run / "results.json").write_text(json.dumps(result.to_json()))
    rows = ["step,val/loss,perf/tokens_per_sec", *(f"{10 * (i + 1)},{v},1000.0" for i, v in enumerate(losses))]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")


def test_report_shows_passes_and_names_an_arm_trained_past_its_best(workspace):
    """The plan of a comparison on a generated corpus states each arm's passes (planned corpus tokens over the
    prepared training split); the report's pretraining table shows them, and names gpt, whose validation loss rose
    over its last checks, and not bert, whose loss kept falling."""
    corpus = _corpus(workspace)
    overrides = [f"data.corpus={corpus}", "compare.families=[gpt,bert]"]
    assert cli.main(["prepare", "tiny", f"data.corpus={corpus}"]) == 0
    base, cfgs = compose_all(["tiny"], overrides)
    # planned as a start plans, with the vocabulary the corpus's tokenizer asked for
    cfgs = {arm: with_vocab(cfg, cfg.data.tokenizer.vocab_size) for arm, cfg in cfgs.items()}
    plan, cfgs = plan_budget(base.compare, base.trainer, base.data, cfgs, assumed_ids(base.data))
    train = _train_tokens(workspace / "cache")
    assert plan.corpus_train_tokens == train
    comp = workspace / "comparison"
    comp.mkdir()
    (comp / "plan.json").write_text(json.dumps(plan.to_json()))
    _pretrain_dir(comp, "gpt", "clm", [6.0, 5.0, 4.5, 4.4, 4.6])
    _pretrain_dir(comp, "bert", "mlm", [6.0, 5.0, 4.5, 4.4, 4.39])
    results = build_report([comp], comp)
    report = (comp / "report.md").read_text()
    header = report[report.index("| family | objective |"):].splitlines()[0].split(" | ")
    column = header.index("passes")
    for arm in ("gpt", "bert"):
        expected = plan.arms[arm].corpus_tokens / train
        assert results["families"][arm]["passes"] == pytest.approx(expected)
        (row,) = [line for line in report.splitlines() if line.startswith(f"| {arm} | ")]
        assert row.split(" | ")[column] == f"{expected:.2f}"
        assert expected > 4  # the generated corpus is far smaller than the tiny preset reads
    assert "**gpt was trained past its best on repeated data**" in report
    assert "seed 0: 4.400 -> 4.600" in report and "Muennighoff et al. 2023" in report
    assert "**bert" not in report
