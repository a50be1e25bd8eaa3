"""Sweep plots: a metric against one swept parameter, one series per family (and per other categorical setting).

Numeric parameters get a line over sorted values (markers only for random search, whose points are not a
curve; a log axis where the sweep's distribution is log); categorical ones get grouped bars. Error bars are the
standard deviation over seeds. When the metric is a loss a second panel shows floor - loss, and the first draws
each cell's unigram floor, because losses of different objectives are only readable against their own floor.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@dataclass
class Point:
    """One cell of the sweep: its series, its value of the plotted parameter, and per-seed values per panel."""

    series: str
    x: object  # a swept parameter's value as the sweep file gives it (a number, string, list ...)
    values: dict[str, list[float]]  # panel name -> per-seed values
    floor: list[float] = field(default_factory=list)  # per-seed unigram floors (drawn on the first panel)


def is_numeric(values: Sequence[object]) -> bool:
    """All values are numbers (``bool`` is not: ``true``/``false`` settings are categories)."""
    return bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def _label(v: object) -> str:
    return json.dumps(v) if isinstance(v, list | dict) else str(v)


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def plot_parameter(points: list[Point], path: Path, *, param: str, panels: list[tuple[str, str]], title: str,
                   log_x: bool = False, connect: bool = True) -> Path:
    """Write :func:`figure`'s figure to ``path`` (PNG) and close it."""
    import matplotlib.pyplot as plt

    fig = figure(points, param=param, panels=panels, title=title, log_x=log_x, connect=connect)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def figure(points: list[Point], *, param: str, panels: list[tuple[str, str]], title: str, log_x: bool = False,
           connect: bool = True) -> Figure:
    """One matplotlib figure: a panel per ``(name, y label)`` in ``panels``, ``param`` on the x axis.

    Args:
        points: the cells to draw; points without values for a panel are left out of it.
        param: the swept parameter (x axis label).
        panels: ``(name, y-axis label)`` per panel; ``name`` keys ``Point.values``.
        title: the figure's title.
        log_x: a log x axis (numeric parameters swept on a log distribution).
        connect: join a series' points with a line (grid sweeps); random search draws markers only.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numeric = is_numeric([p.x for p in points])
    series = list(dict.fromkeys(p.series for p in points))
    seeds = max((len(v) for p in points for v in p.values.values()), default=1)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels) + 1.8, 4.8), squeeze=False)
    for ax, (panel, ylabel) in zip(axes[0], panels, strict=True):
        floors = panel == panels[0][0] and any(p.floor for p in points)
        draw = _lines if numeric else _bars
        draw(ax, [p for p in points if p.values.get(panel)], series, panel, floors, connect)
        if numeric and log_x:
            ax.set_xscale("log")
        ax.set_xlabel(param + ("" if numeric else " (categories)"))
        ax.set_ylabel(ylabel + (f"\nmean ± std over {seeds} seeds" if seeds > 1 else ""))
        ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, title="series", loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def _number(p: Point) -> float:
    """``p.x`` of a point :func:`_lines` draws: :func:`figure` draws lines only when every ``x`` is a number."""
    return cast(float, p.x)


def _lines(ax: Axes, points: list[Point], series: list[str], panel: str, floors: bool, connect: bool) -> None:
    floor_shown = False
    for i, s in enumerate(series):
        mine = sorted((p for p in points if p.series == s), key=_number)
        if not mine:
            continue
        stats = [_mean_std(p.values[panel]) for p in mine]
        xs = [_number(p) for p in mine]
        ax.errorbar(xs, [m for m, _ in stats], yerr=[sd for _, sd in stats], fmt="o-" if connect else "o",
                    color=f"C{i}", capsize=4, ms=5, label=s)
        if floors and all(p.floor for p in mine):
            ax.plot(xs, [statistics.fmean(p.floor) for p in mine], "--", color=f"C{i}", lw=1,
                    label=None if floor_shown else "dashed: the series' unigram floor")
            floor_shown = True


def _bars(ax: Axes, points: list[Point], series: list[str], panel: str, floors: bool, connect: bool) -> None:
    xs = list(dict.fromkeys(_label(p.x) for p in points))
    present = [s for s in series if any(p.series == s for p in points)]
    width = 0.8 / max(1, len(present))
    floor_shown = False
    for i, s in enumerate(present):
        for p in (p for p in points if p.series == s):
            x = xs.index(_label(p.x)) - 0.4 + width * (i + 0.5)
            mean, sd = _mean_std(p.values[panel])
            color = f"C{series.index(s)}"
            first = p is next(q for q in points if q.series == s)
            ax.bar(x, mean, width=width * 0.92, yerr=sd, capsize=3, color=color, edgecolor="black", lw=0.5,
                   label=s if first else None)
            if floors and p.floor:
                ax.hlines(statistics.fmean(p.floor), x - width / 2, x + width / 2, colors="black", lw=2,
                          label="" if floor_shown else "unigram floor (black bar)")
                floor_shown = True
    ax.set_xticks(range(len(xs)), xs, rotation=20 if any(len(x) > 8 for x in xs) else 0)
