"""scripts/build_docstrings_demo.py: a non-WordNet corpus and task, with the held-out items kept out of the corpus."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _build_module():
    path = ROOT / "scripts" / "build_docstrings_demo.py"
    spec = importlib.util.spec_from_file_location("build_docstrings_demo", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_library(site: Path, name: str, n: int) -> None:
    lines = []
    for i in range(n):
        lines += [f"def {name}_f{i}():", f'    """{name} function number {i} computes a thing of kind {i % 7}.',
                  "", f"    Longer text that only the corpus sees, unique id {name}-{i}.", '    """', ""]
    (site / name).mkdir(parents=True)
    (site / name / "mod.py").write_text("\n".join(lines))


def test_task_splits_and_no_held_out_docstring_in_the_corpus(tmp_path):
    site = tmp_path / "site"
    _fake_library(site, "numpy", 450)
    _fake_library(site, "torch", 420)
    _fake_library(site, "scipy", 150)  # fewer than 200 summaries: not a class
    stats = _build_module().build(site, tmp_path / "out", corpus_mb=1.0)
    assert stats["labels"] == 2 and stats["rows"] == 800
    with open(tmp_path / "out" / "task.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    splits = {(r["label"], r["split"]) for r in rows}
    assert splits == {(lib, s) for lib in ("numpy", "torch") for s in ("train", "val", "test")}
    assert sum(r["split"] == "test" for r in rows) == 100 and sum(r["split"] == "train" for r in rows) == 600
    corpus = (tmp_path / "out" / "corpus.txt").read_text()
    for r in rows:
        name, number = r["text"].split()[0], r["text"].split()[3]
        assert (f"unique id {name}-{number}." in corpus) == (r["split"] == "train"), r
