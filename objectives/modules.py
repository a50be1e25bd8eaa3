"""The LightningModules: `PretrainModule` and `ClassifierModule` (they receive the network)."""

from objectives.classifier import ClassifierModule
from objectives.pretrain import PretrainModule

__all__ = ["ClassifierModule", "PretrainModule"]
