"""What pretraining bought: pretrained - scratch gains, the linear-probe table, and their plot.

A comparison only means something if each pretrained arm beats its own from-scratch baseline beyond seed
variation. For every arm (family x objective) this module computes, from stored run records:

- **fine-tuning gain**: mean test accuracy of the pretrained arm minus its family's scratch baseline, the
  Welch 95 % interval of that difference, and a one-sided Welch p-value (H1: pretrained > scratch); with 2 or
  more pretraining runs the pretrained side's unit is a run (the mean over its fine-tuning seeds), so the test
  covers pretraining-seed variance too;
- **probe gain**: the probe accuracy of the pretrained body (one value per pretraining seed) minus the mean of
  random-initialised bodies of the same shape, with a one-sided one-sample t-test (one pretraining run) or a
  one-sided Welch test over pretraining runs (several);

and Holm-corrects each family of p-values across arms (:mod:`famlab.experiments.analysis.stats`). Results are plain
dataclasses; :func:`gain_table`, :func:`probe_table` and :func:`plot_gains` render them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path

from famlab.experiments.analysis.results import ArmRow, FinetuneResult, Plan, ProbeResult, RunRecord
from famlab.experiments.analysis.stats import RUN_MEANS, SEED_VALUES, above, holm, nested_welch, welch
from famlab.experiments.configuration.run_files import CompareFiles
from famlab.experiments.configuration.specs import global_batch

ALPHA = 0.05
PROBE_ONE = "one_sample_t"  # a probe gain's test with one pretraining run: its body against the random bodies
PROBE_RUNS = "welch_pretrained_bodies"  # with several: Welch, one value per pretrained body and per random body


@dataclasses.dataclass
class Gain:
    """One arm's pretrained - baseline difference in test accuracy."""

    arm: str
    family: str
    pretrained: list[float]
    baseline: list[float]
    diff: float
    ci_low: float
    ci_high: float
    p: float
    p_holm: float = math.nan
    test: str | None = None  # which test gave p (stats.RUN_MEANS, SEED_VALUES, PROBE_RUNS or PROBE_ONE)
    pretrain_seeds: int | None = None  # pretraining runs on the pretrained side

    @property
    def significant(self) -> bool:
        return self.p_holm < ALPHA


def finetune_gains(arms: dict[str, ArmRow], metric: str = "test/acc") -> list[Gain]:
    """Pretrained vs scratch per arm (``arms`` from ``report.summarize``); arms lacking 2 seeds a side are skipped.

    An arm with 2 or more pretraining runs (``finetune_nested_values``: one list per run) is tested with the run
    as the unit (:func:`stats.nested_welch`: each run's mean over its fine-tuning seeds against each scratch seed),
    since fine-tunes of one pretrained model are not independent; with one run, Welch over fine-tuning seeds.
    """
    gains = []
    for arm, row in arms.items():
        a = row.finetune_values.get(metric, [])
        b = row.scratch_values.get(metric, [])
        runs = [g for g in row.finetune_nested_values.get(metric, []) if g]
        if len(a) < 2 or len(b) < 2:
            continue
        if len(runs) >= 2:
            w, test = nested_welch(runs, [[v] for v in b], alternative="greater"), RUN_MEANS
        else:
            w, test = welch(a, b, alternative="greater"), SEED_VALUES
        gains.append(Gain(arm, row.family, list(a), list(b), w.diff, w.ci_low, w.ci_high, w.p,
                          test=test, pretrain_seeds=max(1, len(runs))))
    _correct(gains)
    return gains


