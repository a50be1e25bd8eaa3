"""W&B runs of a fine-tuning grid and of a linear probe, on real offline runs read back with W&B's own reader.

A grid fine-tune tests the selected point's models only after every point has trained; their test scores must
still land in the W&B run that trained each model (same id, one `.wandb` file), and the other points' runs must
say they were not selected. A probe is a W&B run of its own that declares the pretraining checkpoint it read.
"""

import json
import re
import subprocess
import sys

import pytest
from famlab.experiments.commands import cli
from famlab.experiments.configuration.reads import reads

from tests.experiments.test_wandb_dashboards import FAST, inspect, summary

GRID = ["finetune.lr_grid=[1e-4,3e-3]", "finetune.seeds=[0,1]", "finetune.max_steps=4", "finetune.val_every=2"]


def run_info(recs: list[dict]) -> dict:
    return next(r["run"] for r in recs if r["type"] == "run")


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    """A tiny GPT pretraining run, a 2-point x 2-seed fine-tuning grid and a probe from it, in one W&B directory."""
    root = tmp_path_factory.mktemp("grid")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        mp.delenv("WANDB_API_KEY", raising=False)
        # Lightning's lines on the console, where each W&B run copies them: what the console test below reads
        mp.setenv("FAMLAB_VERBOSE", "1")
        task = root / "task.csv"
        rows = [f"{w} {w} thing {i},{w}" for i in range(60) for w in ("cat", "red", "run")]
        task.write_text("text,label\n" + "\n".join(rows) + "\n")
        common = [*FAST, f"wandb.dir={root}", "wandb.group=grid-1"]
        assert cli.main(["pretrain", "gpt", "tiny", *common, f"run_dir={root / 'pre'}"]) == 0
        assert cli.main(["finetune", "tiny", *read_by("finetune", common), *GRID, f"init={root / 'pre'}",
                         f"data.task={task}",
                         f"run_dir={root / 'ft'}"]) == 0
        assert cli.main(["probe", str(root / "pre"), "tiny", *read_by("probe", common), f"data.task={task}",
                         "finetune.probe_seeds=[0,1,2]", f"run_dir={root / 'probe'}"]) == 0
    runs: dict[str, list] = {}
    for run_dir in sorted((root / "wandb").glob("offline-run-*")):
        recs = inspect(run_dir)
        runs.setdefault(run_info(recs)["job_type"], []).append((run_dir, recs))
    return root, runs


@pytest.mark.slow
def test_each_grid_run_is_one_run_that_says_whether_it_was_selected(grid):
    """Four fine-tune runs, four ids, one directory each; the selected point's two carry their test scores in their
    own summary (equal to results.json) and history, the other two say selected=false and hold no test metric."""
    root, runs = grid
    results = json.loads((root / "ft" / "results.json").read_text())
    chosen = f"lr{results['selected']['lr']:g}-head{results['selected']['head_lr']:g}"
    fts = runs["finetune"]
    assert len(fts) == 4 and len({run_info(recs)["run_id"] for _, recs in fts}) == 4
    by_name = {run_info(recs)["display_name"]: recs for _, recs in fts}
    selected = 0
    for name, recs in by_name.items():
        s = summary(recs)
        assert s["selected_point"] == chosen
        tested = [r["history"]["item"] for r in recs if r["type"] == "history" and "test/acc" in r["history"]["item"]]
        if chosen in name:
            selected += 1
            seed = name.rsplit("-s", 1)[1]
            assert s["selected"] is True
            for k in ("test/acc", "test/f1", "test/mcc"):
                assert s[k] == pytest.approx(results["seeds"][seed][k])
            assert len(tested) == 1 and tested[0]["trainer/global_step"] == 4  # at the run's last step
        else:
            assert s["selected"] is False and not any(k.startswith("test/") for k in s) and not tested
        assert run_info(recs)["run_group"] == "grid-1"
    assert selected == 2


