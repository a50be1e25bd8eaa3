"""Sweep summaries on synthetic run directories: per-family bests, floors, yardsticks, seeds, plots, rebuild."""

import json
import statistics
from pathlib import Path

import pytest
import yaml
from famlab.experiments.analysis.stats import holm, welch
from famlab.experiments.analysis.sweep_plots import figure
from famlab.experiments.analysis.sweep_report import figure_args, load_trial, summarize, write_report
from famlab.experiments.commands import cli
from famlab.objectives import default_objective


def fake_run(run_dir: Path, params: dict, *, loss: float, floor: float | None, eval_json: dict | None = None) -> None:
    """A pretraining run directory as `famlab pretrain` leaves it: config.yaml, metrics.csv, results.json."""
    family = params.get("model.family", "gpt")
    cfg: dict = {"model": {"family": family, "pos": "rope"}, "objective": {"name": default_objective(family)},
                 "seed": 0, "wandb": {"group": "synthetic"}}
    for key, value in params.items():
        section, _, leaf = key.rpartition(".")
        (cfg.setdefault(section, {}) if section else cfg)[leaf] = value
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    floor_cell = "" if floor is None else str(floor)
    (run_dir / "metrics.csv").write_text(  # the step-0 validation first, the final one last (as Lightning writes)
        "epoch,step,val/loss,val/ppl,val/unigram_loss\n"
        f"0,0,{loss + 3},{2.0 ** (loss + 3)},{floor_cell}\n0,200,{loss},{2.0 ** loss},{floor_cell}\n")
    final = {"val/loss": loss} | ({} if floor is None else {"val/unigram_loss": floor})
    results = {"job": "pretrain", "family": family, "objective": cfg["objective"]["name"], "final": final,
               "length_extrapolation": {"2x": {"loss": loss + 0.1}, "4x": {"loss": None}}}
    (run_dir / "results.json").write_text(json.dumps(results))
    if eval_json is not None:
        (run_dir / "eval.json").write_text(json.dumps(eval_json))