def probe_gains(probes: dict[str, list[ProbeResult]], families: dict[str, str]) -> list[Gain]:
    """Per arm: pretrained-body probe accuracy (mean over pretraining seeds) against the random-init bodies.

    One pretraining run: a one-sample t-test of its body's accuracy against the random bodies. Several: a Welch
    test of the pretrained bodies (one value per pretraining run, so it covers pretraining-seed variance) against
    the random bodies. A random body's seed fixes it (``famlab probe`` seeds torch with it), so a seed probed by
    several runs counts once (its mean), not once per run.

    Args:
        probes: arm -> the results of its probe runs (one per pretraining seed).
        families: arm -> family.
    """
    gains = []
    for arm, results in probes.items():
        pre = [r.pretrained.test["test/acc"] for r in results]
        by_seed: dict[str, list[float]] = {}
        for r in results:
            for seed, v in r.random.items():
                by_seed.setdefault(seed, []).append(v.test["test/acc"])
        rand = [statistics.fmean(v) for v in by_seed.values()]
        if not pre or len(rand) < 2:
            continue
        t, test = (welch(pre, rand), PROBE_RUNS) if len(pre) >= 2 else (above(pre[0], rand), PROBE_ONE)
        gains.append(Gain(arm, families.get(arm, arm), pre, rand, t.diff, t.ci_low, t.ci_high, t.p,
                          test=test, pretrain_seeds=len(pre)))
    _correct(gains)
    return gains


def unit_note(gains: list[Gain]) -> str:
    """Which seed variance the gains' tests cover, in words (a sentence for the text above a gain table)."""
    tests = {g.test for g in gains}
    parts = []
    if RUN_MEANS in tests:
        parts.append("With 2 or more pretraining runs the pretrained side's unit is a pretraining run (the mean over "
                     "its fine-tuning seeds; the table's mean ± std pools every fine-tune), so the test covers "
                     "pretraining-seed as well as fine-tuning-seed variance; with 2 runs it has little power.")
    if PROBE_RUNS in tests:
        parts.append("With 2 or more pretraining runs the pretrained side has one body per pretraining run, so the "
                     "test covers pretraining-seed variance; with 2 runs it has little power.")
    if tests & {SEED_VALUES, None}:
        parts.append("With one pretraining run the test covers fine-tuning-seed variance only, not pretraining-seed "
                     "variance.")
    if PROBE_ONE in tests:
        parts.append("With one pretraining run its body's accuracy is one fixed value: the test covers the random "
                     "bodies' spread, not pretraining-seed variance.")
    return " ".join(parts)


def _correct(gains: list[Gain]) -> None:
    for g, p in zip(gains, holm([g.p for g in gains]), strict=True):
        g.p_holm = p


def _mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {sd:.3f} (n={len(values)})"


def gain_table(gains: list[Gain], baseline: str = "scratch") -> str:
    """Markdown: one row per arm with both sides, the difference, its 95 % CI, raw and Holm-corrected p."""
    lines = [f"| arm | pretrained | {baseline} | gain | 95 % CI | p (one-sided) | p (Holm) | beyond seed variation |",
             "|---|---|---|---|---|---|---|---|"]
    for g in gains:
        lines.append(f"| {g.arm} | {_mean_sd(g.pretrained)} | {_mean_sd(g.baseline)} | {g.diff:+.3f} | "
                     f"[{g.ci_low:+.3f}, {g.ci_high:+.3f}] | {g.p:.3g} | {g.p_holm:.3g} | "
                     f"{'yes' if g.significant else 'no'} |")
    return "\n".join(lines)


def probe_table(gains: list[Gain]) -> str:
    """Markdown: probe accuracy of the pretrained body against random-init bodies of the same shape."""
    return gain_table(gains, baseline="random-init body").replace("| pretrained |", "| pretrained body |", 1)


SMOKE = ("This is a smoke-scale run: the tiny shape with less pretraining than the `cpu` preset's and a lighter "
         "fine-tuning protocol, so its pretrained-vs-scratch gains sit close to seed variation and may miss "
         "significance for a family on other data (docs/protocol.md, 'The default comparison'). Rank "
         "families with `famlab compare cpu` on a CPU or `famlab compare small` on one GPU.")