@pytest.mark.slow
def test_a_run_kept_open_does_not_collect_the_next_runs_console(grid):
    """The grid's runs stay open while the next ones train; each run's console log holds its own Trainer's lines
    only (Lightning prints "GPU available" once per Trainer; open runs would each collect all four)."""
    root, runs = grid
    for _, recs in runs["finetune"]:
        console = "".join(r["output_raw"]["line"] for r in recs if r["type"] == "output_raw")
        assert console.count("GPU available") == 1, run_info(recs)["display_name"]


@pytest.mark.slow
def test_the_grid_syncs_as_one_run_per_model(grid):
    """`wandb sync --dry-run` over the W&B directory lists each run once (no second segment of any id)."""
    root, runs = grid
    out = subprocess.run([sys.executable, "-m", "wandb", "sync", "--dry-run", str(root / "wandb")],
                         capture_output=True, text=True, timeout=120, check=True)
    listed = re.findall(r"/run-(\w+)\.wandb", out.stdout + out.stderr)
    ids = [run_info(recs)["run_id"] for job in runs.values() for _, recs in job]
    assert sorted(listed) == sorted(ids) and len(set(ids)) == 6  # pretrain, 4 fine-tunes, probe


@pytest.mark.slow
def test_the_probe_is_a_run_that_uses_the_pretraining_checkpoint(grid):
    """job_type=probe in the group; it declares model-<pretraining id> with the logged digest (lineage) and its
    summary holds the probe's results: pretrained accuracy, random-init mean and the gain."""
    root, runs = grid
    ((_, pre),), ((_, probe),) = runs["pretrain"], runs["probe"]
    assert run_info(probe)["run_group"] == "grid-1"
    pre_id = run_info(pre)["run_id"]
    logged = {(a["name"], a["digest"]) for r in pre if r["type"] == "artifact" for a in [r["artifact"]]}
    used = [r["artifact"] for r in probe if r["type"] == "artifact" and r["artifact"]["type"] != "run_table"]
    model = [(a["name"], a["digest"]) for a in used if a["type"] == "model"]
    assert len(model) == 1 and model[0][0] == f"model-{pre_id}" and model[0] in logged
    assert all(a["use_after_commit"] for a in used) and {a["type"] for a in used} == {"model", "tokenizer"}
    results = json.loads((root / "probe" / "results.json").read_text())
    s = summary(probe)
    assert s["pretrained/test/acc"] == pytest.approx(results["pretrained"]["test"]["test/acc"])
    assert s["random_mean/test/acc"] == pytest.approx(results["random_mean"]["test/acc"])
    assert s["gain/diff"] == pytest.approx(results["gain"]["diff"])
    assert s["gain/p"] == pytest.approx(results["gain"]["p"]) and s["pretrained/c"] == results["pretrained"]["c"]
    assert s["probe_seeds"] == 3 and s["bodies._type"] == "table-file"
    probe_id = run_info(probe)["run_id"]
    (table,) = (root / "wandb").glob(f"offline-run-*-{probe_id}/files/media/table/bodies_*.table.json")
    data = json.loads(table.read_text())
    assert [row[0] for row in data["data"]] == ["pretrained", "random-init", "random-init", "random-init"]
    assert data["data"][0][4] == pytest.approx(results["pretrained"]["test"]["test/acc"])


def read_by(command, overrides):
    """The overrides ``command`` reads (it refuses the pretraining-only ones the fixture shares)."""
    return [o for o in overrides if reads(command, o.split("=", 1)[0])]


@pytest.mark.slow
def test_a_probe_without_a_run_dir_is_named_after_its_task_not_the_run_it_probes(grid, tmp_path, monkeypatch):
    """``famlab probe runs/gpt-clm-tiny-<time>`` makes ``runs/gpt-probe-<task>-<time>``: with the pretraining run's
    name it would write a second directory named like the run it probes."""
    root, _ = grid
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(root / "cache"))
    assert cli.main(["probe", str(root / "pre"), *read_by("probe", FAST), f"data.task={root / 'task.csv'}",
                     "finetune.probe_seeds=[0,1]", "wandb.mode=disabled"]) == 0
    (made,) = (tmp_path / "runs").iterdir()
    assert re.fullmatch(r"gpt-probe-task-\d{8}-\d{6}", made.name), made.name
    assert (made / "results.json").is_file()
