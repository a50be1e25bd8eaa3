"""The comparison's W&B dashboard: a plain spec from the finished comparison, then the real ``wandb_workspaces``
workspace view and Report built from it offline; only the W&B server (the ``save`` calls) is replaced.

The comparison is built as ``test_plan_cost`` builds one: run directories written the way famlab writes them
(``config.yaml``, ``results.json``, ``metrics.csv``, ``eval.json``), then the real report (``build_report``).
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import yaml
from famlab.experiments.analysis.report import build_report
from famlab.experiments.analysis.results import (
    BigramScores,
    EvalRecord,
    FinetuneResult,
    NormAccuracy,
    PretrainResult,
    ProbeResult,
    ProbeScore,
    ZeroShotResult,
)
from famlab.experiments.commands import cli
from famlab.experiments.configuration.compose import compose
from famlab.experiments.tracking import wandb_dashboard
from famlab.experiments.tracking.wandb_dashboard import SPEC_FILE, dashboard_spec, dashboard_step, family_color
from famlab.experiments.tracking.wandb_report import markdown_tables

# the workspace view and Report need the extra famlab[dashboard] (the [test] extra installs it); the spec does not
needs_workspaces = pytest.mark.skipif(importlib.util.find_spec("wandb_workspaces") is None,
                                      reason="wandb-workspaces is not installed (pip install -e '.[test]')")
GROUP = "compare-cmp-20260101-120000"
ARMS = {"gpt": "clm", "t5": "span"}
FT = {"gpt": ([0.70, 0.80, 0.75], [0.50, 0.55, 0.45]), "t5": ([0.65, 0.60, 0.70], [0.52, 0.48, 0.50])}
PROBE = {"gpt": (0.72, [0.50, 0.55, 0.52]), "t5": (0.66, [0.51, 0.49, 0.53])}
ZERO_SHOT = {"gpt": 0.40, "t5": 0.35}  # per_byte accuracy on the reverse dictionary (chance 0.2, bigram 0.3)


def _write(run: Path, config: dict, result: object) -> None:
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "results.json").write_text(json.dumps(result.to_json()))  # type: ignore[attr-defined]


def _pretrain(comp: Path, arm: str, objective: str) -> Path:
    run = comp / f"{arm}-pretrain-s0"
    config = {"seed": 0, "model": {"family": arm}, "objective": {"name": objective}, "size": "tiny",
              "wandb": {"group": GROUP, "project": "famlab-test", "entity": "team"}}
    final = {"val/loss": 4.0 + len(arm) / 10, "val/ppl": math.exp(4.0), "val/unigram_loss": 6.0}
    _write(run, config, PretrainResult(family=arm, objective=objective, run_dir=str(run), steps=20, num_params=1000,
                                       first={}, final=final, wall_s=1.0))
    (run / "metrics.csv").write_text("step,val/loss\n10,5.0\n20,4.2\n")
    task = "wordnet-reverse-dictionary"
    scores = ZeroShotResult(task=task, family=arm, num_items=20, chance=0.2, headline="per_byte",
                            norms={"per_byte": NormAccuracy(acc=ZERO_SHOT[arm])},
                            bigram=BigramScores(num_items=20, chance=0.2, norms={"per_byte": NormAccuracy(acc=0.3)}))
    (run / "eval.json").write_text(json.dumps(EvalRecord(zero_shot={task: scores}).to_json()))
    return run


def _finetune(comp: Path, name: str, arm: str, init: str, accs: list[float], task: Path) -> None:
    config = {"seed": 0, "model": {"family": arm}, "objective": {"name": ARMS[arm]}, "size": "tiny",
              "data": {"task": str(task)}}
    seeds = {str(s): {"test/acc": a, "test/f1": a, "test/mcc": a} for s, a in enumerate(accs)}
    _write(comp / name, config, FinetuneResult(
        family=arm, init=init, task=str(task), num_classes=2, sizes={"train": 40, "val": 10, "test": 10},
        pooling="mean", seeds=seeds, mean={}, std={}, majority={"test/acc": 0.5, "test/f1": 0.33, "test/mcc": 0.0},
        wall_s=1.0))


def _probe(comp: Path, arm: str, init: Path, task: Path) -> None:
    pretrained, random = PROBE[arm]
    body = {"test/acc": pretrained}
    _write(comp / f"{arm}-probe-s0", {"model": {"family": arm}, "objective": {"name": ARMS[arm]}}, ProbeResult(
        family=arm, init=str(init), task=str(task), num_classes=2, sizes={"train": 40, "val": 10, "test": 10},
        pooling="mean", selection="best", pretrained=ProbeScore(c=1.0, val_acc=0.0, test=body),
        random={str(s): ProbeScore(c=1.0, val_acc=0.0, test={"test/acc": a}) for s, a in enumerate(random)},
        random_mean={}, random_std={}, gain=None, wall_s=1.0))


@pytest.fixture(scope="module")
def comparison(tmp_path_factory) -> Path:
    """A finished two-arm comparison: pretraining, zero-shot, pretrained and scratch fine-tunes, probes, report."""
    root = tmp_path_factory.mktemp("workspace")
    task = root / "task.csv"
    task.write_text("text,label\n" + "".join(f"{w} thing {i},{w}\n" for i in range(30) for w in ("cat", "red")))
    comp = root / "cmp"
    comp.mkdir()
    for arm, objective in ARMS.items():
        pre = _pretrain(comp, arm, objective)
        _finetune(comp, f"{arm}-ft-s0", arm, str(pre), FT[arm][0], task)
        _finetune(comp, f"{arm}-scratch", arm, "scratch", FT[arm][1], task)
        _probe(comp, arm, pre, task)
    build_report([comp], comp)
    return comp


class Server:
    """The W&B server, the one thing replaced: ``wandb.Api()`` answers every GraphQL call by recording it and
    echoing the saved view, so the real ``save()`` of the workspace view and the Report runs up to the upload."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.app_url = "https://wandb.example"

    def execute_graphql(self, query: str, variables: dict) -> dict:
        self.calls.append(variables)
        if "ProjectInternalId" in query:  # a report's run set names its project by the server's id
            return {"project": {"id": "UHJvamVjdDox", "internalId": "1"}}
        view = {"id": f"v{len(self.calls)}", "name": variables.get("name") or "nw-view", "description": "",
                "displayName": variables.get("displayName"), "spec": json.loads(variables["spec"]),
                "project": {"name": variables["projectName"], "entityName": variables["entityName"]}}
        return {"upsertView": {"view": view, "inserted": True}}


