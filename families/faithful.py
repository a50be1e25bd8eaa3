"""The built-in families' defaults, in one place: the block choices that make each compute what its Hugging Face
original computes, its default pretraining objective and its default fine-tuning pooling.

``famlab.families.builtin`` puts them into each family's :class:`~famlab.families.registry.FamilySpec`; everything that
needs a family's defaults reads them from there (:func:`family_defaults`): the config composer (the family presets in
``experiments/configs/`` hold only the optimiser and objective rates), the Hugging Face conversion
(``famlab.families.hf_settings``), the objective registry, ``famlab bench``, ``famlab generate``, fine-tuning and the
tests. ``tests/test_one_source.py`` fails if another module writes a copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from famlab.families.registry import FamilyDefaults, family

FAITHFUL: Mapping[str, FamilyDefaults] = MappingProxyType({
    # Devlin et al. 2019 / HF BertForMaskedLM: post-norm LayerNorm (on the embeddings too, no final norm), learned
    # positions, erf GELU, MLM decoder tied to the word embeddings (with its own bias), BERT init normal(0, 0.02).
    "bert": FamilyDefaults(
        model=MappingProxyType(dict(
            pos="learned", norm="layernorm", norm_position="post", ffn="plain", activation="gelu", bias=True,
            tie_embeddings=True, qk_scale=None, norm_eps=1e-12, init="bert", dropout=0.1,
        )),
        objective="mlm",
        # mean of the final states: famlab's MLM pretraining has no next-sentence task, so [CLS] and BERT's pooler
        # are untrained (measured: docs/results.md, pooling). `cls` (BertForSequenceClassification's) stays available.
        pooling="mean",
        hf_fixed=("pos", "norm", "norm_position", "ffn", "bias"),
    ),
    # Radford et al. 2019 / HF GPT2LMHeadModel: pre-norm LayerNorm with a final LayerNorm, learned positions,
    # tanh GELU (HF's gelu_new), tied head, GPT-2 init (residual projections scaled by 1/sqrt(2 * layers)).
    "gpt": FamilyDefaults(
        model=MappingProxyType(dict(
            pos="learned", norm="layernorm", norm_position="pre", ffn="plain", activation="gelu_tanh", bias=True,
            tie_embeddings=True, qk_scale=None, norm_eps=1e-5, init="gpt2", dropout=0.1,
        )),
        objective="clm",
        # mean of the causal states: it beats the last token at small scale (docs/results.md, pooling; Radford et al.
        # 2018 read the last token of a much larger model). `last` (GPT2ForSequenceClassification's) stays.
        pooling="mean",
        hf_fixed=("pos", "norm", "norm_position", "ffn", "bias"),
    ),
    # Raffel et al. 2020 (T5 v1.0) / HF T5ForConditionalGeneration: pre-norm RMSNorm, T5 relative bias, ReLU, no
    # biases, no 1/sqrt(d) in attention (folded into the init), tied head scaled by dim^-0.5 (derived), T5 init.
    "t5": FamilyDefaults(
        model=MappingProxyType(dict(
            pos="t5_bias", norm="rmsnorm", norm_position="pre", ffn="plain", activation="relu", bias=False,
            tie_embeddings=True, qk_scale=1.0, norm_eps=1e-6, init="t5", dropout=0.1,
        )),
        objective="span",
        pooling="mean",  # mean-pooled encoder states
        hf_fixed=("pos", "norm", "norm_position", "bias"),  # ffn: T5 v1.1 is gated; qk_scale: hf_settings
        scaled_tied_head=True,  # the tied head's dim^-0.5 rescaling (Mesh-TF): model.head_scale's derived value
    ),
})


def family_defaults(name: str) -> FamilyDefaults:
    """The defaults of family ``name`` (its registered spec's); a ValueError naming ``model.family`` for another
    name."""
    return family(name).defaults


def family_model_settings(name: str) -> dict[str, Any]:
    """``model.family`` and the ``model`` keys of its defaults, a new dict (``ModelConfig(**settings, dim=...)``)."""
    return family(name).model_settings()


__all__ = ["FAITHFUL", "FamilyDefaults", "family_defaults", "family_model_settings"]
