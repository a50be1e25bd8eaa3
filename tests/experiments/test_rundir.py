"""A run directory's layout is spelled once: ``RunDir`` names each file of a real run and reads it back typed, and no
module of the package spells a run-directory file name itself (experiments/configuration/run_files.py does, and the
data layer names its tokenizer file in datamodules/tokenizer.py)."""

from __future__ import annotations

import ast
import csv
import json
import re
from pathlib import Path

import pytest
import yaml
from famlab.experiments.analysis.results import ArmBudget, Plan, PretrainResult
from famlab.experiments.commands import cli
from famlab.experiments.configuration.config import Config
from famlab.experiments.plumbing.rundir import CompareDir, RunDir, write_json

from tests.experiments.reliability_helpers import fast_args, write_corpus

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("families", "objectives", "datamodules", "experiments")
# every file name famlab writes into a run or comparison directory
NAMES = ("config.yaml", "results.json", "eval.json", "metrics.csv", "famlab.log", "tokenizer.json", "last.ckpt",
         "hparams.yaml", "compare.json", "plan.json", "report.md")
FOLDERS = ("checkpoints",)  # a folder name counts where a literal is exactly it (the word is common in messages)
OWNERS = {"experiments/configuration/run_files.py": {*NAMES, *FOLDERS}, "datamodules/tokenizer.py": {"tokenizer.json"}}
STEPS = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real tiny GPT pretraining run (3 steps, no W&B)."""
    root = tmp_path_factory.mktemp("rundir")
    corpus = write_corpus(root / "corpus.txt", lines=120)
    run_dir = root / "run"
    assert cli.main([*fast_args(corpus, run_dir, STEPS), "model.dim=32", "model.num_layers=1", "model.num_heads=2",
                     "data.seq_len=16", "data.batch_size=4"]) == 0
    return run_dir


def test_paths_are_the_run_directory_layout(run: Path):
    d = RunDir(run)
    assert (d.config_file, d.results_file, d.eval_file, d.metrics_file, d.log_file, d.tokenizer_file) == (
        run / "config.yaml", run / "results.json", run / "eval.json", run / "metrics.csv", run / "famlab.log",
        run / "tokenizer.json")
    assert (d.checkpoint_dir, d.last_checkpoint, d.wandb_dir) == (
        run / "checkpoints", run / "checkpoints" / "last.ckpt", run / "wandb")
    for path in (d.config_file, d.results_file, d.metrics_file, d.tokenizer_file, d.last_checkpoint):
        assert path.is_file(), path  # the files a finished pretraining run writes are where RunDir names them


def test_reads_a_real_run_back_typed(run: Path):
    d = RunDir(run)
    assert d.is_finished()
    written = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert d.config_data() == written
    cfg = d.config()
    assert isinstance(cfg, Config)
    assert (cfg.model.family.value, cfg.model.dim, cfg.trainer.max_steps, cfg.run_dir) == ("gpt", 32, STEPS, str(run))
    results = d.results()
    assert isinstance(results, PretrainResult)
    assert results.to_json() == json.loads((run / "results.json").read_text(encoding="utf-8")) == d.results_data()
    assert (results.family, results.steps, results.run_dir) == ("gpt", STEPS, str(run))
    assert d.eval() is None  # only famlab compare / evaluate writes eval.json
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(d.metrics()) == len(rows) > 0
    assert {int(r["step"]) for r in d.metrics() if "train/loss" in r} == {
        int(r["step"]) for r in rows if r.get("train/loss")}


def test_unfinished_run_directory(tmp_path: Path):
    d = RunDir(tmp_path)
    assert not d.is_finished()
    assert d.eval() is None and d.metrics() == []


def test_compare_dir_reads_its_plan(tmp_path: Path):
    c = CompareDir(tmp_path)
    assert (c.compare_file, c.plan_file, c.results_file, c.report_file, c.tokenizer_file) == (
        tmp_path / "compare.json", tmp_path / "plan.json", tmp_path / "results.json", tmp_path / "report.md",
        tmp_path / "tokenizer.json")
    assert c.plan() is None
    plan = Plan(match="flops", tolerance=0.05, target=1e9, reference_steps=10,
                arms={"gpt": ArmBudget(family="gpt", objective="clm", steps=10, flops_per_step=10**8,
                                       corpus_tokens_per_step=256, flops=10**9, corpus_tokens=2560, params=1000,
                                       non_embedding_params=800, batch_shape="8x32", dim=32, ffn_dim=64, num_layers=2)})
    write_json(c.plan_file, plan.to_json())
    assert c.plan() == plan


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, kinds) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def spelled(source: str) -> set[str]:
    """The run-directory file names spelled in string literals of ``source`` (docstrings aside; a name inside a
    longer literal counts, e.g. a message; ``sweep_config.yaml`` is another file)."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found |= {n for n in NAMES if re.search(r"(?<![\w.-])" + re.escape(n), node.value)}
            found |= {n for n in FOLDERS if node.value == n}
    return found


def test_spelled_finds_literals_not_docstrings():
    assert spelled('"""Writes ``results.json``."""\nx = p / "results.json"\ny = f"no {p} (no config.yaml)"') == {
        "results.json", "config.yaml"}
    other_files = 'SETTINGS = "sweep_config.yaml"\nPREV = "last-prev.ckpt"\nm = "its checkpoints are sharded"'
    assert spelled(other_files) == set()
    assert spelled('d = run_dir / "checkpoints"') == {"checkpoints"}


def test_only_the_layout_module_spells_run_file_names():
    offenders = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            extra = spelled(path.read_text(encoding="utf-8")) - OWNERS.get(rel, set())
            if extra:
                offenders[rel] = sorted(extra)
    assert not offenders, f"name the file through experiments/configuration/run_files.py (RunDir): {offenders}"
