"""famlab.families: one block library, the Transformer families built from it (pure torch).

Every family is a :class:`FamilySpec` in one registry (``famlab.families.registry``: :func:`family`,
:func:`family_names`, :func:`register_family`); BERT, GPT and T5 are built in (``famlab.families.builtin``, registered
on import). ``build_network(cfg)`` builds the family's :class:`Network` from a :class:`ModelConfig`; ``from_hf`` /
``to_hf`` convert to and from Hugging Face models (``transformers`` is imported inside them only);
``family_defaults`` is each family's faithful settings, default objective and pooling. Layers and rules:
``docs/architecture.md``.
"""

from __future__ import annotations

from famlab.families.build import build_network
from famlab.families.builtin import BERT_SPEC, GPT_SPEC, T5_SPEC
from famlab.families.config import ConfigError, Family, ModelConfig
from famlab.families.faithful import family_defaults, family_model_settings
from famlab.families.formats import Arch, InputFormat
from famlab.families.hf import from_hf, to_hf
from famlab.families.network import Network, NetworkOutput
from famlab.families.registry import FamilySpec, family, family_names, family_of, register_family, unregister_family

__all__ = [
    "BERT_SPEC", "GPT_SPEC", "T5_SPEC", "Arch", "ConfigError", "Family", "FamilySpec", "InputFormat", "ModelConfig",
    "Network", "NetworkOutput", "build_network", "family", "family_defaults", "family_model_settings", "family_names",
    "family_of", "from_hf", "register_family", "to_hf", "unregister_family",
]
