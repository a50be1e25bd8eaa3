"""A comparison's W&B dashboard: a saved workspace view and a Report, built from the finished comparison.

Two halves (docs/config.md, W&B):

- :func:`dashboard_spec` reads the comparison directory (``results.json``, the pretraining runs' ``config.yaml``)
  and returns a plain :class:`DashboardSpec`: the loss-vs-budget lines (one per arm, in the comparison's W&B
  group), the fine-tuned and probe gains with their intervals (``results.json``'s ``gains`` / ``probe_gains``),
  zero-shot accuracy per arm with chance and the bigram floor, and one colour per family (:func:`family_color`).
  It needs nothing but the standard library and is written beside the runs as ``wandb-dashboard.json``.
- :func:`build_workspace` / :func:`build_report` turn a spec into ``wandb_workspaces`` objects (the optional extra
  ``famlab[dashboard]``); :func:`create_dashboard` saves both to the W&B server.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import zlib
from pathlib import Path
from typing import Any

import yaml
from famlab.experiments.configuration.config import ConfigInputError, WandbConfig
from famlab.experiments.configuration.run_files import CONFIG, RESULTS, CompareFiles, RunFiles
from famlab.experiments.tracking.wandb_guard import wandb_mode
from famlab.experiments.tracking.wandb_report import markdown_tables, table_slug

SPEC_FILE = "wandb-dashboard.json"
INSTALL = "the W&B dashboard needs wandb-workspaces: pip install 'famlab[dashboard]' (or wandb-workspaces>=0.4)"
# one colour per family, everywhere (the bundled families first; a plugin's family gets a stable one by name)
PALETTE = {"gpt": "#1f77b4", "bert": "#d62728", "t5": "#2ca02c"}
EXTRA = ("#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
REFERENCE_COLORS = {"chance": "#bbbbbb", "bigram": "#555555"}


def family_color(family: str) -> str:
    """The family's colour: fixed for the bundled families, a stable pick (by the name's CRC) for any other."""
    return PALETTE.get(family) or EXTRA[zlib.crc32(family.encode()) % len(EXTRA)]


@dataclasses.dataclass
class Arm:
    """One arm of the comparison: its family, objective and colour."""

    name: str
    family: str
    objective: str | None
    color: str


@dataclasses.dataclass
class GainBar:
    """One arm's gain (pretrained - baseline) with its 95 % interval, as ``results.json`` holds it."""

    arm: str
    family: str
    diff: float
    ci_low: float
    ci_high: float
    color: str


@dataclasses.dataclass
class ZeroShotTask:
    """One zero-shot task: each arm's accuracy, chance and the add-k bigram floor (None where not measured)."""

    task: str
    accuracy: dict[str, float]
    chance: float | None
    bigram: float | None


@dataclasses.dataclass
class DashboardSpec:
    """Everything the dashboard shows, as plain data (JSON: :meth:`to_json`, :meth:`from_json`)."""

    name: str
    entity: str | None
    project: str
    group: str
    x_axis: str  # budget/flops, or budget/tokens with compare.match=tokens
    arms: list[Arm]
    finetune_gains: list[GainBar]
    probe_gains: list[GainBar]
    zero_shot: list[ZeroShotTask]
    tables: dict[str, str]  # which W&B table of the report run holds each: {"finetune_gains": "tables/..."}
    # the runs are grouped by these config keys (a comparison: family, and objective where a family has several
    # arms; a sweep: the trial's name), and each first-level group gets this colour (its family's)
    group_by: list[str] = dataclasses.field(default_factory=lambda: ["model.family"])
    group_colors: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def palette(self) -> dict[str, str]:
        """{family: colour} of the arms."""
        return {a.family: a.color for a in self.arms}

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DashboardSpec:
        return cls(**{**data, "arms": [Arm(**a) for a in data["arms"]],
                      "finetune_gains": [GainBar(**g) for g in data["finetune_gains"]],
                      "probe_gains": [GainBar(**g) for g in data["probe_gains"]],
                      "zero_shot": [ZeroShotTask(**z) for z in data["zero_shot"]]})