@pytest.fixture
def server(monkeypatch) -> Server:
    import wandb

    fake = Server()

    class Api:
        default_entity = "me"

        def __init__(self, *args: object, **kwargs: object) -> None:
            self._service_api = fake

        def projects(self, entity: str) -> list:
            return []

        def create_project(self, project: str, entity: str) -> None:
            fake.calls.append({"create_project": (entity, project)})

    monkeypatch.setattr(wandb, "Api", Api)
    return fake


def _gains(comp: Path, key: str) -> dict[str, tuple[float, float, float]]:
    return {g["arm"]: (g["diff"], g["ci_low"], g["ci_high"])
            for g in json.loads((comp / "results.json").read_text())[key]}


def test_the_spec_holds_every_arm_its_gains_and_zero_shot_from_results_json(comparison):
    """Pure data: one line per arm in the comparison's group on budget/flops, each gain and interval exactly as
    results.json holds it, zero-shot per arm with chance and the bigram floor, one colour per family."""
    spec = dashboard_spec(comparison)
    assert (spec.group, spec.project, spec.entity, spec.x_axis) == (GROUP, "famlab-test", "team", "budget/flops")
    assert [(a.name, a.family, a.objective) for a in spec.arms] == [(a, a, o) for a, o in ARMS.items()]
    for kind, key in (("finetune_gains", "gains"), ("probe_gains", "probe_gains")):
        bars = {g.arm: (g.diff, g.ci_low, g.ci_high) for g in getattr(spec, kind)}
        assert bars == _gains(comparison, key) and set(bars) == set(ARMS)
    (zs,) = spec.zero_shot
    assert zs.accuracy == pytest.approx(ZERO_SHOT) and (zs.chance, zs.bigram) == pytest.approx((0.2, 0.3))
    assert spec.palette == {"gpt": family_color("gpt"), "t5": family_color("t5")}
    assert len(set(spec.palette.values())) == 2


