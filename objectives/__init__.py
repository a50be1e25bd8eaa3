"""objectives: what a network is trained to do — corruption, losses, metrics and the LightningModules.

Imports `families` only for types and heads; never `datamodules` or `experiments`.
"""

from typing import Any

from objectives.collator import ClassificationCollator
from objectives.corruption import clm_shift, mlm_mask, random_spans_noise_mask, span_corrupt, t5_lengths
from objectives.errors import ObjectiveError
from objectives.objective import LossOutput, Objective, make_objective
from objectives.optim import OptimSettings, configure_adamw, decay_groups, lr_factor
from objectives.pairs import OBJECTIVES, check_pair
from objectives.tokens import TokenIds

__all__ = [
    "ClassificationCollator",
    "ClassifierModule",
    "PretrainModule",
    "OBJECTIVES",
    "LossOutput",
    "Objective",
    "ObjectiveError",
    "OptimSettings",
    "TokenIds",
    "check_pair",
    "clm_shift",
    "configure_adamw",
    "decay_groups",
    "lr_factor",
    "make_objective",
    "mlm_mask",
    "random_spans_noise_mask",
    "span_corrupt",
    "t5_lengths",
]


def __getattr__(name: str) -> Any:
    """Import the LightningModules on first use, so `import objectives` stays light (no lightning import)."""
    if name in ("PretrainModule", "ClassifierModule"):
        from objectives import modules

        return getattr(modules, name)
    raise AttributeError(f"module 'objectives' has no attribute {name!r}")