def _results(comp_dir: Path) -> dict[str, Any]:
    path = CompareFiles(comp_dir).results_file
    if not path.is_file():
        raise ConfigInputError(f"famlab dashboard: {path} not found (a finished comparison writes it)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data.get("families"), dict):
        raise ConfigInputError(f"famlab dashboard: {path} has no 'families' (not a comparison's {RESULTS})")
    return data


def _config(path: Path) -> dict[str, Any]:
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else {}


def _wandb_settings(comp_dir: Path, pattern: str = f"*-pretrain-*/{CONFIG}") -> dict[str, Any]:
    """The runs' ``wandb`` settings (group, project, entity), from the first run's ``config.yaml`` that has them."""
    for path in sorted(comp_dir.glob(pattern)):
        section = _config(path).get("wandb") or {}
        if section.get("group"):
            return section
    raise ConfigInputError(f"famlab dashboard: no run with a wandb.group under {comp_dir}")


def _gains(rows: list[dict[str, Any]], arms: dict[str, Arm]) -> list[GainBar]:
    return [GainBar(arm=g["arm"], family=g["family"], diff=g["diff"], ci_low=g["ci_low"], ci_high=g["ci_high"],
                    color=family_color(g["family"])) for g in rows if g["arm"] in arms]


def _zero_shot(rows: dict[str, dict[str, float]], arms: dict[str, Arm]) -> list[ZeroShotTask]:
    tasks = [t for t in next((r for a, r in rows.items() if a in arms), {}) if t != "seeds" and "/" not in t]
    return [ZeroShotTask(task=t, accuracy={a: r[t] for a, r in rows.items() if a in arms and t in r},
                         chance=rows.get("chance", {}).get(t), bigram=rows.get("bigram", {}).get(t)) for t in tasks]


def _table_keys(comp_dir: Path, tables: dict[str, str]) -> dict[str, str]:
    """The report run's W&B key of each of ``results.json``'s tables (the key is the heading above it in
    ``report.md``, as :func:`famlab.experiments.tracking.wandb_report.log_report_run` names them)."""
    report = CompareFiles(comp_dir).report_file
    logged = markdown_tables(report.read_text(encoding="utf-8")) if report.is_file() else []
    out: dict[str, str] = {}
    for name, md in tables.items():
        mine = markdown_tables(md) if isinstance(md, str) else []
        match = [t for t, h, r in logged if mine and (h, r) == mine[0][1:]]
        if match:
            out[name] = f"tables/{table_slug(match[0])}"
    return out


def dashboard_spec(comp_dir: Path) -> DashboardSpec:
    """The dashboard of the finished comparison (or ``famlab sweep`` directory) in ``comp_dir`` (raises
    ConfigInputError naming what is missing)."""
    if (comp_dir / "sweep.yaml").is_file():
        return sweep_spec(comp_dir)
    data = _results(comp_dir)
    settings = _wandb_settings(comp_dir)
    arms = {a: Arm(name=a, family=r["family"], objective=r.get("objective"), color=family_color(r["family"]))
            for a, r in data["families"].items()}
    match = (data.get("plan") or {}).get("match")
    keys = _table_keys(comp_dir, data.get("tables") or {})
    return DashboardSpec(
        name=comp_dir.resolve().name, entity=settings.get("entity"), project=settings.get("project") or "famlab",
        group=str(settings["group"]), x_axis="budget/tokens" if match == "tokens" else "budget/flops",
        arms=list(arms.values()), finetune_gains=_gains(data.get("gains") or [], arms),
        probe_gains=_gains(data.get("probe_gains") or [], arms),
        zero_shot=_zero_shot(data.get("zero_shot") or {}, arms),
        tables={k: v for k, v in {"finetune_gains": keys.get("gains"), "probe_gains": keys.get("probe")}.items() if v},
        group_by=["model.family"] + (["objective.name"] if len({a.family for a in arms.values()}) < len(arms) else []),
        group_colors={a.family: a.color for a in arms.values()})


def sweep_spec(sweep_dir: Path) -> DashboardSpec:
    """A sweep's dashboard: one loss-vs-budget line per trial (its run directory), coloured by the trial's family;
    a sweep has no gains or zero-shot table of its own."""
    path = CompareFiles(sweep_dir).results_file
    if not path.is_file():
        raise ConfigInputError(f"famlab dashboard: {path} not found (a finished sweep writes it)")
    data = json.loads(path.read_text(encoding="utf-8"))
    trials = [t["name"] for t in data.get("trials") or [] if RunFiles(sweep_dir / t["name"]).config_file.is_file()]
    if not trials:
        raise ConfigInputError(f"famlab dashboard: no trial run directory with a {CONFIG} under {sweep_dir}")
    configs = {t: _config(RunFiles(sweep_dir / t).config_file) for t in trials}
    settings = _wandb_settings(sweep_dir, f"*/{CONFIG}")
    arms = [Arm(name=t, family=str(c["model"]["family"]), objective=(c.get("objective") or {}).get("name"),
                color=family_color(str(c["model"]["family"]))) for t, c in configs.items()]
    tokens = any((c.get("compare") or {}).get("match") == "tokens" for c in configs.values())
    return DashboardSpec(
        name=sweep_dir.resolve().name, entity=settings.get("entity"), project=settings.get("project") or "famlab",
        group=str(data.get("group") or settings["group"]), x_axis="budget/tokens" if tokens else "budget/flops",
        arms=arms, finetune_gains=[], probe_gains=[], zero_shot=[], tables={}, group_by=["name"],
        group_colors={a.name: a.color for a in arms})


def write_spec(comp_dir: Path) -> Path:
    """Write :func:`dashboard_spec` to ``<comp_dir>/wandb-dashboard.json``; returns its path."""
    path = comp_dir / SPEC_FILE
    path.write_text(json.dumps(dashboard_spec(comp_dir).to_json(), indent=2) + "\n", encoding="utf-8")
    return path


def read_spec(comp_dir: Path) -> DashboardSpec:
    """The spec written beside the runs, or (none there) the one built from the comparison now."""
    path = comp_dir / SPEC_FILE
    if path.is_file():
        return DashboardSpec.from_json(json.loads(path.read_text(encoding="utf-8")))
    return dashboard_spec(comp_dir)


def import_workspaces() -> tuple[Any, Any]:
    """``(wandb_workspaces.workspaces, wandb_workspaces.reports.v2)``; ImportError with :data:`INSTALL` without them."""
    try:
        import wandb_workspaces.reports.v2 as wr
        import wandb_workspaces.workspaces as ws
    except ImportError as e:
        raise ImportError(INSTALL) from e
    return ws, wr


def _panels(spec: DashboardSpec, wr: Any) -> dict[str, list[Any]]:
    """The panels by section: the loss-vs-budget lines, the gain bars (+ their intervals' table), zero-shot bars."""
    budget = spec.x_axis.split("/")[1]
    loss = [wr.LinePlot(title=f"validation loss against training {'FLOPs' if budget == 'flops' else budget}",
                        x=spec.x_axis, y=["val/loss"], groupby_aggfunc="mean", groupby_rangefunc="minmax",
                        title_x=spec.x_axis, title_y="val/loss", legend_template="${group}")]
    gains: list[Any] = []
    for kind, title in (("finetune_gains", "fine-tuned gain over scratch"), ("probe_gains", "probe gain over random")):
        if kind in spec.tables:
            chart = wr.CustomChart.from_table(spec.tables[kind], chart_fields={"label": "arm", "value": "gain"},
                                              chart_strings={"title": f"{title} (95 % CI in the table beside)"})
            chart.chart_name = "wandb/bar/v0"
            gains += [chart, wr.WeavePanelSummaryTable(table_name=spec.tables[kind])]
    zero_shot = []
    for task in spec.zero_shot:
        metrics, colors = _zero_shot_bars(spec, task)
        zero_shot.append(wr.BarPlot(title=f"zero-shot {task.task}: accuracy, chance and the bigram floor",
                                    metrics=metrics, orientation="v", line_colors=colors))
    return {"Pretraining": loss, "What pretraining bought": gains, "Zero-shot": zero_shot}


def _zero_shot_bars(spec: DashboardSpec, task: ZeroShotTask) -> tuple[list[str], dict[str, str]]:
    """The report run's summary keys of one task (``zero_shot/<task>/<arm>``, chance, bigram) and their colours."""
    family = {a.name: a.family for a in spec.arms}
    colors = {f"zero_shot/{task.task}/{arm}": family_color(family[arm]) for arm in task.accuracy}
    for ref, value in (("chance", task.chance), ("bigram", task.bigram)):
        if value is not None:
            colors[f"zero_shot/{task.task}/{ref}"] = REFERENCE_COLORS[ref]
    return list(colors), colors


def build_workspace(spec: DashboardSpec) -> Any:
    """The saved workspace view (``wandb_workspaces.workspaces.Workspace``), not yet saved."""
    ws, wr = import_workspaces()
    from wandb_workspaces import expr

    sections = [ws.Section(name=name, panels=panels, is_open=True)
                for name, panels in _panels(spec, wr).items() if panels]
    runs = ws.RunsetSettings(filters=f"Group = '{spec.group}'",
                             groupby=[expr.Config(k) for k in spec.group_by], group_colors=spec.group_colors)
    return ws.Workspace(entity=spec.entity or "", project=spec.project, name=f"famlab {spec.name}",
                        sections=sections, runset_settings=runs)


def _interval_lines(title: str, gains: list[GainBar]) -> list[str]:
    return [f"**{title}** (pretrained - baseline, 95 % CI):", ""] + [
        f"- {g.arm} ({g.family}): {g.diff:+.4g} [{g.ci_low:+.4g}, {g.ci_high:+.4g}]" for g in gains] + [""]


def build_report(spec: DashboardSpec) -> Any:
    """The Report (``wandb_workspaces.reports.v2.Report``), not yet saved: one panel grid per section, over the
    comparison's group, the runs coloured by family."""
    _, wr = import_workspaces()
    keys = spec.group_by
    colors = {wr.RunsetGroup(runset_name="comparison", keys=(wr.RunsetGroupKey(key=wr.Config(keys[0]), value=f),)): c
              for f, c in spec.group_colors.items()}
    blocks: list[Any] = [wr.P(f"W&B group {spec.group}: every run of the comparison; one colour per family "
                              f"({', '.join(f'{f} {c}' for f, c in spec.palette.items())}).")]
    for name, panels in _panels(spec, wr).items():
        if not panels:
            continue
        runset = wr.Runset(entity=spec.entity or "", project=spec.project, name="comparison",
                           filters=f"Group = '{spec.group}'", groupby=[f"config.{k}" for k in keys])
        blocks += [wr.H2(name), wr.PanelGrid(runsets=[runset], panels=panels, custom_run_colors=colors)]
        if name == "What pretraining bought" and spec.finetune_gains + spec.probe_gains:
            md = _interval_lines("fine-tuned", spec.finetune_gains) + _interval_lines("probe", spec.probe_gains)
            blocks.append(wr.MarkdownBlock(text="\n".join(md)))
    return wr.Report(entity=spec.entity or "", project=spec.project, title=f"famlab comparison {spec.name}"[:128],
                     description="Loss against the matched budget, what pretraining bought, zero-shot accuracy.",
                     blocks=blocks)


def create_dashboard(spec: DashboardSpec, entity: str | None = None, project: str | None = None) -> tuple[str, str]:
    """Save the workspace view and the Report to the W&B server; returns their URLs."""
    spec = dataclasses.replace(spec, entity=entity or spec.entity, project=project or spec.project)
    if not spec.entity:
        import wandb

        spec.entity = wandb.Api().default_entity
    workspace = build_workspace(spec).save()
    report = build_report(spec)
    report.save()
    return str(workspace.url), str(report.url)


def dashboard_step(w: WandbConfig, comp_dir: Path) -> Path | None:
    """A comparison's last optional step: write ``wandb-dashboard.json`` beside the runs and, when W&B is online,
    create the workspace view and the Report (raises on any trouble: the caller records it as a failure).

    Returns the spec's path, or None with ``wandb.mode=disabled``. Offline, ``famlab dashboard <dir>`` creates
    both after ``wandb sync``; so it does online without ``wandb-workspaces`` installed.
    """
    mode = wandb_mode(w)
    if mode == "disabled":
        return None
    path = write_spec(comp_dir)
    if mode == "online":
        try:
            import_workspaces()
        except ImportError:
            print(f"famlab: W&B dashboard not created ({INSTALL}); then: famlab dashboard {comp_dir}")
            return path
        workspace, report = create_dashboard(read_spec(comp_dir), w.entity, w.project)
        print(f"W&B workspace view: {workspace}\nW&B report: {report}")
    else:
        print(f"W&B dashboard: after wandb sync {comp_dir / 'wandb'}, famlab dashboard {comp_dir}")
    return path


def sweep_dashboard_step(w: WandbConfig, sweep_dir: Path) -> Path | None:
    """:func:`dashboard_step` for a sweep, never raising: its trouble is one warning line (the sweep's report and
    runs stand on their own, as its W&B report run does)."""
    try:
        return dashboard_step(w, sweep_dir)
    except Exception as e:  # noqa: BLE001 - W&B trouble never stops famlab (docs/config.md, W&B)
        print(f"famlab: WARNING W&B dashboard not created ({type(e).__name__}: {e})", file=sys.stderr)
        return None
