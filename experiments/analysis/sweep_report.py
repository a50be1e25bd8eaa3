"""Sweep summaries that compare like with like: ``report.md``, ``results.json`` and one plot per swept parameter.

Written at the end of ``famlab sweep`` and rebuilt by ``famlab report <sweep dir>`` from what the trials left in
their run directories (``config.yaml``, ``results.json``, ``metrics.csv``, ``eval.json``). A sweep directory is
recognised by the ``sweep.yaml`` the sweep writes into it.

- Trials that differ only in ``seed`` (``sweep.seeds=[0,1,2]`` or a ``seed`` parameter) form one *cell*, shown as
  mean +- std over seeds.
- The three pretraining objectives predict different targets, so their losses are not comparable (each has its
  own unigram floor, ``val/unigram_loss``). Cells are grouped by family (family/objective when objectives vary);
  the best is named per group, sorted by floor - loss ("learned beyond unigrams") when the metric is a loss.
- Across groups the summary ranks only on a measure from :data:`famlab.experiments.analysis.yardsticks.YARDSTICKS` that
  every trial of those groups measured, and says which; without one it says that none was recorded.
- Within a group, each cell is tested against the group's best with Welch's t-test over seeds, Holm-corrected
  over every test in the summary (:mod:`famlab.experiments.analysis.stats`, as comparisons do).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import yaml
from famlab.experiments.analysis.stats import holm, welch
from famlab.experiments.analysis.sweep_plots import Point, is_numeric, plot_parameter
from famlab.experiments.analysis.yardsticks import YARDSTICKS, Yardstick, dig, read_json, read_metrics
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.run_files import EVAL, RESULTS, CompareFiles, RunFiles
from famlab.families.registry import family_names

if TYPE_CHECKING:
    from typing_extensions import Required  # typing's own from Python 3.11

SWEEP_FILE = "sweep.yaml"  # written by `famlab sweep` into its directory: marks a sweep directory
FLOOR = "val/unigram_loss"
ALPHA = 0.05
GROUP_KEYS = ("model.family", "objective.name")  # what the groups are made of: never plotted as a series


class SweepMetric(TypedDict, total=False):
    """The sweep file's ``metric``: what the trials are ranked on."""

    name: str  # default val/loss
    goal: str  # minimize (default) | maximize


class SweepSpec(TypedDict, total=False):
    """The sweep file (``sweep.yaml``, W&B's sweep format): the keys famlab reads (W&B's others are kept as given)."""

    method: str  # grid | random (| bayes, run by W&B's server)
    metric: SweepMetric
    parameters: dict[str, dict[str, object]]  # swept key -> its values or distribution
    command: list[object]  # the trials' command line: tokens and W&B's macros (``${args_no_hyphens}``)
    program: str  # what ``${program}`` in ``command`` stands for
    run_cap: int  # random search: the trials drawn when ``sweep.count`` is unset


class SweepRecord(TypedDict, total=False):
    """One trial of a sweep (``results.json``'s ``trials``)."""

    name: Required[str]  # its run directory under the sweep directory
    params: Required[dict[str, object]]  # swept key -> value (``seed`` included when replicated)
    run_dir: str
    status: str  # ok | failed (<exit status>) | ...


class FigureArgs(TypedDict):
    """Keyword arguments of :func:`famlab.experiments.analysis.sweep_plots.figure` for one swept parameter."""

    points: list[Point]
    param: str
    panels: list[tuple[str, str]]
    title: str
    log_x: bool
    connect: bool


@dataclass
class Trial:
    """One trial's numbers, read from its run directory."""

    name: str
    params: dict[str, object]
    status: str
    run_dir: Path
    family: str | None = None
    objective: str | None = None
    job: str | None = None
    value: float | None = None  # the sweep metric at the last validation (or the run's final/mean results)
    floor: float | None = None  # val/unigram_loss at that same validation
    lengths: dict[str, float | None] = field(default_factory=dict)  # val loss at 2x / 4x the training length
    yardsticks: dict[str, float] = field(default_factory=dict)
    untrained: bool = False  # a pretraining run whose only validation came before its first step

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.value is not None