def smoke_scale(scale: str | None, plan: Plan | None) -> bool:
    """A tiny comparison whose reference pretraining steps fall short of the ``cpu`` preset's."""
    from famlab.experiments.configuration.compose import load_yaml, preset_path

    steps = plan.reference_steps if plan is not None else None
    if scale != "tiny" or steps is None:
        return False
    return int(steps) < int(load_yaml(preset_path("cpu")).trainer.max_steps)


def verdict(gains: list[Gain], smoke: bool = False) -> str:
    """Does pretraining pay off for every arm, beyond seed variation? A smoke-scale run says so first."""
    lead = f"{SMOKE} " if smoke else ""
    if not gains:
        return f"{lead}No arm has at least 2 seeds on both sides, so no gain was tested."
    bad = [g.arm for g in gains if not g.significant]
    if not bad:
        return (f"{lead}Pretraining pays off for every arm: each pretrained arm beats its own baseline "
                f"(one-sided Welch, Holm-corrected p < {ALPHA} across {len(gains)} arms).")
    return (f"{lead}Pretraining does not pay off beyond seed variation for {', '.join(bad)} (Holm-corrected "
            f"p >= {ALPHA}): a ranking that includes them measures what this budget's pretraining did to a random "
            "initialisation, not what pretraining can teach.")