def test_the_spec_names_the_report_runs_gain_tables(comparison):
    """The gain panels read the report run's tables: the keys log_report_run gives the report.md tables whose
    rows are results.json's gain tables, one row per arm."""
    spec = dashboard_spec(comparison)
    results = json.loads((comparison / "results.json").read_text())
    logged = {f"tables/{wandb_dashboard.table_slug(t)}": (h, r) for t, h, r in
              markdown_tables((comparison / "report.md").read_text())}
    for kind, table in (("finetune_gains", "gains"), ("probe_gains", "probe")):
        header, rows = logged[spec.tables[kind]]
        assert (header, rows) == tuple(markdown_tables(results["tables"][table])[0][1:])
        assert [r[0] for r in rows] == list(ARMS)


@needs_workspaces
def test_the_workspace_and_report_show_every_arm_with_one_colour_per_family(comparison):
    """The real workspace view and Report from wandb-dashboard.json: the loss panel draws val/loss against
    budget/flops for the group's runs grouped by family, every gain bar reads the report run's table of one row per
    arm and every interval is results.json's, the zero-shot bars and the runs are coloured by family alike."""
    wandb_dashboard.write_spec(comparison)
    spec = wandb_dashboard.read_spec(comparison)
    workspace, report = wandb_dashboard.build_workspace(spec), wandb_dashboard.build_report(spec)
    assert (workspace.entity, workspace.project, report.entity) == ("team", "famlab-test", "team")
    panels = {s.name: s.panels for s in workspace.sections}
    (loss,) = panels["Pretraining"]
    assert (loss.x, loss.y) == ("budget/flops", ["val/loss"])
    (group_filter,) = workspace._to_model().spec.section.run_sets[0].filters["filters"]  # as it is uploaded
    assert (group_filter["key"]["name"], group_filter["op"], group_filter["value"]) == ("group", "=", GROUP)
    assert [g.name for g in workspace.runset_settings.groupby] == ["model.family"]
    palette = {f: family_color(f) for f in ARMS}
    assert workspace.runset_settings.group_colors == palette
    charts = [p for p in panels["What pretraining bought"] if type(p).__name__ == "CustomChart"]
    assert [c.query["summaryTable"]["tableKey"] for c in charts] == [spec.tables[k]
                                                                     for k in ("finetune_gains", "probe_gains")]
    (bars,) = panels["Zero-shot"]
    task = "wordnet-reverse-dictionary"
    assert {m: bars.line_colors[m] for m in bars.metrics if m.rsplit("/", 1)[1] in ARMS} == {
        f"zero_shot/{task}/{arm}": palette[arm] for arm in ARMS}
    assert {f"zero_shot/{task}/chance", f"zero_shot/{task}/bigram"} <= set(bars.metrics)
    grids = [b for b in report.blocks if type(b).__name__ == "PanelGrid"]
    assert len(grids) == 3
    for grid in grids:
        assert {k.keys[0].value: c for k, c in grid.custom_run_colors.items()} == palette
        assert grid.runsets[0].filters == f"Group = '{GROUP}'"
    md = "\n".join(b.text for b in report.blocks if type(b).__name__ == "MarkdownBlock")
    for key in ("gains", "probe_gains"):
        for arm, (diff, low, high) in _gains(comparison, key).items():
            assert f"- {arm} ({arm}): {diff:+.4g} [{low:+.4g}, {high:+.4g}]" in md