@dataclass
class Cell:
    """One swept configuration; its trials differ only in ``seed``."""

    params: dict[str, object]
    trials: list[Trial]
    group: str = ""

    @property
    def ok(self) -> list[Trial]:
        return [t for t in self.trials if t.ok]

    def values(self, what: str) -> list[float]:
        """Per-seed values of ``value`` / ``floor`` / ``learned`` (floor - value) / a yardstick / ``2x``, ``4x``."""
        out = []
        for t in self.ok:
            if what == "learned":
                v = None if t.floor is None or t.value is None else t.floor - t.value  # t.ok: value is set
            elif what in ("value", "floor"):
                v = getattr(t, what)
            elif what in t.lengths:
                v = t.lengths[what]
            else:
                v = t.yardsticks.get(what)
            if v is not None:
                out.append(float(v))
        return out

    def mean(self, what: str) -> float | None:
        vals = self.values(what)
        return statistics.fmean(vals) if vals else None


@dataclass
class Summary:
    """What the sweep's report says, before rendering."""

    metric: str
    goal: str
    shown: list[str]  # swept parameters that vary (without seed and the group keys)
    cells: list[Cell]  # grouped, best first within each group
    score: str  # what ranks within a group: "learned" or "value"
    best: dict[str, Cell]
    adjusted_p: dict[int, float]  # id(cell) -> Holm-adjusted p of the Welch test against its group's best
    across: Yardstick | None  # the measure that ranks across groups
    across_groups: list[str]  # the groups every trial of which measured it
    comparable_metric: bool
    warnings: list[str]


def load_trial(sweep_dir: Path, record: SweepRecord, metric: str) -> Trial:
    """The trial of a sweep record (``name``, ``params``, ``status``) with the numbers its run directory holds."""
    run_dir = sweep_dir / record["name"]
    if not run_dir.is_dir() and Path(record.get("run_dir", "")).is_dir():  # a file that set run_dir itself
        run_dir = Path(record["run_dir"])
    t = Trial(record["name"], dict(record["params"]), record.get("status", "unknown"), run_dir)
    files = RunFiles(run_dir)
    cfg_path = files.config_file
    cfg = (yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}) if cfg_path.is_file() else {}
    res = read_json(files.results_file)
    t.family = (cfg.get("model") or {}).get("family") or res.get("family")
    t.objective = (cfg.get("objective") or {}).get("name") or res.get("objective")
    t.job = res.get("job")
    rows = [r for r in read_metrics(files.metrics_file) if metric in r]
    if t.job == "pretrain" and metric.startswith("val/") and metric not in (res.get("final") or {}):
        # no validation during fit (trainer.val_check_interval > trainer.max_steps): metrics.csv holds only the
        # step-0 validation of the untrained network, which must not be ranked as the trial's result
        t.untrained, rows = True, []
    elif rows:
        t.value, t.floor = rows[-1][metric], rows[-1].get(FLOOR)
    elif not t.untrained:  # a fine-tune over several seeds keeps metrics.csv per seed; results.json has their mean
        t.value = (res.get("mean") or {}).get(metric, (res.get("final") or {}).get(metric))
    if t.floor is None:
        t.floor = (res.get("final") or {}).get(FLOOR)
    lengths = res.get("length_extrapolation") or {}
    t.lengths = {k: (lengths.get(k) or {}).get("loss") for k in ("2x", "4x")}
    for y in YARDSTICKS:
        if (v := y.read(run_dir)) is not None:
            t.yardsticks[y.name] = v
    return t


def discover_records(sweep_dir: Path, spec: SweepSpec) -> list[SweepRecord]:
    """Sweep records rebuilt from ``trial-*`` run directories, for a sweep stopped before it wrote results.json."""
    records: list[SweepRecord] = []
    for d in sorted(p for p in sweep_dir.glob("trial-*") if p.is_dir()):
        cfg_path = RunFiles(d).config_file
        cfg = (yaml.safe_load(cfg_path.read_text(encoding="utf-8")) or {}) if cfg_path.is_file() else {}
        params = {k: dig(cfg, k) for k in spec.get("parameters", {})}
        params.setdefault("seed", cfg.get("seed"))
        status = "ok" if RunFiles(d).is_finished() else f"no {RESULTS}"
        records.append({"name": d.name, "params": params, "run_dir": str(d), "status": status})
    return records


