"""The zero-shot table of a comparison: every arm on the bundled multiple-choice tasks, next to chance and the
add-k bigram floor (see ``famlab.experiments.commands.evaluate`` for the scoring and ``famlab.objectives.zeroshot`` for
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
from typing import Any

from famlab.experiments.analysis.results import RunRecord
from famlab.objectives.zeroshot import headline

EXPLAINER = (
    "Each cell is accuracy on multiple-choice items from WordNet synsets that pretraining never saw, each "
    "candidate scored by the family's own likelihood of it (GPT: causal log-likelihood of the text; T5: the "
    "decoder's log-likelihood of the span given the sentinel-marked input; BERT: pseudo-log-likelihood of the "
    "span), normalised per byte, mean over pretraining seeds. It measures which family's pretrained model prefers "
    "the right filler without any training on the task, on one scale for all three. It does not measure "
    "fine-tuned ability, calibration or generation quality, and BERT's PLL is not a likelihood: the comparison "
    "is of rankings, not of probabilities."
)


def _headline(result: dict[str, Any], task: str) -> float:
    return float(result[headline(task)]["acc"])


def zero_shot_rows(arm_runs: dict[str, list[RunRecord]]) -> dict[str, dict[str, Any]]:
    """{arm: {task: mean headline accuracy over seeds, task/groups...}} plus ``chance``, ``bigram`` and ``length``
    (the shortest candidate wins) rows.

    ``arm_runs`` maps an arm to its pretraining run records (``report.collect``'s, with ``eval``).
    """
    rows: dict[str, dict[str, Any]] = {}
    reference: dict[str, dict[str, Any]] = {"chance": {}, "bigram": {}, "length": {}}
    for arm, runs in arm_runs.items():
        evals = [r.eval["zero_shot"] for r in runs if r.eval is not None and "zero_shot" in r.eval]
        if not evals:
            continue
        row: dict[str, Any] = {"seeds": len(evals)}
        for task in evals[0]:
            first = evals[0][task]
            row[task] = statistics.fmean(_headline(e[task], task) for e in evals)
            reference["chance"][task] = first["chance"]
            if "length_only" in first:
                reference["length"][task] = first["length_only"]
            if "bigram" in first:
                reference["bigram"][task] = _headline(first["bigram"], task)
            for group in first.get("groups", {}):
                key = f"{task}/{group}"
                row[key] = statistics.fmean(_headline(e[task]["groups"][group], task) for e in evals)
                reference["chance"][key] = first["groups"][group]["chance"]
                if "length_only" in first["groups"][group]:
                    reference["length"][key] = first["groups"][group]["length_only"]
                if "bigram" in first:
                    reference["bigram"][key] = _headline(first["bigram"]["groups"][group], task)
        rows[arm] = row
    if rows:
        rows.update({k: v for k, v in reference.items() if v})
    return rows


def zero_shot_markdown(rows: dict[str, dict[str, Any]]) -> str:
    """A markdown table: arms, then chance, the bigram floor and length alone; one column per task (and
    minimal-pair group)."""
    columns = sorted({k for r in rows.values() for k in r if k != "seeds"})
    lines = ["| arm | " + " | ".join(c.replace("wordnet-", "") for c in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for arm, row in rows.items():
        name = {"chance": "chance", "bigram": "add-k bigram", "length": "length only (shortest)"}.get(arm, arm)
        lines.append(f"| {name} | " + " | ".join(f"{row[c]:.3f}" if c in row else "-" for c in columns) + " |")
    return "\n".join(lines)


def zero_shot_summary(rows: dict[str, dict[str, Any]]) -> dict[str, float]:
    """``{"zero_shot/<task>/<arm>": accuracy}`` for every cell of the table (arms, ``chance``, ``bigram``)."""
    return {f"zero_shot/{column}/{arm}": float(value) for arm, row in rows.items()
            for column, value in row.items() if column != "seeds"}


def zero_shot_section(arm_runs: dict[str, list[RunRecord]]) -> list[str]:
    """The report's zero-shot section from each arm's pretraining run records (empty when none has results)."""
    rows = zero_shot_rows(arm_runs)
    if not rows:
        return []
    return ["## Zero-shot multiple choice (family-agnostic)", "", zero_shot_markdown(rows), "", EXPLAINER, ""]
