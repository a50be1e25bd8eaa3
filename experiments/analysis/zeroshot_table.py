"""The zero-shot table of a comparison: every arm on the bundled multiple-choice tasks, next to chance and the
add-k bigram floor (see ``famlab.experiments.steps.evaluate`` for the scoring and ``famlab.objectives.zeroshot`` for
each family's rule).

- ``famlab compare`` evaluates each pretraining run directory (``compare.zero_shot_scores``) and stores the result
  in the run's ``eval.json`` under ``zero_shot``;
- :func:`zero_shot_rows` averages them over an arm's pretraining seeds;
- :func:`zero_shot_section` renders the report section (markdown lines);
- :func:`zero_shot_summary` flattens the rows into scalar keys ``zero_shot/<task>/<arm>``, which the report
  writes to ``results.json`` (``wandb_summary``) and the comparison's W&B report run puts in its summary (the
  table itself reaches that run as ``tables/zero_shot_multiple_choice_family_agnostic``, as every report table does).
"""

from __future__ import annotations

import statistics

from famlab.experiments.analysis.results import RunRecord, ZeroShotResult, ZeroShotScores
from famlab.experiments.analysis.stats import holm, paired_bootstrap
from famlab.objectives.zeroshot import headline, not_scored

EXPLAINER = (
    "Each cell is accuracy on multiple-choice items from WordNet synsets that pretraining never saw, each "
    "candidate scored by the family's own likelihood of it (GPT: causal log-likelihood of the text; T5: the "
    "decoder's log-likelihood of the span given the sentinel-marked input; BERT: pseudo-log-likelihood of the "
    "span), normalised per byte, mean over pretraining seeds. It measures which family's pretrained model prefers "
    "the right filler without any training on the task, on one scale for all three. It does not measure "
    "fine-tuned ability, calibration or generation quality, and BERT's PLL is not a likelihood: the comparison "
    "is of rankings, not of probabilities."
)


Row = dict[str, float]  # column (task, task/group) -> accuracy; an arm's row also holds ``seeds``
NOT_SCORED = "not_scored"  # in an arm's row (1.0): its objective declares no cloze rule, so no task was scored
META = ("seeds", NOT_SCORED)  # an arm's row keys that are not columns


def _not_scored(result: ZeroShotResult) -> bool:
    """Whether every item of ``result`` was skipped because the run's objective declares no cloze rule
    (``famlab.objectives.zeroshot.not_scored``)."""
    count = (result.skipped or {}).get(not_scored(str(result.objective)))
    return count is not None and count == result.num_items


def _unscored(evals: list[dict[str, ZeroShotResult]]) -> bool:
    """Whether an arm's objective declares no cloze rule: no item of any task of any seed was scored."""
    results = [result for e in evals for result in e.values()]
    return bool(results) and all(_not_scored(result) for result in results)


def _headline(result: ZeroShotScores, task: str) -> float:
    return float(result.accuracy(headline(task)).acc)


def _evals(runs: list[RunRecord]) -> list[dict[str, ZeroShotResult]]:
    """The zero-shot results of each run that has them."""
    return [r.eval.zero_shot for r in runs if r.eval is not None and r.eval.zero_shot is not None]


def zero_shot_rows(arm_runs: dict[str, list[RunRecord]]) -> dict[str, Row]:
    """{arm: {task: mean headline accuracy over seeds, task/groups...}} plus ``chance``, ``bigram`` and ``length``
    (the shortest candidate wins) rows.

    ``arm_runs`` maps an arm to its pretraining run records (``report.collect``'s, with ``eval``).
    """
    rows: dict[str, Row] = {}
    reference: dict[str, Row] = {"chance": {}, "bigram": {}, "length": {}}
    for arm, runs in arm_runs.items():
        evals = _evals(runs)
        if not evals:
            continue
        unscored = _unscored(evals)  # the references still hold: they are the items', not the arm's
        row: Row = {"seeds": len(evals)} | ({NOT_SCORED: 1.0} if unscored else {})
        for task in evals[0]:
            first = evals[0][task]
            if not unscored:
                row[task] = statistics.fmean(_headline(e[task], task) for e in evals)
            _references(reference, task, first)
            if first.bigram is not None:
                reference["bigram"][task] = _headline(first.bigram, task)
            for group, scores in (first.groups or {}).items():
                key = f"{task}/{group}"
                if not unscored:
                    row[key] = statistics.fmean(_headline(_group(e[task], group), task) for e in evals)
                _references(reference, key, scores)
                if first.bigram is not None:
                    reference["bigram"][key] = _headline(_group(first.bigram, group), task)
        rows[arm] = row
    if rows:
        rows.update({k: v for k, v in reference.items() if v})
    return rows


def _group(scores: ZeroShotScores, group: str) -> ZeroShotScores:
    assert scores.groups is not None, "a group's scores without groups"
    return scores.groups[group]


def _references(reference: dict[str, Row], column: str, scores: ZeroShotScores) -> None:
    """Chance and length alone of ``column`` from one run's ``scores`` (the same items for every run)."""
    if scores.chance is not None:
        reference["chance"][column] = scores.chance
    if scores.length_only is not None:
        reference["length"][column] = scores.length_only