@needs_workspaces
def test_the_command_saves_the_view_and_the_report(comparison, server, capsys):
    """``famlab dashboard <dir>`` uploads one workspace view and one Report to the spec's entity and project,
    their specs the ones built offline; entity= and project= on the command line win."""
    assert cli.main(["dashboard", str(comparison)]) == 0
    out = capsys.readouterr().out
    assert "W&B workspace view: https://wandb.example/team/famlab-test?nw=" in out and "W&B report: " in out
    views = [c for c in server.calls if "spec" in c]
    assert [(c["entityName"], c["projectName"], c["type"]) for c in views] == [
        ("team", "famlab-test", "project-view"), ("team", "famlab-test", "runs")]
    for view in views:
        assert GROUP in view["spec"] and "budget/flops" in view["spec"]
    server.calls.clear()
    assert cli.main(["dashboard", str(comparison), "entity=other", "project=elsewhere"]) == 0
    assert [(c["entityName"], c["projectName"]) for c in server.calls if "spec" in c] == [("other", "elsewhere")] * 2


def test_a_comparison_offline_writes_the_spec_and_names_the_command(comparison, server, capsys):
    """The comparison's last step, offline: wandb-dashboard.json beside the runs (the spec :func:`dashboard_spec`
    returns), the command that creates the dashboard after ``wandb sync``, and nothing sent to a server; disabled:
    nothing at all."""
    (comparison / SPEC_FILE).unlink(missing_ok=True)
    cfg = compose([], ["wandb.mode=offline"]).cfg
    assert dashboard_step(cfg.wandb, comparison) == comparison / SPEC_FILE
    assert json.loads((comparison / SPEC_FILE).read_text()) == dashboard_spec(comparison).to_json()
    assert f"famlab dashboard {comparison}" in capsys.readouterr().out and server.calls == []
    (comparison / SPEC_FILE).unlink()
    assert dashboard_step(compose([], ["wandb.mode=disabled"]).cfg.wandb, comparison) is None
    assert not (comparison / SPEC_FILE).exists()


@needs_workspaces
def test_a_comparison_online_creates_the_dashboard_with_its_entity_and_project(comparison, server):
    """Online, the same step saves the view and the Report, to the comparison's wandb.entity / wandb.project."""
    cfg = compose([], ["wandb.mode=online", "wandb.entity=lab", "wandb.project=cmp-project"]).cfg
    assert dashboard_step(cfg.wandb, comparison) == comparison / SPEC_FILE
    assert [(c["entityName"], c["projectName"]) for c in server.calls if "spec" in c] == [("lab", "cmp-project")] * 2


@needs_workspaces
def test_a_sweep_draws_one_line_per_trial_coloured_by_its_family(tmp_path):
    """A ``famlab sweep`` directory: every trial a loss-vs-budget line (the runs grouped by their name), each the
    colour of its family; no gain or zero-shot panel (a sweep has none)."""
    sweep = tmp_path / "sweep-families-20260101-000000"
    sweep.mkdir()
    (sweep / "sweep.yaml").write_text("method: grid\n")
    trials = {"trial-000": "gpt", "trial-001": "bert", "trial-002": "gpt"}
    for name, family in trials.items():
        (sweep / name).mkdir()
        config = {"name": name, "model": {"family": family}, "wandb": {"group": "sw-1", "project": "famlab-test"}}
        (sweep / name / "config.yaml").write_text(yaml.safe_dump(config))
    records = [{"name": n, "params": {"model.family": f}, "run_dir": f"x/{n}", "status": "ok"}
               for n, f in trials.items()]
    (sweep / "results.json").write_text(json.dumps({"group": "sw-1", "trials": records}))
    spec = dashboard_spec(sweep)
    assert (spec.group, spec.group_by, spec.x_axis) == ("sw-1", ["name"], "budget/flops")
    assert spec.group_colors == {n: family_color(f) for n, f in trials.items()}
    workspace = wandb_dashboard.build_workspace(spec)
    assert [s.name for s in workspace.sections] == ["Pretraining"]
    assert [g.name for g in workspace.runset_settings.groupby] == ["name"]
    assert workspace.runset_settings.group_colors == spec.group_colors


def test_without_wandb_workspaces_the_command_says_how_to_install_it(comparison, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports.v2", None)
    assert cli.main(["dashboard", str(comparison)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'famlab[dashboard]'" in err[0]


def test_a_directory_without_a_comparison_is_refused_naming_the_file(tmp_path, capsys):
    assert cli.main(["dashboard", str(tmp_path)]) == 2
    assert "results.json" in capsys.readouterr().err
