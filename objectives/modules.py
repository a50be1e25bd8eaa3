"""The LightningModules: `PretrainModule` and `ClassifierModule` (they receive the network)."""

from famlab.objectives.classifier import ClassifierModule
from famlab.objectives.pretrain import PretrainModule

__all__ = ["ClassifierModule", "PretrainModule"]