def plot_gains(finetune: list[Gain], probe: list[Gain], path: Path) -> Path:
    """Bars of the gain per arm with 95 % CI error bars: fine-tuning (left) and linear probe (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(g, t) for g, t in ((finetune, "fine-tuning: pretrained - scratch"),
                                  (probe, "linear probe: pretrained - random-init body")) if g]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(5.2 * max(1, len(panels)), 4.2), squeeze=False)
    palette = {"bert": "tab:blue", "gpt": "tab:orange", "t5": "tab:green"}
    for ax, (gains, title) in zip(axes.flat, panels, strict=False):
        x = list(range(len(gains)))
        err = [[g.diff - g.ci_low for g in gains], [g.ci_high - g.diff for g in gains]]
        ax.bar(x, [g.diff for g in gains], yerr=err, capsize=5, edgecolor="black", lw=0.5,
               color=[palette.get(g.family, "tab:gray") for g in gains])
        for xi, g in zip(x, gains, strict=True):
            ax.annotate(f"p_Holm={g.p_holm:.2g}", (xi, g.ci_high), ha="center", va="bottom", fontsize=8,
                        xytext=(0, 3), textcoords="offset points")
        ax.axhline(0.0, color="black", lw=1)
        ax.set_xticks(x, [g.arm for g in gains])
        ax.set_ylabel("test accuracy difference")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("What pretraining bought (mean difference, 95 % CI)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@dataclasses.dataclass
class WallSplit:
    """The comparison's wall time by phase (``compare.json``), and the report's line about it."""

    total_s: float
    phases: dict[str, float]
    workers: int
    line: str


@dataclasses.dataclass
class Bought:
    """The report's "what pretraining bought" section: its markdown lines, its tables, the gains (as
    ``results.json`` writes them), the protocol lines and the wall-time split."""

    markdown: list[str]
    tables: dict[str, str]
    protocol: list[str]
    wall: WallSplit | None
    gains: list[Gain]
    probe_gains: list[Gain]


def section(
    runs: list[RunRecord], probes: list[RunRecord], families: dict[str, ArmRow], out_dir: Path,
    dirs: list[Path], smoke: bool = False,
) -> Bought:
    """The "what pretraining bought" section: gains, probe table, plot, protocol and wall-time split."""
    ft_gains = finetune_gains(families)
    arm_of = {r.path.name: r.arm for r in runs if r.job == "pretrain"}
    by_arm: dict[str, list[ProbeResult]] = {}
    for r in probes:
        arm = arm_of.get(Path(r.init).name)
        if arm is not None and isinstance(r.results, ProbeResult):
            by_arm.setdefault(arm, []).append(r.results)
    pr_gains = probe_gains(by_arm, {a: row.family for a, row in families.items()})
    md = ["## What pretraining bought", ""]
    tables: dict[str, str] = {}
    if ft_gains:
        tables["gains"] = gain_table(ft_gains)
        md += ["Fine-tuned test accuracy of each pretrained arm minus its family's from-scratch baseline "
               "(same recipe, grid and selection; one-sided Welch test, Holm-corrected across arms). "
               + unit_note(ft_gains), "",
               tables["gains"], "", verdict(ft_gains, smoke), ""]
    if pr_gains:
        tables["probe"] = probe_table(pr_gains)
        md += ["### Linear probe (frozen body)", "",
               "Logistic regression on the frozen body's pooled features (the family's fine-tuning pooling), "
               "strength chosen on validation; the pretrained body against random-initialised bodies of the same "
               "shape (one per probe seed; one-sided one-sample t-test with one pretraining run, one-sided Welch "
               "test over the pretrained bodies with several; Holm-corrected across arms). " + unit_note(pr_gains),
               "",
               tables["probe"], ""]
    if ft_gains or pr_gains:
        plot = plot_gains(ft_gains, pr_gains, out_dir / "pretraining_gain.png")
        md += [f"![what pretraining bought]({plot.name})", ""]
    protocol = protocol_lines(runs, families)
    md += ["## Protocol", "", *[f"- {line}" for line in protocol], ""]
    wall = wall_split(dirs)
    if wall:
        md += [wall.line, ""]
    return Bought(markdown=md, tables=tables, protocol=protocol, wall=wall, gains=ft_gains, probe_gains=pr_gains)


def protocol_lines(runs: list[RunRecord], families: dict[str, ArmRow]) -> list[str]:
    """What the fine-tuning numbers mean: grid, seeds, selection, test once, pooling, pretraining seeds."""
    ft = [r for r in runs if isinstance(r.results, FinetuneResult)]
    tuned = [r.results for r in runs if isinstance(r.results, FinetuneResult)]
    lines = []
    if ft:
        res, cfg = tuned[0], ft[0].config
        f = cfg.finetune
        steps = f.max_steps or f"{f.epochs} epochs"
        lines.append(f"Fine-tuning: {res.sizes['train']} training / {res.sizes['val']} validation / "
                     f"{res.sizes['test']} test examples, {steps} steps at batch "
                     f"{global_batch(f, cfg.data.batch_size)[0]}, seeds "
                     f"{', '.join(sorted(res.seeds, key=int))}.")
        grids = {t.family: ", ".join(f"(body {g['lr']:g}, head {g['head_lr']:g})" for g in t.grid or [])
                 for t in tuned}
        if res.grid:
            if len(set(grids.values())) == 1:
                who, points = "Every side, pretrained or scratch, gets", next(iter(grids.values()))
            else:  # a preset's per-family finetune.lr: both arms of a family still share one grid
                who = "Both arms of a family, pretrained and scratch, get"
                points = "; ".join(f"{family} {p}" for family, p in grids.items())
            lines.append(f"{who} the same grid of (body lr, head lr): {points}; "
                         f"selection: {_selection(res)}, applied to "
                         "each arm separately; the test split is read once, by the selected setting's models.")
        lines += edge_lines(ft)
        pooling = {t.family: t.pooling for t in tuned}
        lines.append("Pooling: " + ", ".join(f"{k} `{v}`" for k, v in pooling.items()) + ".")
    seeds = {row.family: row.pretrain.pretrain_seeds for row in families.values() if row.pretrain is not None}
    if seeds and max(seeds.values()) < 2:
        lines.append("One pretraining run per arm: differences between families are measured over fine-tuning "
                     "seeds of one pretraining run, so they do not include pretraining-seed variance.")
    elif seeds:
        lines.append("Pretraining seeds per arm: " + ", ".join(f"{k} {v}" for k, v in seeds.items())
                     + " (the fine-tuning tables pool the fine-tuning seeds of every pretraining run; the tests take "
                       "each pretraining run's mean as one value, so they cover pretraining-seed variance).")
    return lines


def _selection(res: FinetuneResult) -> str:
    """The grid's selection rule, in words (files from before it was written: the rule they followed)."""
    return res.selection if res.selection is not None else "best mean validation score over seeds"