def fake_sweep(tmp_path: Path, cells: list[tuple[dict, list[float], float, dict | None]], *,
               parameters: dict | None = None, metric: str = "val/loss", goal: str = "minimize") -> tuple:
    """A sweep directory: sweep.yaml plus one run directory per (cell, seed), named as `famlab sweep` names them."""
    sweep_dir = tmp_path / "sweep-synthetic-20260101-000000"
    sweep_dir.mkdir()
    keys = sorted({k for params, *_ in cells for k in params})
    spec = {"method": "grid", "metric": {"name": metric, "goal": goal},
            "parameters": parameters or {k: {"values": list(dict.fromkeys(p[k] for p, *_ in cells))} for k in keys},
            "command": ["famlab", "pretrain", "tiny", "${args_no_hyphens}"]}
    (sweep_dir / "sweep.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    records = []
    for params, losses, floor, eval_json in cells:
        for seed, loss in enumerate(losses):
            name = f"trial-{len(records):03d}"
            trial = {**params, "seed": seed} if len(losses) > 1 else dict(params)
            fake_run(sweep_dir / name, trial, loss=loss, floor=floor, eval_json=eval_json)
            records.append({"name": name, "params": trial, "run_dir": str(sweep_dir / name), "status": "ok"})
    return sweep_dir, spec, records


def rows_of(markdown: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines() if line.startswith("| ")]


def bpb(value: float, measure: str = "bits_per_byte") -> dict:
    return {"byte_score": {"measure": measure, "value": value, "num_texts": 10, "num_bytes": 1000}}


# pos x family where raw losses would crown t5 (its span-corruption loss is the lowest) although its floor is the
# highest; within each family the position scheme with the largest floor - loss wins.
POS_X_FAMILY = [
    ({"model.family": "bert", "model.pos": "learned"}, [4.0], 6.0, bpb(1.9, "pll_bits_per_byte")),
    ({"model.family": "bert", "model.pos": "rope"}, [3.8], 6.0, bpb(1.8, "pll_bits_per_byte")),
    ({"model.family": "gpt", "model.pos": "learned"}, [4.5], 5.5, bpb(1.6)),
    ({"model.family": "gpt", "model.pos": "rope"}, [4.2], 5.5, bpb(1.5)),
    ({"model.family": "t5", "model.pos": "learned"}, [2.0], 7.5, bpb(1.7)),
    ({"model.family": "t5", "model.pos": "rope"}, [2.1], 7.5, bpb(1.65)),
]


def test_summary_names_the_best_per_family_and_never_ranks_losses_across_families(tmp_path):
    """The lowest loss overall (t5) is not called the best; each family's best is named with its floor beside."""
    sweep_dir, spec, records = fake_sweep(tmp_path, POS_X_FAMILY)
    md = write_report(sweep_dir, spec, records, name="synthetic", group="g")
    assert "Best by" not in md and "Best per group by floor − val/loss" in md
    assert "- bert: trial-001 (model.pos=rope): 2.2000" in md
    assert "- gpt: trial-003 (model.pos=rope): 1.3000" in md
    assert "- t5: trial-004 (model.pos=learned): 5.5000" in md
    warning = next(line for line in md.splitlines() if line.startswith("Warning:"))
    assert "val/loss is not comparable across bert, gpt, t5" in warning
    assert "(bert 6.00, gpt 5.50, t5 7.50 nats)" in warning
    # BERT measured pseudo-log-likelihood bits per byte, which is not bits per byte: gpt and t5 are ranked on it
    ranked = [line for line in md.splitlines() if line[:3] in ("1. ", "2. ", "3. ", "4. ", "5. ")]
    assert "Across gpt, t5 (not measured by bert), ranked on bits per byte (minimize)" in md
    assert ranked == ["1. gpt trial-003 (model.pos=rope): 1.5000", "2. gpt trial-002 (model.pos=learned): 1.6000",
                      "3. t5 trial-005 (model.pos=rope): 1.6500", "4. t5 trial-004 (model.pos=learned): 1.7000"]
    head, *rows = rows_of(md)
    floor = head.index("unigram floor")
    assert head[floor - 1] == "final val/loss" and head[floor + 1] == "floor − val/loss"
    assert [r[0] for r in rows] == ["trial-001", "trial-000", "trial-003", "trial-002", "trial-004", "trial-005"]
    assert rows[0][head.index("vs group best (Holm p)")] == "best"


def test_within_a_family_floor_minus_loss_sorts_not_the_loss(tmp_path):
    """A mask rate that raises the loss but raises the floor more learned more: it is the family's best."""
    cells = [({"model.family": "bert", "objective.mask_rate": 0.15}, [3.0], 4.0, None),
             ({"model.family": "bert", "objective.mask_rate": 0.4}, [3.5], 5.0, None)]
    sweep_dir, spec, records = fake_sweep(tmp_path, cells)
    md = write_report(sweep_dir, spec, records, name="synthetic", group="g")
    assert "Best by floor − val/loss" in md and "- bert: trial-001 (objective.mask_rate=0.4): 1.5000" in md
    assert "no test with one seed per cell" in md
    assert "Note: objective.mask_rate changes which tokens are predicted" in md
    assert "Warning:" not in md  # one family: nothing to compare across


def test_without_any_comparable_measure_the_summary_says_so(tmp_path):
    """Pretraining runs with no eval.json: best per family only, and a sentence saying why there is no ranking."""
    sweep_dir, spec, records = fake_sweep(tmp_path, [(p, losses, floor, None) for p, losses, floor, _ in POS_X_FAMILY])
    md = write_report(sweep_dir, spec, records, name="synthetic", group="g")
    assert "No measure comparable across groups was recorded" in md and "ranked on" not in md
    assert "- t5: trial-004 (model.pos=learned): 5.5000" in md


def test_a_yardstick_every_trial_measured_ranks_across_families(tmp_path):
    """gpt and t5 both have bits per byte in eval.json: ranked on it across families, and the report says so."""
    sweep_dir, spec, records = fake_sweep(tmp_path, POS_X_FAMILY[2:])
    md = write_report(sweep_dir, spec, records, name="synthetic", group="g")
    assert "Across groups, ranked on bits per byte (minimize)" in md
    ranked = [line for line in md.splitlines() if line[:3] in ("1. ", "2. ", "3. ", "4. ")]
    assert ranked == ["1. gpt trial-001 (model.pos=rope): 1.5000", "2. gpt trial-000 (model.pos=learned): 1.6000",
                      "3. t5 trial-003 (model.pos=rope): 1.6500", "4. t5 trial-002 (model.pos=learned): 1.7000"]
    assert json.loads((sweep_dir / "results.json").read_text())["across"] == "bits per byte"


def test_fine_tune_sweeps_rank_across_families_on_the_task_score(tmp_path):
    """A sweep of `famlab finetune` runs: test accuracy means the same for every family, so it ranks them."""
    sweep_dir = tmp_path / "sweep-ft-20260101-000000"
    records = []
    for i, (family, acc) in enumerate([("bert", 0.61), ("gpt", 0.55), ("t5", 0.58)]):
        run = sweep_dir / f"trial-{i:03d}"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(yaml.safe_dump({"model": {"family": family}, "objective": {"name": "mlm"}}))
        scores = {"test/acc": acc, "test/f1": acc - 0.1, "test/mcc": acc - 0.2}
        (run / "results.json").write_text(json.dumps({"job": "finetune", "family": family, "mean": scores,
                                                      "seeds": {"0": scores, "1": scores}}))
        records.append({"name": run.name, "params": {"model.family": family}, "run_dir": str(run), "status": "ok"})
    spec = {"method": "grid", "metric": {"name": "test/acc", "goal": "maximize"},
            "parameters": {"model.family": {"values": ["bert", "gpt", "t5"]}}}
    md = write_report(sweep_dir, spec, records, name="ft", group="g")
    assert "Warning" not in md and "Across groups, ranked on fine-tune test/acc (maximize)" in md
    assert "1. bert trial-000: 0.6100" in md and "3. gpt trial-001: 0.5500" in md
    assert (sweep_dir / "sweep_model_family.png").is_file()  # only the family varies: it gets the figure


def test_seeds_aggregate_to_mean_and_std_with_holm_corrected_welch_marks(tmp_path):
    """Three seeds per cell: mean +- std over seeds, and Welch p-values against the family best, Holm-adjusted."""
    best, near, far = [3.00, 3.02, 2.98], [3.01, 3.05, 2.97], [3.60, 3.62, 3.58]
    cells = [({"model.family": "gpt", "model.pos": "rope"}, best, 5.0, None),
             ({"model.family": "gpt", "model.pos": "alibi"}, near, 5.0, None),
             ({"model.family": "gpt", "model.pos": "learned"}, far, 5.0, None)]
    sweep_dir, spec, records = fake_sweep(tmp_path, cells)
    assert [r["params"]["seed"] for r in records] == [0, 1, 2] * 3
    md = write_report(sweep_dir, spec, records, name="synthetic", group="g")
    assert "(grid, 9 trials, 3 seeds per cell, group g)" in md
    head, *rows = rows_of(md)
    by_pos = {r[head.index("model.pos")]: r for r in rows}
    learned = [5.0 - v for v in best], [5.0 - v for v in near], [5.0 - v for v in far]
    for pos, losses in (("rope", best), ("alibi", near), ("learned", far)):
        row = by_pos[pos]
        assert row[head.index("seeds")] == "3"
        assert row[head.index("final val/loss")] == f"{statistics.fmean(losses):.4f} ± {statistics.stdev(losses):.4f}"
    raw = [welch(learned[i], learned[0], alternative="two-sided").p for i in (1, 2)]
    adj = holm(raw)
    col = head.index("vs group best (Holm p)")
    assert by_pos["rope"][col] == "best"
    assert by_pos["alibi"][col] == f"{adj[0]:.3g}" and adj[0] >= 0.05  # within seed variation: no mark
    assert by_pos["learned"][col] == f"{adj[1]:.3g} *" and adj[1] < 0.05  # beyond seed variation


def test_sweep_seeds_replicate_every_trial_in_the_dry_run(tmp_path, capsys, monkeypatch):
    """`sweep.seeds=[0,1]` runs each trial once per seed (seeds varying fastest); with a seed parameter: exit 2."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "s.yaml"
    spec = {"method": "grid", "parameters": {"model.pos": {"values": ["rope", "alibi"]}},
            "command": ["famlab", "pretrain", "tiny", "${args_no_hyphens}"]}
    path.write_text(yaml.safe_dump(spec))
    assert cli.main(["sweep", str(path), "--dry-run", "sweep.seeds=[0,1]"]) == 0
    out = capsys.readouterr().out
    trials = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("trial-")]
    assert trials == ["model.pos=rope seed=0", "model.pos=rope seed=1", "model.pos=alibi seed=0",
                      "model.pos=alibi seed=1"]
    assert "warning" not in out  # one family: its losses compare with each other
    path.write_text(yaml.safe_dump({**spec, "parameters": {**spec["parameters"], "seed": {"values": [0, 1]}}}))
    assert cli.main(["sweep", str(path), "--dry-run", "sweep.seeds=[0,1]"]) == 2
    err = capsys.readouterr().err.strip()
    assert "sweep.seeds" in err and "seed" in err and "\n" not in err


def test_plots_numeric_parameters_as_lines_on_a_log_axis_and_categorical_ones_as_grouped_bars(tmp_path):
    """A log-distributed lr: error-bar lines on a log x axis; model.pos: grouped bars, one colour per family."""
    cells = [({"model.family": f, "model.pos": pos, "optim.lr": lr}, [3.0 + lr * 100, 3.1 + lr * 100], 5.0, None)
             for f in ("gpt", "t5") for pos in ("rope", "alibi") for lr in (1e-4, 1e-3)]
    params = {"model.family": {"values": ["gpt", "t5"]}, "model.pos": {"values": ["rope", "alibi"]},
              "optim.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-3}}
    sweep_dir, spec, records = fake_sweep(tmp_path, cells, parameters=params)
    write_report(sweep_dir, spec, records, name="synthetic", group="g")
    assert sorted(p.name for p in sweep_dir.glob("*.png")) == ["sweep_model_pos.png", "sweep_optim_lr.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in sweep_dir.glob("*.png"))
    s = summarize([load_trial(sweep_dir, r, "val/loss") for r in records], spec)

    lr = figure(**figure_args(s, spec, "optim.lr"))
    ax, learned_ax = lr.axes[:2]
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "optim.lr" and "val/loss" in ax.get_ylabel()
    assert "floor − val/loss" in learned_ax.get_ylabel() and "vs optim.lr" in lr._suptitle.get_text()
    series = [c for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer"]
    assert len(series) == 4  # gpt / t5 x model.pos rope / alibi, each with error bars over the two seeds
    assert all(len(c.lines[0].get_xdata()) == 2 for c in series)
    labels = lr.legends[0].get_texts()
    assert {t.get_text() for t in labels} >= {"gpt, model.pos=rope", "t5, model.pos=alibi"}

    pos = figure(**figure_args(s, spec, "model.pos"))
    ax = pos.axes[0]
    assert ax.get_xscale() == "linear" and [t.get_text() for t in ax.get_xticklabels()] == ["rope", "alibi"]
    bars = [c for c in ax.containers if c.__class__.__name__ == "BarContainer"]
    assert len(bars) == 8  # 2 pos values x (2 families x 2 lrs) series


def test_report_rebuilds_the_same_table_and_plots_from_run_directories(tmp_path, capsys):
    """`famlab report <sweep dir>` gives the sweep's report again, with or without the sweep's results.json."""
    sweep_dir, spec, records = fake_sweep(tmp_path, POS_X_FAMILY)
    md = write_report(sweep_dir, spec, records, name="synthetic", group="g")
    tables = json.loads((sweep_dir / "results.json").read_text())["tables"]
    for png in sweep_dir.glob("*.png"):
        png.unlink()
    assert cli.main(["report", str(sweep_dir)]) == 0
    assert capsys.readouterr().out == md == (sweep_dir / "report.md").read_text()
    assert json.loads((sweep_dir / "results.json").read_text())["tables"] == tables
    assert (sweep_dir / "sweep_model_pos.png").is_file()
    (sweep_dir / "results.json").unlink()  # a sweep stopped before its summary: trials found as trial-* dirs
    assert cli.main(["report", str(sweep_dir), f"--out={tmp_path / 'out'}"]) == 0
    assert json.loads((tmp_path / "out" / "results.json").read_text())["tables"][0]["rows"] == tables[0]["rows"]


def test_report_reads_numbers_from_the_runs_not_from_the_sweeps_summary(tmp_path):
    """Rebuilding after a run directory changed shows the new number: nothing is copied from the old summary."""
    sweep_dir, spec, records = fake_sweep(tmp_path, POS_X_FAMILY[2:4])
    write_report(sweep_dir, spec, records, name="synthetic", group="g")
    csv = sweep_dir / "trial-000" / "metrics.csv"
    csv.write_text(csv.read_text().replace(",4.5,", ",4.25,"))
    assert cli.main(["report", str(sweep_dir)]) == 0
    assert "| trial-000 | learned | gpt | 1 | ok | 4.2500 | 5.5000 | 1.2500 |" in (sweep_dir / "report.md").read_text()


@pytest.mark.parametrize(("content", "message"), [("- not a mapping\n", "is not a sweep file"),
                                                  ("method: grid\nparameters: {}\n", "holds no trials")])
def test_report_on_a_broken_sweep_directory_exits_2_with_one_line(tmp_path, capsys, content, message):
    (tmp_path / "sweep.yaml").write_text(content)
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("famlab: error:") and message in err and "\n" not in err


def test_a_pretraining_sweep_over_families_warns_before_it_runs(capsys, monkeypatch, tmp_path):
    """The bundled pos x family file ranks val/loss: its dry run already says why that is not comparable."""
    monkeypatch.chdir(tmp_path)
    bundled = Path(__file__).resolve().parents[2] / "experiments" / "configs" / "sweeps" / "pos_x_family.yaml"
    assert cli.main(["sweep", str(bundled), "--dry-run"]) == 0
    warning = next(line for line in capsys.readouterr().out.splitlines() if "warning" in line)
    assert warning.startswith("famlab sweep: warning: metric val/loss is not comparable across bert, gpt, t5")


def test_runs_never_validated_after_training_are_left_out_not_ranked(tmp_path):
    """max_steps below val_check_interval leaves only the step-0 (untrained) validation: no best, a warning."""
    sweep_dir, spec, records = fake_sweep(tmp_path, POS_X_FAMILY[2:4])
    for name in ("trial-000", "trial-001"):
        path = sweep_dir / name / "results.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "final": {}}))  # what such a run writes
        csv = sweep_dir / name / "metrics.csv"
        csv.write_text("\n".join(csv.read_text().splitlines()[:2]) + "\n")  # the step-0 validation only
    md = write_report(sweep_dir, spec, records, name="synthetic", group="g")
    assert "Warning: trial-000, trial-001 never validated after training began" in md
    assert "- gpt:" not in md and "ok, not validated after training" in md and "No trial finished with a val/loss" in md