def _key(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def make_cells(trials: list[Trial]) -> list[Cell]:
    """Trials grouped by their parameters without ``seed`` (first-appearance order), labelled with their group."""
    cells: dict[str, Cell] = {}
    for t in trials:
        params = {k: v for k, v in t.params.items() if k != "seed"}
        cells.setdefault(_key(params), Cell(params, [])).trials.append(t)
    objectives: dict[str | None, set[str | None]] = {}
    for t in trials:
        objectives.setdefault(t.family, set()).add(t.objective)
    several = any(len(o) > 1 for o in objectives.values())
    for c in cells.values():
        t0 = c.trials[0]
        c.group = f"{t0.family}/{t0.objective}" if several else str(t0.family)
    return list(cells.values())


def summarize(trials: list[Trial], spec: SweepSpec) -> Summary:
    """Group, rank within groups, test against seed variation, and pick a cross-group yardstick."""
    metric_spec = spec.get("metric") or {}
    metric, goal = metric_spec.get("name", "val/loss"), metric_spec.get("goal", "minimize")
    cells = make_cells(trials)
    names = sorted({k for t in trials for k in t.params if k != "seed"})
    shown = [n for n in names if len({_key(c.params.get(n)) for c in cells}) > 1 and n not in GROUP_KEYS]
    score = "learned" if metric.endswith("loss") and any(c.values("learned") for c in cells) else "value"
    higher = score == "learned" or goal == "maximize"
    groups = list(dict.fromkeys(c.group for c in cells))

    def rank(c: Cell) -> float:
        m = c.mean(score)
        return -float("inf") if m is None else (m if higher else -m)

    ordered = [c for g in groups for c in sorted((c for c in cells if c.group == g), key=rank, reverse=True)]
    best: dict[str, Cell] = {}
    for c in ordered:
        if c.mean(score) is not None:
            best.setdefault(c.group, c)
    tests: list[tuple[int, float]] = []
    for c in ordered:
        b = best.get(c.group)
        if b is not None and c is not b and len(c.values(score)) >= 2 and len(b.values(score)) >= 2:
            tests.append((id(c), welch(c.values(score), b.values(score), alternative="two-sided").p))
    adjusted = dict(zip([i for i, _ in tests], holm([p for _, p in tests]), strict=True))

    done = [t for t in trials if t.ok]
    comparable = bool(done) and all(t.job == "finetune" for t in done)  # task scores mean the same for all
    covered = {y.name: [g for g in groups if all(y.name in t.yardsticks for c in cells if c.group == g for t in c.ok)
                        and any(c.ok for c in cells if c.group == g)] for y in YARDSTICKS}
    # every group measured it; failing that, the first one at least two groups measured (the rest are named)
    across = next((y for y in YARDSTICKS if covered[y.name] == groups), None) or next(
        (y for y in YARDSTICKS if len(covered[y.name]) >= 2), None)
    warnings = []
    if len(groups) > 1 and not comparable:
        floors = [f"{g} {statistics.fmean(f):.2f}" for g in groups
                  if (f := [v for c in cells if c.group == g for v in c.values("floor")])]
        why = ("so each loss has its own unigram floor" + (f" ({', '.join(floors)} nats)" if floors else "")
               if score == "learned" else "so its values measure different tasks")
        warnings.append(
            f"Warning: the sweep's metric {metric} is not comparable across {', '.join(groups)}: each objective "
            f"predicts different targets (a different number of them per sequence), {why}; the best is named per "
            "group, never across them.")
    untrained = [t.name for t in trials if t.untrained]
    if untrained:
        warnings.append(f"Warning: {', '.join(untrained)} never validated after training began (their only "
                        f"{metric} is the untrained network's, before step 1), so they are left out: set "
                        "trainer.val_check_interval <= trainer.max_steps.")
    swept_objective = [n for n in names if n.startswith("objective.") and n != "objective.name"
                       and len({_key(c.params.get(n)) for c in cells}) > 1]
    if score == "learned" and swept_objective:
        warnings.append(f"Note: {', '.join(swept_objective)} changes which tokens are predicted, so {metric} at "
                        f"different values is read against each run's own unigram floor (floor - {metric}).")
    return Summary(metric, goal, shown, ordered, score, best, adjusted, across, covered[across.name] if across else [],
                   comparable, warnings)


def metric_warning(spec: SweepSpec, commands: list[list[str]]) -> str | None:
    """Before any trial runs: a warning when the sweep ranks pretraining runs of several families or objectives on
    its ``metric`` (their losses predict different targets), else ``None``.

    Args:
        spec: the sweep file's content.
        commands: every trial's command line (``famlab pretrain [presets] key=value...``).
    """
    if not commands or not all("pretrain" in cmd for cmd in commands):
        return None  # fine-tune scores mean the same for every family
    arms = set()
    for cmd in commands:
        family = next((t.split("=", 1)[1] for t in reversed(cmd) if t.lstrip("-").startswith("model.family=")),
                      next((t for t in cmd if t in family_names()), None))  # a family preset (`famlab pretrain t5`)
        objective = next((t.split("=", 1)[1] for t in reversed(cmd) if t.lstrip("-").startswith("objective.name=")),
                         None)
        arms.add(f"{family}/{objective}" if objective else str(family))
    if len(arms) < 2:
        return None
    metric = (spec.get("metric") or {}).get("name", "val/loss")
    return (f"famlab sweep: warning: metric {metric} is not comparable across {', '.join(sorted(arms))} (each "
            "objective predicts different targets, with its own unigram floor); the summary names the best per "
            "family and ranks families only on a measure they share")


def _fmt(values: list[float], digits: int = 4) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _status(c: Cell) -> str:
    statuses = [t.status + (", not validated after training" if t.untrained else "") for t in c.trials]
    return statuses[0] if len(set(statuses)) == 1 else f"{statuses.count('ok')}/{len(statuses)} ok"


def _trials_cell(c: Cell) -> str:
    names = [t.name for t in c.trials]
    return ", ".join(names) if len(names) <= 2 else f"{names[0]} … {names[-1]}"


def table(s: Summary) -> tuple[list[str], list[list[str]]]:
    """The summary table as (columns, rows) of strings: one row per cell, grouped, best first."""
    loss = s.score == "learned"
    yards = [y.name for y in YARDSTICKS if any(c.values(y.name) for c in s.cells)]
    lengths = any(c.values("2x") or c.values("4x") for c in s.cells)
    cols = ["trial", *s.shown, "group", "seeds", "status", f"final {s.metric}"]
    cols += ["unigram floor", f"floor − {s.metric}"] if loss else []
    cols += ["val loss at 2x / 4x length"] if lengths else []
    cols += [*yards, "vs group best (Holm p)"]
    rows = []
    for c in s.cells:
        row = [_trials_cell(c), *(_cell_value(c.params.get(n)) for n in s.shown), c.group, str(len(c.ok)),
               _status(c), _fmt(c.values("value"))]
        row += [_fmt(c.values("floor")), _fmt(c.values("learned"))] if loss else []
        row += [f"{_fmt(c.values('2x'), 3)} / {_fmt(c.values('4x'), 3)}"] if lengths else []
        row += [_fmt(c.values(y)) for y in yards]
        if s.best.get(c.group) is c:
            row.append("best")
        elif id(c) in s.adjusted_p:
            p = s.adjusted_p[id(c)]
            row.append(f"{p:.3g}" + (" *" if p < ALPHA else ""))
        else:
            row.append("-")
        rows.append(row)
    return cols, rows


def _cell_value(v: object) -> str:
    return json.dumps(v) if isinstance(v, list | dict) else str(v)


def _markdown(cols: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _described(c: Cell, shown: list[str]) -> str:
    params = ", ".join(f"{n}={_cell_value(c.params.get(n))}" for n in shown)
    return f"{c.trials[0].name}" + (f" ({params})" if params else "")


def verdict(s: Summary) -> list[str]:
    """The lines under the table: best per group, the cross-group ranking or why there is none, warnings."""
    by = (f"floor − {s.metric} (learned beyond unigrams, higher is better)" if s.score == "learned"
          else f"final {s.metric} ({s.goal})")
    lines = [*s.warnings, ""] if s.warnings else []
    several = len(s.best) > 1
    if not s.best:
        return [*lines, f"No trial finished with a {s.metric} to rank."]
    lines.append(f"Best {'per group ' if several else ''}by {by}:")
    for g, c in s.best.items():
        lines.append(f"- {g}: {_described(c, s.shown)}: {_fmt(c.values(s.score))}")
    if several:
        lines.append("")
        y = s.across
        if y is not None:
            measured = [c for c in s.cells if c.group in s.across_groups and c.values(y.name)]
            ranked = sorted(measured, key=lambda c: statistics.fmean(c.values(y.name)), reverse=y.goal == "maximize")
            missing = [g for g in s.best if g not in s.across_groups]
            which = f"{', '.join(s.across_groups)} (not measured by {', '.join(missing)})" if missing else "groups"
            lines.append(f"Across {which}, ranked on {y.name} ({y.goal}), a measure that means the same for every "
                         "family:")
            lines += [f"{i}. {c.group} {_described(c, s.shown)}: {_fmt(c.values(y.name))}"
                      for i, c in enumerate(ranked, 1)]
        elif s.comparable_metric:
            lines.append(f"{s.metric} is a task score, comparable across groups; see the table.")
        else:
            lines.append("No measure comparable across groups was recorded by these runs (bits per byte is written "
                         f"to {EVAL} by `famlab compare`; fine-tune scores come from a sweep that runs `famlab "
                         "finetune`), so no ranking across groups is given.")
    if s.adjusted_p:
        lines += ["", "vs group best: Welch's two-sided t-test over seeds against the group's best cell, Holm-adjusted "
                  f"over all tests in this table; * marks a difference beyond seed variation (p < {ALPHA})."]
    elif any(len(c.trials) == 1 for c in s.cells):
        lines += ["", "vs group best: no test with one seed per cell (`sweep.seeds=[0,1,2]` replicates each trial)."]
    return lines


def swept(s: Summary) -> list[str]:
    """The parameters that get a figure: those that vary (the group keys only when nothing else varies)."""
    return s.shown or [k for k in GROUP_KEYS if len({_key(c.params.get(k)) for c in s.cells}) > 1]


def figure_args(s: Summary, spec: SweepSpec, name: str) -> FigureArgs:
    """Keyword arguments of :func:`famlab.experiments.analysis.sweep_plots.figure` for swept parameter ``name``.

    One series per group and setting of the other swept categorical parameters (other numeric ones would make
    single-point series in a random search); a second panel with floor - loss when the metric is a loss.
    """
    panels = [("value", f"final {s.metric}")]
    if s.score == "learned":
        panels.append(("learned", f"floor − {s.metric} (learned beyond unigrams)"))
    numeric = is_numeric([c.params.get(name) for c in s.cells])
    others = [n for n in s.shown if n != name and not (numeric and is_numeric([c.params.get(n) for c in s.cells]))]
    points = []
    for c in sorted(s.cells, key=lambda c: c.trials[0].name):  # the sweep's order, not the ranking, on the x axis
        parts = ([] if name in GROUP_KEYS else [c.group]) + [f"{n}={_cell_value(c.params.get(n))}" for n in others]
        points.append(Point(", ".join(parts) or s.metric, c.params.get(name), {p: c.values(p) for p, _ in panels},
                            c.values("floor") if s.score == "learned" else []))
    note = "" if s.comparable_metric or len(s.best) < 2 else f"\n({s.metric} is not comparable across groups" + (
        ": read each against its own floor)" if s.score == "learned" else ")")
    per = "setting" if name in GROUP_KEYS else "group"
    dist = str(((spec.get("parameters") or {}).get(name) or {}).get("distribution") or "")
    return {"points": points, "param": name, "panels": panels, "title": f"{s.metric} vs {name}, one series per {per}"
            + note, "log_x": "log" in dist, "connect": spec.get("method") == "grid"}


def plots(s: Summary, spec: SweepSpec, out_dir: Path) -> list[Path]:
    """One PNG per swept parameter in ``out_dir``: ``sweep_<parameter with _ for .>.png``."""
    return [plot_parameter(path=out_dir / f"sweep_{name.replace('.', '_')}.png", **figure_args(s, spec, name))
            for name in swept(s)]


def write_report(sweep_dir: Path, spec: SweepSpec, records: list[SweepRecord], *, name: str, group: str,
                 out_dir: Path | None = None) -> str:
    """Write ``report.md``, ``results.json`` and the plots to ``out_dir`` (default: the sweep directory).

    Args:
        sweep_dir: the sweep directory (trial run directories are ``<sweep_dir>/<record name>``).
        spec: the sweep file's content (``metric``, ``parameters``, ``method``).
        records: the sweep's trials: ``name``, ``params`` (``seed`` included when replicated), ``status``.
        name, group: the sweep's name and W&B group, for the heading.

    Returns:
        The report's Markdown.
    """
    out_dir = out_dir or sweep_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    s = summarize([load_trial(sweep_dir, r, (spec.get("metric") or {}).get("name", "val/loss")) for r in records], spec)
    cols, rows = table(s)
    figures = plots(s, spec, out_dir)
    seeds = max((len(c.trials) for c in s.cells), default=1)
    each = f", {seeds} seeds per cell" if seeds > 1 else ""
    md = [f"# famlab sweep {name} ({spec.get('method')}, {len(records)} trials{each}, group {group})", "",
          _markdown(cols, rows), "", *verdict(s), "", "## Plots", ""]
    md += [f"![{f.stem}]({f.name})" for f in figures]
    text = "\n".join(md) + "\n"
    CompareFiles(out_dir).report_file.write_text(text, encoding="utf-8")
    results = {
        "sweep": name, "method": spec.get("method"), "group": group, "metric": spec.get("metric"),
        "trials": records,
        "numbers": {t.name: {"value": t.value, "floor": t.floor, "lengths": t.lengths, "yardsticks": t.yardsticks}
                    for c in s.cells for t in c.trials},
        "best": {g: [t.name for t in c.trials] for g, c in s.best.items()},
        "across": s.across.name if s.across else None,
        "warnings": s.warnings,
        "tables": [{"title": f"sweep {name}", "columns": cols, "rows": rows}],
        "plots": [f.name for f in figures],
    }
    CompareFiles(out_dir).results_file.write_text(json.dumps(results, indent=2, default=str) + "\n",
                                                  encoding="utf-8")
    return text


def is_sweep_dir(path: Path) -> bool:
    """A directory ``famlab sweep`` wrote (it holds the sweep file as ``sweep.yaml``)."""
    return (path / SWEEP_FILE).is_file()


def rebuild(sweep_dir: Path, out_dir: Path | None = None) -> str:
    """``famlab report <sweep dir>``: the sweep's report again, every number read from its trials' run directories.

    The trial list (names, parameters, exit statuses) comes from the sweep's ``results.json``; a sweep stopped
    before writing it is rebuilt from its ``trial-*`` directories.
    """
    spec: SweepSpec = yaml.safe_load((sweep_dir / SWEEP_FILE).read_text(encoding="utf-8"))
    if not isinstance(spec, dict):
        raise ConfigInputError(f"famlab report: {sweep_dir / SWEEP_FILE} is not a sweep file")
    saved = read_json(CompareFiles(sweep_dir).results_file)
    records = saved.get("trials") or discover_records(sweep_dir, spec)
    if not records:
        raise ConfigInputError(f"famlab report: {sweep_dir} holds no trials (no {RESULTS}, no trial-* directories)")
    name = saved.get("sweep") or sweep_dir.name.removeprefix("sweep-").rsplit("-", 2)[0]  # sweep-<name>-<time>
    first_cfg = RunFiles(sweep_dir / records[0]["name"]).config_file
    group = saved.get("group") or (dig(yaml.safe_load(first_cfg.read_text(encoding="utf-8")), "wandb.group")
                                   if first_cfg.is_file() else None)
    records = [{k: r[k] for k in ("name", "params", "run_dir", "status") if k in r} for r in records]
    return write_report(sweep_dir, spec, records, name=name, group=str(group), out_dir=out_dir)
