"""Which pretraining objective goes with which family."""

from __future__ import annotations

from famlab.families.faithful import family_defaults
from famlab.objectives.errors import ObjectiveError

# The first objective of each family is its default. The pairs beyond each family's own objective are described in
# objectives/denoisers.py: prefix_lm (T5 paper sec. 3.3), ul2 (Tay et al. 2022), span_mlm (SpanBERT).
OBJECTIVES: dict[str, list[str]] = {
    "bert": ["mlm", "span_mlm"],
    "gpt": ["clm", "prefix_lm", "span", "ul2"],
    "t5": ["span", "prefix_lm", "ul2"],
}


def default_objective(family: str) -> str:
    """The objective that trains ``family`` when ``objective.name`` is unset (``famlab.families.faithful``)."""
    return family_defaults(family).objective


def valid_pairs() -> str:
    """The valid family x objective pairs as one readable string, e.g. `bert x mlm, gpt x clm, t5 x span`."""
    return ", ".join(f"{family} x {objective}" for family, names in OBJECTIVES.items() for objective in names)


def check_pair(family: str, objective: str) -> None:
    """Raise `ObjectiveError` (one line, listing the valid pairs) unless `objective` can train `family`."""
    if family not in OBJECTIVES:
        raise ObjectiveError(f"model.family={family} is not one of {sorted(OBJECTIVES)}; valid pairs: {valid_pairs()}")
    if objective not in OBJECTIVES[family]:
        raise ObjectiveError(
            f"objective.name={objective} cannot train model.family={family}; valid pairs: {valid_pairs()}"
        )
