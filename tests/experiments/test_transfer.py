"""What pretraining bought: gains with Holm correction on known answers, the probe on toy features, grid selection."""

import numpy as np
import pytest
from famlab.experiments.analysis import transfer
from famlab.experiments.analysis.results import ArmRow, Plan
from famlab.experiments.configuration.compose import compose
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.steps.finetune import GridPoint, grid_points, select_point
from famlab.experiments.steps.probe import fit_probe
from scipy import stats as sps

from tests.experiments.record_helpers import finetune_record, probe_result


def _arm(family, pretrained, scratch):
    return ArmRow(family=family, finetune_values={"test/acc": pretrained}, scratch_values={"test/acc": scratch})


ARMS = {
    "bert": _arm("bert", [0.60, 0.61, 0.62], [0.50, 0.51, 0.52]),  # +0.10, tight: significant
    "gpt": _arm("gpt", [0.55, 0.45, 0.50], [0.49, 0.51, 0.50]),  # +0.00, noisy: not
    "t5": _arm("t5", [0.40, 0.41, 0.42], [0.45, 0.46, 0.47]),  # -0.05: pretraining hurts
}


def test_finetune_gains_match_scipy_and_holm_by_hand():
    """Differences, one-sided Welch p-values (scipy) and Holm's adjustment worked by hand."""
    gains = {g.arm: g for g in transfer.finetune_gains(ARMS)}
    raw = {a: sps.ttest_ind(r.finetune_values["test/acc"], r.scratch_values["test/acc"], equal_var=False,
                            alternative="greater").pvalue for a, r in ARMS.items()}
    for arm, g in gains.items():
        assert g.p == pytest.approx(raw[arm])
    assert gains["bert"].diff == pytest.approx(0.10) and gains["t5"].diff == pytest.approx(-0.05)
    order = sorted(raw, key=raw.get)  # Holm: k-th smallest times (3 - k), running maximum
    expected, running = {}, 0.0
    for k, arm in enumerate(order):
        running = max(running, min(1.0, (3 - k) * raw[arm]))
        expected[arm] = running
    assert {a: g.p_holm for a, g in gains.items()} == pytest.approx(expected)
    assert [a for a, g in gains.items() if g.significant] == ["bert"]
    assert gains["bert"].ci_low > 0 > gains["t5"].ci_high
    assert "gpt, t5" in transfer.verdict(list(gains.values()))


def test_a_tiny_run_below_the_cpu_presets_budget_calls_itself_smoke_scale():
    """The smoke-scale statement follows the budget, not the outcome: it leads the verdict even when all pay off."""
    cpu_steps = compose(["tiny", "cpu"], []).cfg.trainer.max_steps
    def plan(steps: int) -> Plan:
        return Plan(match="flops", tolerance=0.02, arms={}, reference_steps=steps)

    assert transfer.smoke_scale("tiny", plan(cpu_steps - 1))
    assert not transfer.smoke_scale("tiny", plan(cpu_steps))
    assert not transfer.smoke_scale("small", plan(10)) and not transfer.smoke_scale("tiny", None)
    paid = [transfer.Gain("gpt", "gpt", [0.5, 0.51, 0.52], [0.4, 0.41, 0.42], 0.1, 0.08, 0.12, 0.001, 0.001)]
    assert transfer.verdict(paid, smoke=True).startswith(transfer.SMOKE + " Pretraining pays off for every arm")
    assert transfer.verdict(paid).startswith("Pretraining pays off for every arm")


def test_gain_table_has_one_row_per_arm_and_the_verdict_column():
    table = transfer.gain_table(transfer.finetune_gains(ARMS))
    rows = table.splitlines()[2:]
    assert [r.split("|")[1].strip() for r in rows] == ["bert", "gpt", "t5"]
    assert rows[0].rstrip().endswith("| yes |") and rows[2].rstrip().endswith("| no |")
    assert "+0.100" in rows[0] and "(n=3)" in rows[0]


def test_arms_without_two_seeds_a_side_are_not_tested():
    arms = {"bert": _arm("bert", [0.6], [0.5, 0.5])}
    assert transfer.finetune_gains(arms) == []
    assert "No arm" in transfer.verdict([])


