"""W&B as the comparison's dashboard: axes, summaries, results, one directory, the report run.

Real tiny runs (GPT pretraining, then a fine-tune from it) write real offline W&B runs into one W&B directory;
everything is read back with W&B's own reader of the `.wandb` log (`wandb leet inspect --json`).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from famlab.experiments.commands import cli
from famlab.experiments.configuration.compose import compose
from famlab.experiments.configuration.reads import reads
from famlab.experiments.tracking.wandb_report import log_report_run, markdown_tables, wandb_commands

FAST = ["trainer.max_steps=6", "trainer.log_every_n_steps=2", "trainer.val_check_interval=3",
        "trainer.limit_val_batches=2", "data.batch_size=8", "trainer.progress_bar=false", "model.dim=32",
        "model.num_layers=2", "model.num_heads=2", "data.seq_len=32", "wandb.mode=offline"]


def inspect(run_dir: Path) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def runs_by_job(wandb_dir: Path) -> dict[str, list[dict]]:
    """Records of every offline run under ``wandb_dir``, keyed by job type."""
    out: dict[str, list[dict]] = {}
    for run_dir in sorted(wandb_dir.glob("offline-run-*")):
        recs = inspect(run_dir)
        job = next(r["run"] for r in recs if r["type"] == "run")["job_type"]
        out[job] = recs
    return out


def summary(recs: list[dict]) -> dict:
    merged: dict = {}
    for r in recs:
        if r["type"] == "summary":
            merged.update(r["summary"].get("update", {}))
    return merged


def metrics(recs: list[dict]) -> dict[str, dict]:
    return {r["metric"]["name"]: r["metric"] for r in recs if r["type"] == "metric" and "name" in r["metric"]}


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    """One directory as a comparison would hold it: a pretraining run, a fine-tune from it, their W&B runs."""
    root = tmp_path_factory.mktemp("dash")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        mp.delenv("WANDB_API_KEY", raising=False)
        task = root / "task.csv"
        rows = [f"{w} {w} thing {i},{w}" for i in range(60) for w in ("cat", "red", "run")]
        task.write_text("text,label\n" + "\n".join(rows) + "\n")
        common = [*FAST, f"wandb.dir={root}", "wandb.group=dash-1"]
        assert cli.main(["pretrain", "gpt", "tiny", *common, f"run_dir={root / 'pre'}"]) == 0
        read = [o for o in common if reads("finetune", o.split("=", 1)[0])]  # finetune refuses pretraining keys
        assert cli.main(["finetune", "tiny", *read, f"init={root / 'pre'}", f"data.task={task}",
                         "finetune.max_steps=4", "finetune.val_every=2", f"run_dir={root / 'ft'}"]) == 0
    return root


@pytest.fixture(scope="module")
def by_job(dash):
    """The runs' records, read once for the module."""
    return runs_by_job(dash / "wandb")


@pytest.mark.slow
def test_pretraining_metrics_are_drawn_against_the_budget(by_job):
    """val/* and train/* have budget/flops as step metric; min for losses, max for scores, last for budgets."""
    m = metrics(by_job["pretrain"])
    assert m["val/loss"]["step_metric"] == "budget/flops" and m["val/loss"]["summary"] == {"min": True}
    assert m["train/loss"]["step_metric"] == "budget/flops" and m["val/ppl"]["summary"] == {"min": True}
    assert m["perf/mfu"]["summary"] == {"max": True}
    assert m["budget/flops"]["summary"] == {"last": True} and m["budget/tokens"]["summary"] == {"last": True}


@pytest.mark.slow
def test_every_validation_row_carries_the_budget_and_the_summary_keeps_the_best(by_job):
    recs = by_job["pretrain"]
    rows = [r["history"]["item"] for r in recs if r["type"] == "history"]
    val = [row for row in rows if "val/loss" in row]
    assert len(val) == 3  # before training, step 3, step 6
    assert all("budget/flops" in row and "budget/tokens" in row for row in val)
    assert [row["budget/flops"] for row in val] == sorted(row["budget/flops"] for row in val)
    assert val[0]["budget/flops"] == 0 < val[-1]["budget/flops"]
    s = summary(recs)
    assert s["val/loss"] == {"min": min(row["val/loss"] for row in val)}
    assert s["budget/flops"] == {"last": val[-1]["budget/flops"]}


@pytest.mark.slow
def test_pretraining_summary_holds_the_evaluation_results(dash, by_job):
    results = json.loads((dash / "pre" / "results.json").read_text())
    s = summary(by_job["pretrain"])
    for k in ("2x", "4x"):
        assert s[f"eval/loss_{k}"] == pytest.approx(results["length_extrapolation"][k]["loss"])