def zero_shot_markdown(rows: dict[str, Row], stats: dict[str, dict[str, dict[str, float]]] | None = None) -> str:
    """A markdown table: arms, then chance, the bigram floor and length alone; one column per task (and
    minimal-pair group). An arm whose objective declares no cloze rule reads ``not scored`` in every column."""
    columns = sorted({k for r in rows.values() for k in r if k not in META})
    lines = ["| arm | " + " | ".join(c.replace("wordnet-", "") for c in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for arm, row in rows.items():
        name = {"chance": "chance", "bigram": "add-k bigram", "length": "length only (shortest)"}.get(arm, arm)
        cis = (stats or {}).get(arm, {})

        def cell(c: str, row: Row = row, cis: dict[str, dict[str, float]] = cis) -> str:
            if NOT_SCORED in row:
                return "not scored"
            if c not in row:
                return "-"
            ci = cis.get(c)
            return f"{row[c]:.3f}" + (f" [{ci['low']:.3f}, {ci['high']:.3f}]" if ci else "")

        lines.append(f"| {name} | " + " | ".join(cell(c) for c in columns) + " |")
    return "\n".join(lines)


def zero_shot_summary(rows: dict[str, Row]) -> dict[str, float]:
    """``{"zero_shot/<task>/<arm>": accuracy}`` for every cell of the table (arms, ``chance``, ``bigram``)."""
    return {f"zero_shot/{column}/{arm}": float(value) for arm, row in rows.items()
            for column, value in row.items() if column not in META}


def _items(result: ZeroShotScores, task: str) -> list[float] | None:
    """Per-item correctness (1.0 / 0.0) under the task's headline normalisation; None for results written before
    famlab stored it."""
    flags = result.accuracy(headline(task)).correct
    return None if flags is None else [float(c == "1") for c in flags]


def _cells(evals: list[dict[str, ZeroShotResult]], task: str, group: str | None
           ) -> tuple[list[float] | None, list[float] | None]:
    """(the arm's per-item correctness, mean over its seeds; the bigram floor's), for a task or one of its groups."""

    def pick(result: ZeroShotScores) -> ZeroShotScores:
        return result if group is None else _group(result, group)

    per_seed = [_items(pick(e[task]), task) for e in evals]
    model = None if any(v is None for v in per_seed) else [statistics.fmean(c) for c in zip(*per_seed, strict=True)]
    first = evals[0][task]
    floor = _items(pick(first.bigram), task) if first.bigram is not None else None
    return model, floor


def zero_shot_uncertainty(arm_runs: dict[str, list[RunRecord]]) -> dict[str, dict[str, dict[str, float]]]:
    """{arm: {column: {low, high, diff, diff_low, diff_high, p, p_holm}}}: a 95 % bootstrap CI over items of each
    cell, and each arm against the add-k bigram on the same items (paired bootstrap, two-sided p, Holm-corrected
    across arms within a column). Cells whose results lack per-item records are left out."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for arm, runs in arm_runs.items():
        evals = [e for e in _evals(runs) if e]
        if not evals or _unscored(evals):  # not scored: no accuracy to put a CI on
            continue
        columns: list[tuple[str, str | None]] = [(t, None) for t in evals[0]]
        columns += [(t, g) for t in evals[0] for g in evals[0][t].groups or {}]
        for task, group in columns:
            model, floor = _cells(evals, task, group)
            if not model:
                continue
            acc, low, high, _ = paired_bootstrap(model, [0.0] * len(model))  # the CI of the accuracy itself
            cell = {"acc": acc, "low": low, "high": high}
            if floor is not None and len(floor) == len(model):
                cell.update(zip(("diff", "diff_low", "diff_high", "p"), paired_bootstrap(model, floor), strict=True))
            out.setdefault(arm, {})[task if group is None else f"{task}/{group}"] = cell
    keys = {c for cells in out.values() for c in cells}
    for column in keys:  # Holm across arms: a reader compares every arm with the floor at once
        arms = [a for a in out if "p" in out[a].get(column, {})]
        for arm, p in zip(arms, holm([out[a][column]["p"] for a in arms]), strict=True):
            out[arm][column]["p_holm"] = p
    return out


def bigram_markdown(stats: dict[str, dict[str, dict[str, float]]]) -> str:
    """A markdown table: each arm minus the add-k bigram, per column: difference [95 % CI], Holm-corrected p."""
    columns = sorted({c for cells in stats.values() for c, v in cells.items() if "diff" in v})
    if not columns:
        return ""
    lines = ["| arm - add-k bigram | " + " | ".join(c.replace("wordnet-", "") for c in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for arm, cells in stats.items():
        row = [f"{v['diff']:+.3f} [{v['diff_low']:+.3f}, {v['diff_high']:+.3f}], p {v['p_holm']:.2g}"
               if "diff" in (v := cells.get(c, {})) else "-" for c in columns]
        lines.append(f"| {arm} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def zero_shot_section(arm_runs: dict[str, list[RunRecord]]) -> list[str]:
    """The report's zero-shot section from each arm's pretraining run records (empty when none has results):
    accuracy with its 95 % CI over items, then each arm against the bigram floor on the same items."""
    rows = zero_shot_rows(arm_runs)
    if not rows:
        return []
    stats = zero_shot_uncertainty(arm_runs)
    md = ["## Zero-shot multiple choice (family-agnostic)", "", zero_shot_markdown(rows, stats), ""]
    if stats:
        md += ["Brackets: 95 % bootstrap CI over items (the arm's per-item accuracy averaged over pretraining seeds).",
               ""]
    floor = bigram_markdown(stats)
    if floor:
        md += [floor, "", "Each arm minus the add-k bigram on the same items: mean difference in accuracy with its "
               "95 % paired-bootstrap CI over items, two-sided p, Holm-corrected across arms within a column.", ""]
    return [*md, EXPLAINER, ""]