def test_probe_gains_compare_the_pretrained_body_with_random_bodies():
    """One pretrained value per pretraining seed against seeded random bodies (one-sample t-test)."""
    result = probe_result(0.40, [0.30, 0.31, 0.29, 0.30, 0.32])
    (g,) = transfer.probe_gains({"gpt": [result]}, {"gpt": "gpt"})
    ref = sps.ttest_1samp([0.30, 0.31, 0.29, 0.30, 0.32], 0.40, alternative="less")
    assert g.diff == pytest.approx(0.40 - 0.304) and g.p == pytest.approx(ref.pvalue) and g.significant


def test_gain_plot_is_written(tmp_path):
    gains = transfer.finetune_gains(ARMS)
    path = transfer.plot_gains(gains, gains[:1], tmp_path / "gain.png")
    assert path.stat().st_size > 10_000


def test_probe_separates_separable_features_and_not_shuffled_labels():
    """Linearly separable classes give ~100 %; labels shuffled independently of the features give chance."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(4, 16)) * 6

    def split(n):
        y = rng.integers(0, 4, n)
        return centers[y] + rng.normal(size=(n, 16)), y

    train, val, test = split(400), split(200), split(400)
    good = fit_probe(train, val, test, [0.1, 1.0], 4)
    assert good.test["test/acc"] > 0.97 and good.val_acc > 0.97
    shuffled = [(x, rng.permutation(y)) for x, y in (train, val, test)]
    bad = fit_probe(*shuffled, [0.1, 1.0], 4)
    assert abs(bad.test["test/acc"] - 0.25) < 0.08


def test_probe_fit_is_the_l2_logistic_optimum(monkeypatch):
    """The chosen classifier is the minimiser of the L2-penalised multinomial loss: its gradient vanishes there."""
    from sklearn import linear_model

    fitted = []

    class Recording(linear_model.LogisticRegression):
        def fit(self, x, y):
            fitted.append((self, x, y))
            return super().fit(x, y)

    monkeypatch.setattr(linear_model, "LogisticRegression", Recording)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 8)) @ rng.normal(size=(8, 8))  # correlated features, as pooled states are
    y = (x[:, :4].argmax(1) + (rng.random(300) < 0.3)) % 4
    fit_probe((x, y), (x[:50], y[:50]), (x[:50], y[:50]), [0.5], 4)
    clf, xs, ys = fitted[0]
    logits = xs @ clf.coef_.T + clf.intercept_
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    onehot = np.eye(4)[ys]
    grad_w = (p - onehot).T @ xs + clf.coef_ / 0.5  # sum of losses times C plus |W|^2 / 2, scaled by 1 / C
    grad_b = (p - onehot).sum(0)
    np.testing.assert_allclose(grad_w, 0, atol=1e-3 * len(xs))
    np.testing.assert_allclose(grad_b, 0, atol=1e-3 * len(xs))


def test_probe_refuses_a_single_class():
    x = np.zeros((10, 3))
    with pytest.raises(ConfigInputError, match="fewer than 2 classes"):
        fit_probe((x, np.zeros(10, int)), (x, np.zeros(10, int)), (x, np.zeros(10, int)), [1.0], 2)


class _FT:
    lr, head_lr, lr_grid, head_lr_grid = 1e-4, None, None, None


def test_grid_points_default_to_the_single_lr_and_cross_when_given():
    ft = _FT()
    assert grid_points(ft) == [GridPoint(1e-4, 1e-3)]
    ft.lr_grid, ft.head_lr_grid = [1e-4, 1e-3], [1e-2, 1e-3]
    assert [p.name for p in grid_points(ft)] == ["lr0.0001-head0.01", "lr0.0001-head0.001", "lr0.001-head0.01",
                                                 "lr0.001-head0.001"]


def test_selection_takes_the_best_mean_over_seeds_and_the_first_on_ties():
    a, b, c = GridPoint(1e-4, 1e-3), GridPoint(1e-3, 1e-2), GridPoint(3e-3, 3e-2)
    val = {a: {"0": 0.5, "1": 0.7}, b: {"0": 0.65, "1": 0.65}, c: {"0": 0.9, "1": 0.3}}
    assert select_point(val, "max") == b  # means 0.6, 0.65, 0.6
    tie = {a: {"0": 0.25, "1": 0.75}, b: {"0": 0.5, "1": 0.5}, c: {"0": 0.875, "1": 0.125}}
    assert select_point(tie, "max") == a  # all 0.5: the first
    assert select_point({a: {"0": 0.4}, b: {"0": 0.3}}, "min") == b


def _one_line_error(capsys, args):
    from famlab.experiments.commands import cli

    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("famlab: error: "), err
    return err


def test_empty_grids_are_refused_naming_the_key(capsys):
    err = _one_line_error(capsys, ["config", "gpt", "tiny", "finetune.lr_grid=[]"])
    assert "finetune.lr_grid=[] is an empty grid" in err
    assert "finetune.probe_c_grid" in _one_line_error(capsys, ["config", "gpt", "tiny", "finetune.probe_c_grid=[]"])
    assert "finetune.head_lr_grid" in _one_line_error(capsys, ["config", "gpt", "finetune.head_lr_grid=[0.1,-1]"])
    err = _one_line_error(capsys, ["config", "gpt", "tiny", "finetune.max_steps=20", "finetune.val_every=50"])
    assert "finetune.val_every=50 exceeds finetune.max_steps=20" in err  # else no validation selects anything


def test_probe_of_a_run_without_checkpoint_is_refused(capsys, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("model: {family: gpt}\n")
    (run / "tokenizer.json").write_text("{}")
    assert "no checkpoints/last.ckpt" in _one_line_error(capsys, ["probe", str(run)])
    assert "init=scratch has no trained body" in _one_line_error(capsys, ["probe", "gpt", "tiny", "init=scratch"])


def test_a_task_with_one_class_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = tmp_path / "one.csv"
    task.write_text("text,label\n" + "".join(f"row {i},same\n" for i in range(30)))
    err = _one_line_error(capsys, ["finetune", "gpt", "tiny", "init=scratch", f"data.task={task}",
                                   "wandb.mode=disabled"])
    assert "one.csv" in err and "class" in err


def test_grid_edges_names_arms_selected_at_the_ends_of_their_grid():
    from famlab.experiments.analysis.transfer import grid_edges

    def run(family, init, chosen, lrs=(3e-4, 1e-3, 3e-3)):
        grid = [{"lr": lr, "head_lr": 10 * lr} for lr in lrs]
        return finetune_record(family, init, grid=grid, selected={"lr": chosen})

    ft = [run("bert", "runs/x/bert-pretrain-s0", 1e-3), run("bert", "scratch", 3e-3), run("gpt", "scratch", 3e-4),
          run("t5", "scratch", 1e-3, lrs=(1e-3,))]
    assert grid_edges(ft) == ["bert scratch (body lr 0.003, the largest)", "gpt scratch (body lr 0.0003, the smallest)"]


def test_a_two_point_grid_states_each_choice_instead_of_flagging_every_arm_at_an_edge():
    """With two body lrs every selection is an end: the line says so once and gives the choice per arm; with three,
    only arms at an end are named."""
    from famlab.experiments.analysis.transfer import edge_lines

    def run(family, init, chosen, lrs):
        grid = [{"lr": lr, "head_lr": 10 * lr} for lr in lrs]
        return finetune_record(family, init, grid=grid, selected={"lr": chosen})

    two = edge_lines([run("bert", "runs/x/bert-pretrain-s0", 3e-3, (1e-3, 3e-3)), run("bert", "scratch", 1e-3,
                                                                                     (1e-3, 3e-3))])
    assert len(two) == 1 and two[0].startswith("Two-point body-lr grid: each selection is one of its two ends")
    assert two[0].endswith("selected: bert pretrained higher, bert scratch lower.")
    three = edge_lines([run("gpt", "scratch", 1e-3, (3e-4, 1e-3, 3e-3)), run("t5", "scratch", 3e-3,
                                                                            (3e-4, 1e-3, 3e-3))])
    assert three == ["Selected at an edge of the body-lr grid (a wider `finetune.lr_grid` might score higher): "
                     "t5 scratch (body lr 0.003, the largest)."]


def test_three_grid_points_put_lr_over_three_below_the_preset_lr():
    """compare.finetune_lr_points=3: every arm's grid is {lr / 3, lr, 3 lr} around its preset's finetune.lr."""
    from famlab.experiments.steps.comparison import compose_all

    _, cfgs = compose_all([], ["wandb.mode=disabled", "compare.finetune_lr_points=3"])
    grids = {arm: [round(lr, 6) for lr in c.finetune.lr_grid] for arm, c in cfgs.items()}
    assert grids == {"bert": [0.000333, 0.001, 0.003], "gpt": [0.000333, 0.001, 0.003], "t5": [0.001, 0.003, 0.009]}


def test_tiny_fine_tunes_t5_one_grid_step_higher_and_the_protocol_says_per_family():
    """tiny.yaml's by_family gives T5 the body-lr grid {3e-3, 9e-3} (the others {1e-3, 3e-3}); both arms of a family
    share one grid, and the report's protocol names each family's grid when they differ."""
    from famlab.experiments.steps.comparison import compose_all

    _, cfgs = compose_all([], ["wandb.mode=disabled"])
    grids = {arm: [round(lr, 6) for lr in c.finetune.lr_grid] for arm, c in cfgs.items()}
    assert grids == {"bert": [0.001, 0.003], "gpt": [0.001, 0.003], "t5": [0.003, 0.009]}

    def run(family, init, lrs):
        return finetune_record(family, init, grid=[{"lr": lr, "head_lr": 10 * lr} for lr in lrs],
                               sizes={"train": 10, "val": 5, "test": 5}, seeds={"0": {}},
                               config={"finetune": {"max_steps": 20, "batch_size": 4}, "data": {}})

    same = transfer.protocol_lines([run("bert", "scratch", (1e-3, 3e-3)), run("t5", "scratch", (1e-3, 3e-3))], {})
    assert any(line.startswith("Every side, pretrained or scratch, gets the same grid") for line in same)
    per_family = transfer.protocol_lines([run("bert", "x/bert-pretrain-s0", (1e-3, 3e-3)),
                                          run("bert", "scratch", (1e-3, 3e-3)), run("t5", "scratch", (3e-3, 9e-3))], {})
    assert any(line.startswith("Both arms of a family, pretrained and scratch, get the same grid of (body lr, head lr)"
                               ": bert (body 0.001, head 0.01), (body 0.003, head 0.03); t5 (body 0.003, head 0.03), "
                               "(body 0.009, head 0.09)") for line in per_family), per_family


def test_wall_split_states_worker_time_when_jobs_ran_side_by_side(tmp_path):
    """One process: shares of the wall time. Workers: shares of the time they ran jobs, which exceeds the wall."""
    import json

    phases = {"pretraining": 600.0, "evaluation": 40.0, "fine-tuning": 150.0, "probes": 10.0}
    (tmp_path / "compare.json").write_text(json.dumps({"wall_s": 1000.0, "phases": phases}))
    split = transfer.wall_split([tmp_path])
    assert split is not None
    line = split.line
    assert line.startswith("Wall time 1000 s: pretraining 600 s (60%)") and "the rest (200 s)" in line
    (tmp_path / "compare.json").write_text(json.dumps({"wall_s": 500.0, "phases": phases, "workers": 2,
                                                      "threads": 1}))
    wall = transfer.wall_split([tmp_path])
    assert wall is not None and wall.workers == 2
    assert wall.line.startswith("Wall time 500 s, with 2 worker processes running jobs side by side (1 torch "
                                "thread each")
    assert "of the 800 s they ran jobs: pretraining 600 s (75%), evaluation 40 s (5%)" in wall.line
    # a resume that only read finished jobs back ran none: no split to state (it divided by zero)
    (tmp_path / "compare.json").write_text(json.dumps({"wall_s": 8.0, "phases": dict.fromkeys(phases, 0.0),
                                                      "workers": 2, "threads": 1}))
    assert transfer.wall_split([tmp_path]) is None