def edge_lines(ft: list[RunRecord]) -> list[str]:
    """What the selected grid points say about the grid. With two body lrs every selection is an edge by
    construction, so the line gives the choice per arm, not an alarm; with three or more, an edge selection means
    the best lr may lie outside the grid."""
    results = [r.results for r in ft if isinstance(r.results, FinetuneResult)]
    widths = {len({g["lr"] for g in res.grid or []}) for res in results}
    if widths and max(widths) == 2:
        chosen = [f"{res.family} {'scratch' if str(res.init) == 'scratch' else 'pretrained'} "
                  f"{'higher' if _at_top(res) else 'lower'}" for res in results if res.selected]
        return ["Two-point body-lr grid: each selection is one of its two ends by construction, so it cannot show "
                "whether a wider grid would score higher (`compare.finetune_lr_points=3` adds lr / 3); selected: "
                + ", ".join(chosen) + "."] if chosen else []
    edge = grid_edges(ft)
    return ["Selected at an edge of the body-lr grid (a wider `finetune.lr_grid` might score higher): "
            + ", ".join(edge) + "."] if edge else []


def _at_top(res: FinetuneResult) -> bool:
    return (res.selected or {}).get("lr") == max(g["lr"] for g in res.grid or [{"lr": 0.0}])


def grid_edges(ft: list[RunRecord]) -> list[str]:
    """``"<family> <arm> (body lr X, the largest)"`` for each fine-tune whose selected body lr ends its grid."""
    out = []
    for res in [r.results for r in ft if isinstance(r.results, FinetuneResult)]:
        lrs = sorted({g["lr"] for g in res.grid or []})
        chosen = (res.selected or {}).get("lr")
        if len(lrs) < 2 or chosen not in (lrs[0], lrs[-1]):
            continue
        arm = "scratch" if str(res.init) == "scratch" else "pretrained"
        out.append(f"{res.family} {arm} (body lr {chosen:g}, the {'largest' if chosen == lrs[-1] else 'smallest'})")
    return out


def _threads(n: int | None) -> str:
    return "torch's default threads" if n is None else f"{n} torch thread{'' if n == 1 else 's'}"


def wall_split(dirs: list[Path]) -> WallSplit | None:
    """The comparison's wall time by phase, from ``compare.json`` (written by ``famlab compare``)."""
    for d in dirs:
        path = CompareFiles(d).compare_file
        if path.is_file():
            info = json.loads(path.read_text(encoding="utf-8"))
            phases = info.get("phases")
            if not phases or not sum(phases.values()):  # none, or a resume that only read finished jobs back
                return None
            total, workers = info["wall_s"], info.get("workers") or 1
            if workers == 1:
                parts = ", ".join(f"{k} {v:.0f} s ({v / total:.0%})" for k, v in phases.items())
                line = (f"Wall time {total:.0f} s: {parts}; the rest ({total - sum(phases.values()):.0f} s) is "
                        "setup, data and tokenizer (the report itself comes after).")
            else:
                busy = sum(phases.values())
                parts = ", ".join(f"{k} {v:.0f} s ({v / busy:.0%})" for k, v in phases.items())
                line = (f"Wall time {total:.0f} s, with {workers} worker processes running jobs side by side "
                        f"({_threads(info.get('threads'))} each, compare.workers); of the {busy:.0f} s they "
                        f"ran jobs: {parts}.")
            return WallSplit(total_s=total, phases=phases, workers=workers, line=line)
    return None
