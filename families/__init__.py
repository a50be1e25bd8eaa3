"""famlab.families: one block library, three Transformer families (pure torch).

``build_network(cfg)`` builds a BERT, GPT or T5 network from a :class:`ModelConfig`; ``from_hf`` / ``to_hf``
convert to and from Hugging Face models (``transformers`` is imported inside them only); ``family_defaults`` is
each family's faithful settings, default objective and pooling. Layers and rules: ``docs/architecture.md``.
"""

from __future__ import annotations

from famlab.families.build import build_network
from famlab.families.config import ConfigError, Family, ModelConfig
from famlab.families.faithful import family_defaults, family_model_settings
from famlab.families.hf import from_hf, to_hf
from famlab.families.network import NetworkOutput

__all__ = [
    "ConfigError", "Family", "ModelConfig", "NetworkOutput", "build_network", "family_defaults",
    "family_model_settings", "from_hf", "to_hf",
]
