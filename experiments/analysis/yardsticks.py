"""Measures that mean the same thing for every family, and where a run directory keeps them.

Pretraining losses of BERT (masked LM), GPT (causal LM) and T5 (span corruption) predict different targets and
cannot rank the families against each other; these can. Each entry names a JSON file of a run directory and a
dotted key in it, so a new measure is one line in :data:`YARDSTICKS`.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from famlab.experiments.configuration.run_files import EVAL, RESULTS


def read_metrics(path: Path) -> list[dict[str, float]]:
    """``metrics.csv`` rows as dicts of floats (empty cells dropped)."""
    if not path.is_file():
        return []
    rows = []
    with path.open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.append({k: float(v) for k, v in row.items() if v not in ("", None)})
    return rows


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file as a dict; ``{}`` when it does not exist."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def dig(data: object, dotted: str) -> object:
    """``data["a"]["b"]`` for ``"a.b"``; ``None`` where a key is missing."""
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


@dataclass(frozen=True)
class Yardstick:
    """A measure that means the same thing for every family, read from one JSON file of a run directory.

    ``key`` is a dotted path into that file (``byte_score.value``); ``require`` is a ``(dotted key, value)`` pair
    that must hold as well (BERT's ``pll_bits_per_byte`` is a pseudo-likelihood, not ``bits_per_byte``).
    """

    name: str
    file: str
    key: str
    goal: str  # minimize | maximize
    require: tuple[str, object] | None = None

    def read(self, run_dir: Path) -> float | None:
        """The trial's value, or ``None`` when its run did not measure this yardstick."""
        data = read_json(run_dir / self.file)
        if self.require is not None and dig(data, self.require[0]) != self.require[1]:
            return None
        value = dig(data, self.key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# Measures comparable across families, most preferred first; the first one that every trial measured ranks the
# families against each other. A new measure is one more line, e.g. a zero-shot accuracy in eval.json:
#   Yardstick("zero-shot accuracy", EVAL, "zero_shot.accuracy", "maximize"),
YARDSTICKS: tuple[Yardstick, ...] = (
    Yardstick("fine-tune test/acc", RESULTS, "mean.test/acc", "maximize", ("job", "finetune")),
    Yardstick("bits per byte", EVAL, "byte_score.value", "minimize", ("byte_score.measure", "bits_per_byte")),
)
