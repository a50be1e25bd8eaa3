"""objectives: what a network is trained to do — corruption, losses, metrics and the LightningModules.

Imports `families` only for types, heads and the family defaults; never `datamodules` or `experiments`. The
objective registry (`objectives/registry.py`) is the one family x objective table. Layers: `docs/architecture.md`.
"""

from typing import TYPE_CHECKING

from famlab.objectives.collator import ClassificationCollator
from famlab.objectives.corruption import clm_shift, mlm_mask, random_spans_noise_mask, span_corrupt, t5_lengths
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.objective import LossOutput, Objective
from famlab.objectives.optim import OptimSettings, configure_optimizer, decay_groups, lr_factor
from famlab.objectives.registry import REGISTRY, check_pair, default_objective, make_objective, objectives_table
from famlab.objectives.tokens import TokenIds

if TYPE_CHECKING:  # imported lazily by __getattr__ below
    from famlab.objectives.modules import ClassifierModule, PretrainModule

# {family: [objective, ...]}, the family's default first (docs/interfaces.md); read from the registry.
OBJECTIVES = objectives_table()

__all__ = [
    "ClassificationCollator",
    "ClassifierModule",
    "PretrainModule",
    "OBJECTIVES",
    "REGISTRY",
    "default_objective",
    "LossOutput",
    "Objective",
    "ObjectiveError",
    "OptimSettings",
    "TokenIds",
    "check_pair",
    "clm_shift",
    "configure_optimizer",
    "decay_groups",
    "lr_factor",
    "make_objective",
    "mlm_mask",
    "random_spans_noise_mask",
    "span_corrupt",
    "t5_lengths",
]


def __getattr__(name: str) -> "type[PretrainModule] | type[ClassifierModule]":
    """Import the LightningModules on first use, so `import objectives` stays light (no lightning import)."""
    if name in ("PretrainModule", "ClassifierModule"):
        from famlab.objectives import modules

        return getattr(modules, name)
    raise AttributeError(f"module 'objectives' has no attribute {name!r}")