@pytest.mark.slow
def test_finetune_metrics_use_their_own_step_and_hold_test_scores(dash, by_job):
    recs = by_job["finetune"]
    m = metrics(recs)
    assert m["val/acc"]["step_metric"] == "trainer/global_step" and m["val/acc"]["summary"] == {"max": True}
    assert m["val/loss"]["summary"] == {"min": True} and m["val/mcc"]["summary"] == {"max": True}
    results = json.loads((dash / "ft" / "results.json").read_text())
    s = summary(recs)
    for k in ("test/acc", "test/f1", "test/mcc"):
        assert s[k] == pytest.approx(results["seeds"]["0"][k])
    point = f"lr{results['selected']['lr']:g}-head{results['selected']['head_lr']:g}"
    assert s["selected"] is True and s["selected_point"] == point == "lr0.001-head0.01"  # a one-point grid


@pytest.mark.slow
def test_the_finetune_declares_the_checkpoint_it_started_from(by_job):
    """W&B lineage: the fine-tune uses model-<pretraining run id> with the digest pretraining logged."""
    pre_id = next(r["run"] for r in by_job["pretrain"] if r["type"] == "run")["run_id"]
    logged = {a["name"]: a for r in by_job["pretrain"] if r["type"] == "artifact" for a in [r["artifact"]]}
    used = [r["artifact"] for r in by_job["finetune"] if r["type"] == "artifact"]
    model = logged[f"model-{pre_id}"]
    assert model["type"] == "model" and {"latest"} <= set(model["aliases"])
    assert any(a["name"] == model["name"] and a["digest"] == model["digest"] and a["use_after_commit"] for a in used)


@pytest.mark.slow
def test_one_wandb_directory_holds_every_run_and_syncs_with_one_command(dash, by_job):
    """`wandb sync <dir>/wandb` (what famlab prints) finds both runs; both carry the group."""
    assert set(by_job) == {"pretrain", "finetune"}
    assert not (dash / "pre" / "wandb").exists() and not (dash / "ft" / "wandb").exists()
    assert {next(r["run"] for r in recs if r["type"] == "run")["run_group"] for recs in by_job.values()} == {"dash-1"}
    view, upload = wandb_commands(dash)
    assert view == f"wandb leet {dash / 'wandb'}"
    out = subprocess.run([sys.executable, "-m", "wandb", *upload.split()[1:], "--dry-run"], capture_output=True,
                         text=True, timeout=120, check=True)
    listed = out.stdout + out.stderr
    ids = [next(r["run"] for r in recs if r["type"] == "run")["run_id"] for recs in by_job.values()]
    assert "Would sync 2 run(s)" in listed and all(i in listed for i in ids)


@pytest.mark.slow
def test_the_report_run_holds_tables_images_and_the_report_artifact(dash, tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = tmp_path / "cmp"
    out.mkdir()
    fig = plt.figure(figsize=(2, 2))
    plt.plot([0, 1], [1, 0])
    fig.savefig(out / "curves.png")
    plt.close(fig)
    (out / "report.md").write_text(
        "# r\n\n## Pretraining\n\n| arm | loss |\n|---|---|\n| gpt | 1.5 |\n| t5 | - |\n\n"
        "## Fine-tuning\n\n| arm | acc |\n|---|---|\n| gpt | 0.25 |\n\n![curves](curves.png)\n")
    (out / "results.json").write_text("{}\n")
    cfg = compose([], ["wandb.mode=offline"]).cfg
    run_id = log_report_run(cfg.wandb, out, group="cmp-1", name="cmp-1-report", sources=[dash / "pre", dash / "pre"])
    recs = inspect(next((out / "wandb").glob(f"offline-run-*-{run_id}")))
    run = next(r["run"] for r in recs if r["type"] == "run")
    assert run["job_type"] == "report" and run["run_group"] == "cmp-1"
    s = summary(recs)
    assert s["tables/pretraining._type"] == "table-file" and s["tables/fine_tuning._type"] == "table-file"
    assert s["plots/curves._type"] == "image-file"
    arts = [r["artifact"] for r in recs if r["type"] == "artifact"]
    report = next(a for a in arts if a["type"] == "report")
    assert report["name"] == "report-cmp-1"
    assert {c["path"] for c in report["manifest"]["contents"]} == {"report.md", "results.json", "curves.png"}
    used = [(a["type"], a["digest"]) for a in arts if a.get("use_after_commit")]  # lineage: model -> report
    assert {t for t, _ in used} == {"model", "tokenizer"} and len(used) == len(set(used))  # each declared once
    table = next((out / "wandb").glob("offline-run-*/files/media/table/tables/pretraining_*.table.json"))
    assert json.loads(table.read_text())["data"] == [["gpt", 1.5], ["t5", "-"]]


def test_markdown_tables_are_read_generically():
    """Every pipe table, titled by its heading (numbered when a heading has two); numbers become numbers."""
    md = ("# T\n\n## A\n\n| x | y |\n|---|:--:|\n| a | 1 |\n| b | 2.5 |\n\ntext\n\n| p |\n|---|\n| `q` |\n\n"
          "## B c\n\n| k | v |\n| --- | --- |\n| z | -3 |\n")
    assert markdown_tables(md) == [("A", ["x", "y"], [["a", 1], ["b", 2.5]]), ("A 2", ["p"], [["q"]]),
                                   ("B c", ["k", "v"], [["z", -3]])]
