"""The whole comparison over generated data (``tests/generated_data.py``), at a test-scale budget.

Each case is a generated corpus x task x tokenizer setting: every script, layout, vocabulary size and task shape
the generator makes goes through tokenizer training, pretraining of each family, bits per byte, the zero-shot
tasks, probes, fine-tuning, the scratch baselines and the report. A case famlab must refuse (a task of one class,
a corpus smaller than one block) exits with status 2 and a one-line error instead, before any report.
"""

from __future__ import annotations

import json
from pathlib import Path

import generated_data
import lightning.pytorch  # noqa: F401 - imported before capsys: its log handler keeps the stderr of its import
import pytest
from famlab.experiments.analysis.results import read_failures
from famlab.experiments.commands import cli

# The least that still runs every step: a handful of pretraining steps (validated once, at the end), one
# fine-tuning point of two steps, two fine-tuning and probe seeds (the gain and probe tables need two a side), a few
# documents for bits per byte and items per zero-shot task.
# The budget tolerance is wide because one step of so short a run is a large share of it.
BUDGET = [
    "data.seq_len=32", "data.max_len=32", "data.batch_size=4", "model.dim=32", "model.num_layers=2",
    "trainer.max_steps=8", "trainer.val_check_interval=8", "trainer.limit_val_batches=1", "compare.tolerance=0.2",
    "finetune.max_steps=2", "finetune.val_every=2", "finetune.batch_size=8", "finetune.lr_grid=[1e-3]",
    "finetune.probe_seeds=[0,1]", "finetune.probe_c_grid=[1.0]", "compare.seeds=[0,1]", "compare.workers=1",
    "compare.task_limit=None",
    "compare.bpb_docs=4", "compare.zero_shot_items=4", "wandb.mode=disabled", "trainer.progress_bar=false",
]
TABLES = ("pretrain", "finetune", "gains", "probe")
STOPPED = "stopped: a required job failed: "
CASES = generated_data.catalogue(seed=0)
FAST = "jsonl-bom-crlf"  # the one case in `-m "not slow"`: one family, a corpus and task read from BOM + CRLF JSONL


def table_families(table: str) -> list[str]:
    """The families a markdown table has rows for, in order (``bert pretrained`` and ``bert scratch`` are bert's;
    reference rows are no family's)."""
    firsts = [line.strip("|").split("|")[0].split() for line in table.splitlines()[2:] if line.startswith("|")]
    return list(dict.fromkeys(f[0] for f in firsts if f and f[0] in generated_data.FAMILIES))


def check_report(comp: Path, families: tuple[str, ...]) -> None:
    """A full report: every table with one row per family, no optional step failed, and every pretrained model
    scored for bits per byte and on the zero-shot tasks."""
    assert (comp / "report.md").is_file()
    md = (comp / "report.md").read_text(encoding="utf-8")
    results = json.loads((comp / "results.json").read_text(encoding="utf-8"))
    for name in TABLES:
        assert name in results["tables"], f"results.json has no {name} table"
        assert table_families(results["tables"][name]) == list(families), (name, results["tables"][name])
        assert all(f"| {f} " in md for f in families)
    failed = [f"{f.where}: {f.reason}" for f in read_failures(comp)]
    assert not failed, "optional steps failed:\n" + "\n".join(failed)
    for family in families:
        evaluated = json.loads((comp / f"{family}-pretrain-s0" / "eval.json").read_text(encoding="utf-8"))
        assert {"byte_score", "zero_shot"} <= set(evaluated), (family, sorted(evaluated))


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=() if c.name == FAST else pytest.mark.slow)
                                  for c in CASES])
def test_generated_case_compares_or_is_refused_in_one_line(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    data = case.write(tmp_path / "data")
    rc = cli.main(["compare", *BUDGET, *data])
    out, err = capsys.readouterr()
    if case.expect_error is not None:
        # refused before any job runs (right after the tokenizer at the latest), in one line on stderr, and no
        # half-made comparison is left behind
        lines = [*out.splitlines(), *err.splitlines()]
        errors = [line for line in lines if line.startswith("famlab: error: ") or STOPPED in line]
        assert rc == 2 and len(errors) == 1 and errors[0].startswith("famlab: error: "), err[-3000:]
        assert case.expect_error in errors[0], errors[0]
        assert not list(tmp_path.glob("runs/compare-*"))
        return
    assert rc == 0, err[-3000:]
    (comp,) = tmp_path.glob("runs/compare-*")
    check_report(comp, case.families)
