"""`famlab report` rebuilds the comparison report from stored run directories (a real tiny comparison)."""

import json
import math
import statistics

import pytest
from famlab.experiments.analysis.report import significance
from famlab.experiments.analysis.results import ArmRow, PretrainRow, RunRecord
from famlab.experiments.commands import cli
from test_compare import compare_in_tmp

from tests.experiments.record_helpers import finetune_record, pretrain_record

OUTPUTS = ("report.md", "results.json", "pretrain_curves.png", "finetune_scores.png", "reference.json")


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """One tiny comparison of gpt and bert with parameter counts matched."""
    return compare_in_tmp(tmp_path_factory, "report", "compare.families=[gpt,bert]", "compare.match=params")


@pytest.mark.slow
def test_params_budget_is_matched_within_two_percent_and_stated(compared):
    plan = json.loads((compared / "plan.json").read_text())
    counts = [p["non_embedding_params"] for p in plan["families"].values()]
    assert max(counts) / min(counts) - 1 <= 0.02 and plan["achieved_spread"] <= 0.02
    report = (compared / "report.md").read_text()
    assert "non-embedding parameters" in report and "Scale: `tiny`" in report


@pytest.mark.slow
def test_report_is_rebuilt_from_the_run_directories(compared, capsys):
    """Delete every report output; `famlab report <dir>` writes them again with the runs' own numbers."""
    before = json.loads((compared / "results.json").read_text())
    for name in OUTPUTS:
        (compared / name).unlink()
    assert cli.main(["report", str(compared)]) == 0
    assert "| gpt pretrained |" in capsys.readouterr().out
    after = json.loads((compared / "results.json").read_text())
    assert after["tables"] == before["tables"]  # TF-IDF reference recomputed identically
    for family in ("gpt", "bert"):
        pre = json.loads((compared / f"{family}-pretrain-s0" / "results.json").read_text())
        ft = json.loads((compared / f"{family}-ft-s0" / "results.json").read_text())
        row = after["families"][family]
        assert row["val_loss"] == pytest.approx(pre["final"]["val/loss"])
        assert row["unigram_loss"] == pytest.approx(pre["final"]["val/unigram_loss"])
        accs = [s["test/acc"] for s in ft["seeds"].values()]
        assert row["finetune"]["test/acc"] == pytest.approx([statistics.fmean(accs), statistics.stdev(accs), 2])
    assert "pll_bits_per_byte" in after["families"]["bert"] and "bits_per_byte" in after["families"]["gpt"]
    for family in ("gpt", "bert"):  # length extrapolation from each pretraining run, in the report row
        pre = json.loads((compared / f"{family}-pretrain-s0" / "results.json").read_text())
        assert pre["length_extrapolation"]["1x"]["loss"] == pytest.approx(pre["final"]["val/loss"], rel=0.05)
        for k in ("2x", "4x"):
            point = pre["length_extrapolation"][k]
            assert (point["loss"] is None) == (point["reason"] is not None)
            assert after["families"][family][f"loss_{k}"] == point["loss"]
    assert after["reference"]["majority"]["test/acc"] > 0 and after["reference"]["tfidf"]["test/acc"] > 0
    for png in ("pretrain_curves.png", "finetune_scores.png"):
        data = (compared / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


@pytest.mark.slow
def test_report_from_single_run_directories_into_another_folder(compared, tmp_path):
    runs = [compared / "gpt-pretrain-s0", compared / "gpt-ft-s0", compared / "bert-scratch"]
    assert cli.main(["report", *map(str, runs), f"--out={tmp_path / 'out'}"]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(results["families"]) == {"gpt", "bert"} and results["plan"] is None
    assert "scratch" in results["families"]["bert"] and "finetune" in results["families"]["gpt"]


def test_report_on_a_directory_without_runs_exits_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "no run directories" in capsys.readouterr().err


def test_welch_test_matches_the_formula():
    """p-value of Welch's t-test equals the t / Welch-Satterthwaite computation by hand."""
    from scipy import stats

    a, b = [0.50, 0.52, 0.55], [0.40, 0.47, 0.41]
    fams = {"gpt": ArmRow(family="gpt", finetune_values={"test/acc": a}),
            "t5": ArmRow(family="t5", finetune_values={"test/acc": b})}
    (row,) = significance(fams)
    va, vb = statistics.variance(a) / 3, statistics.variance(b) / 3
    t = (statistics.fmean(a) - statistics.fmean(b)) / math.sqrt(va + vb)
    dof = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    assert row["p"] == pytest.approx(2 * stats.t.sf(abs(t), dof))
    assert row["verdict"].startswith("exceeds") == (row["p"] < 0.05)


def _run(family: str, job: str, objective: str, init: str | None = None) -> RunRecord:
    config = {"objective": {"name": objective}}
    if job == "pretrain":
        return pretrain_record(family, config=config)
    return finetune_record(family, init or "", config=config)


def test_runs_are_labelled_with_their_arm_with_or_without_a_plan():
    from famlab.experiments.analysis.report import label_arms
    from famlab.experiments.analysis.results import ArmBudget, Plan

    runs = [_run("gpt", "pretrain", "span"), _run("gpt", "finetune", "span", "runs/x"),
            _run("gpt", "pretrain", "prefix_lm"), _run("t5", "pretrain", "span"),
            _run("gpt", "finetune", "clm", "scratch")]
    label_arms(runs, None)  # no plan: <family>-<objective> only where a family has several objectives
    assert [r.arm for r in runs] == ["gpt-span", "gpt-span", "gpt-prefix_lm", "t5", None]
    def arm(family: str | None = None, objective: str | None = None) -> ArmBudget:
        return ArmBudget(family=family, objective=objective, steps=10, flops_per_step=1, corpus_tokens_per_step=8,
                         flops=10, corpus_tokens=80, params=100, non_embedding_params=50, batch_shape="B=1 S=8",
                         dim=8, ffn_dim=32, num_layers=1)

    plan = Plan(match="flops", tolerance=0.02, arms={"g-s": arm("gpt", "span"), "g-p": arm("gpt", "prefix_lm"),
                                                     "t5": arm()})
    label_arms(runs, plan)  # the plan's names win; a plan from before arms is keyed by family only
    assert [r.arm for r in runs] == ["g-s", "g-s", "g-p", "t5", None]


def test_finetune_table_has_one_row_per_arm_and_each_scratch_baseline_once():
    from famlab.experiments.analysis.report import tables

    def stat(x: float) -> dict:
        return {m: (x, 0.0, 1) for m in ("test/acc", "test/f1", "test/mcc")}

    arms = {"gpt-span": ArmRow(family="gpt", finetune=stat(0.4), scratch=stat(0.3)),
            "gpt-prefix_lm": ArmRow(family="gpt", finetune=stat(0.5), scratch=stat(0.3)),
            "bert-mlm": ArmRow(family="bert", finetune=stat(0.6)),
            "t5": ArmRow(family="t5", objective=None, scratch=stat(0.2))}
    _, ft = tables(arms, None, None)
    names = [line.split("|")[1].strip() for line in ft.splitlines()[2:]]
    assert names == ["gpt-span pretrained", "gpt-prefix_lm pretrained", "gpt scratch", "bert-mlm pretrained",
                     "t5 scratch"]
    assert "| gpt-prefix_lm pretrained | 0.500 ± 0.000 (n=1) |" in ft


def test_a_results_file_missing_a_required_key_is_one_line_naming_it(tmp_path, capsys):
    run = tmp_path / "cmp" / "gpt-ft-s0"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "results.json").write_text(json.dumps({"job": "finetune", "family": "gpt", "init": "scratch"}))
    assert cli.main(["report", str(tmp_path / "cmp"), f"--out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("famlab: error: ") and str(run / "results.json") in err[0], err
    assert "majority" in err[0] and not (tmp_path / "out").exists()


def test_the_header_names_settings_that_differ_from_a_family_reference():
    """A size preset's departures (BERT's rotary positions at tiny) are stated; a faithful family is not named."""
    from famlab.experiments.analysis.report import architecture_departures
    from famlab.experiments.configuration.compose import compose, family_settings, to_plain

    tiny_bert = {"model": to_plain(compose(["bert", "tiny"], []).cfg)["model"]}  # as config.yaml holds it
    faithful_gpt = {"model": family_settings("gpt")}
    runs = [pretrain_record("bert", config=tiny_bert), pretrain_record("gpt", config=faithful_gpt),
            finetune_record("gpt", "scratch", config={"model": {"pos": "rope"}})]  # fine-tunes are not read
    line = architecture_departures(runs)
    assert "bert pos=rope (reference learned)" in line and "dropout=0.0 (reference 0.1)" in line
    assert "gpt" not in line
    assert architecture_departures(runs[1:]) == ""


def test_bits_per_byte_rule_follows_the_objective_not_the_family_name():
    """BERT: PLL; a span-corruption model (T5, or GPT trained with span): the text as one span; else causal."""
    from famlab.experiments.analysis.report import bpb_rule

    assert [bpb_rule(f, o) for f, o in (("bert", "mlm"), ("t5", "span"), ("gpt", "span"), ("gpt", "clm"),
                                        ("t5", "prefix_lm"), ("t5", "ul2"))] == [
        "PLL", "one span", "one span", "causal", "causal", "causal"]


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions save, kept open: the test reads what they draw (axes, labels, data)."""
    from matplotlib.figure import Figure

    figures: list[Figure] = []
    save = Figure.savefig

    def keep(fig: Figure, *args: object, **kwargs: object) -> None:
        figures.append(fig)
        save(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def _pretrain_row(unigram: float) -> PretrainRow:
    return PretrainRow(pretrain_seeds=2, params=1, non_embedding_params=1, steps=3, corpus_tokens=96, flops=3e6,
                       val_loss=4.0, val_ppl=54.6, unigram_loss=unigram, lr=1e-3, tokens_per_s=1.0, wall_s=1.0,
                       loss_2x=None, loss_4x=None)


def test_pretraining_plot_draws_each_arms_curves_against_tokens_and_flops(tmp_path, drawn):
    """A tokens panel and a FLOPs panel per arm; per seed a training curve and a validation curve with the
    logged numbers (validation at x = step x budget per step), and the arm's unigram floor."""
    from famlab.experiments.analysis.report import plot_pretraining

    runs = []
    for family, seed in (("gpt", 0), ("gpt", 1), ("t5", 0)):
        run = pretrain_record(family, path=f"runs/x/{family}-s{seed}", config={"seed": seed})
        run.metrics = [{"step": 0.0, "val/loss": 7.0 + seed}]
        run.metrics += [{"step": float(s), "train/loss": 6.0 - s - seed / 10, "budget/tokens": 32.0 * (s + 1),
                         "budget/flops": 1e6 * (s + 1)} for s in range(3)]
        run.metrics += [{"step": 2.0, "val/loss": 3.5 + seed}]
        runs.append(run)
    families = {"gpt": ArmRow(family="gpt", objective="clm", pretrain=_pretrain_row(5.0)),
                "t5": ArmRow(family="t5", objective="span", pretrain=_pretrain_row(float("nan")))}
    assert plot_pretraining(runs, families, tmp_path / "p.png") == tmp_path / "p.png"
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = drawn
    axes = fig.axes
    assert len(axes) == 4  # rows tokens / FLOPs, a column per arm
    assert [ax.get_title() for ax in axes] == ["gpt (clm): loss vs tokens", "t5 (span): loss vs tokens",
                                               "gpt (clm): loss vs FLOPs", "t5 (span): loss vs FLOPs"]
    assert [ax.get_xlabel() for ax in axes] == ["tokens read by the network"] * 2 + ["training FLOPs"] * 2
    assert {ax.get_ylabel() for ax in axes} == {"loss (nats per label token)"}
    gpt_tokens, t5_tokens, gpt_flops = axes[0], axes[1], axes[2]
    assert gpt_tokens.get_legend_handles_labels()[1] == [
        "train loss", "val loss (seed 0)", "val loss (seed 1)", "unigram floor 5.00"]  # one train entry for both
    train0, val0, train1, val1, floor = gpt_tokens.get_lines()
    assert list(train0.get_xdata()) == [32.0, 64.0, 96.0] and list(train0.get_ydata()) == [6.0, 5.0, 4.0]
    assert list(train1.get_ydata()) == [5.9, 4.9, 3.9]
    assert list(val0.get_xdata()) == [0.0, 64.0] and list(val0.get_ydata()) == [7.0, 3.5]
    assert list(val1.get_ydata()) == [8.0, 4.5] and list(floor.get_ydata()) == [5.0, 5.0]
    assert list(gpt_flops.get_lines()[0].get_xdata()) == [1e6, 2e6, 3e6]
    assert len(t5_tokens.get_lines()) == 2  # one seed, and no floor where it is NaN
    assert fig._suptitle.get_text().startswith("Pretraining loss per family")


def test_finetune_plot_draws_a_bar_per_score_and_the_reference_lines(tmp_path, drawn):
    """One panel per metric; a bar of each arm's mean with its std as the error bar, the scratch bar once per
    family, and the majority / TF-IDF references as horizontal lines at their scores."""
    from famlab.experiments.analysis.report import METRICS, plot_finetune

    def stat(x: float) -> dict:
        return {m: (x, 0.05, 3) for m in METRICS}

    families = {"gpt-clm": ArmRow(family="gpt", objective="clm", finetune=stat(0.6), scratch=stat(0.3)),
                "gpt-span": ArmRow(family="gpt", objective="span", finetune=stat(0.7), scratch=stat(0.3)),
                "bert": ArmRow(family="bert", objective="mlm", finetune=stat(0.8))}
    majority = {m: 0.25 for m in METRICS}
    tfidf = {m: 0.5 for m in METRICS}
    plot_finetune(families, majority, tfidf, tmp_path / "f.png")
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (fig,) = drawn
    assert [ax.get_title() for ax in fig.axes] == [f"Fine-tuning {m}, mean ± std over seeds" for m in METRICS]
    assert [ax.get_ylabel() for ax in fig.axes][-1] == "test/mcc (-1 to 1)"
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == list(families)
        heights = [round(p.get_height(), 6) for p in ax.patches]
        assert heights == [0.6, 0.3, 0.7, 0.8]  # gpt's scratch bar once, bert has none
        assert [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() in (":", "--")] == [0.25, 0.5]
        labels = ax.get_legend_handles_labels()[1]
        assert labels == ["majority class 0.250", "TF-IDF + LR 0.500", "pretrained", "scratch"]
