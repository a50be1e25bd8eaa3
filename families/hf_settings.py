"""Hugging Face config <-> :class:`ModelConfig`: every setting is honoured exactly or refused on one line.

``config_from_hf`` reads a ``BertConfig`` / ``GPT2Config`` / ``T5Config`` and either returns the
:class:`ModelConfig` whose network gives the same logits, or raises :class:`HFConversionError` naming the
HF setting and its value (an activation famlab has no block for, GPT-2's per-layer attention scaling,
BERT as a decoder, ...). ``config_to_hf`` does the reverse and refuses, before anything is built, every
famlab setting the Hugging Face class cannot express the same way (``model.qk_scale`` other than the
family's, a head dimension GPT-2 cannot set, ...). See ``docs/interfaces.md`` for the conversion contract.
"""

from __future__ import annotations

import importlib
import math
from typing import TYPE_CHECKING, Any

import torch
from famlab.families.config import ModelConfig
from famlab.families.faithful import family_defaults
from famlab.families.registry import HFAdapter, family, family_names

if TYPE_CHECKING:
    from transformers import BertConfig, GPT2Config, PretrainedConfig, PreTrainedModel, T5Config

# HF activation names (transformers.activations.ACT2FN) that are, numerically, one of famlab's activations.
# gelu_fast / gelu_accurate / gelu_python_tanh are the tanh approximation written out by hand (same formula,
# constants rounded at ~1e-10); gelu_python is the exact erf form.
ACT_FROM_HF = {
    "gelu": "gelu",
    "gelu_python": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_python_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_accurate": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}
# T5's feed_forward_proj "gated-gelu" means the tanh GELU (a transformers backward-compatibility rule), so a
# gated exact-erf GELU is written "gated-gelu_python".
T5_GATED_TO_HF = {"gelu": "gelu_python", "gelu_tanh": "gelu", "relu": "relu", "silu": "silu"}


# model.<key> -> the Hugging Face config key holding the same value, read and written as it is (one table for both
# directions, so they cannot drift); what a direction converts is written out in its function
BERT_KEYS = {"vocab_size": "vocab_size", "dim": "hidden_size", "num_layers": "num_hidden_layers",
             "num_heads": "num_attention_heads", "ffn_dim": "intermediate_size",
             "max_seq_len": "max_position_embeddings", "type_vocab_size": "type_vocab_size",
             "norm_eps": "layer_norm_eps", "init_std": "initializer_range"}
GPT2_KEYS = {"vocab_size": "vocab_size", "dim": "n_embd", "num_layers": "n_layer", "num_heads": "n_head",
             "max_seq_len": "n_positions", "norm_eps": "layer_norm_epsilon", "init_std": "initializer_range"}
T5_KEYS = {"vocab_size": "vocab_size", "dim": "d_model", "num_layers": "num_layers",
           "num_decoder_layers": "num_decoder_layers", "num_heads": "num_heads", "head_dim": "d_kv", "ffn_dim": "d_ff",
           "rel_pos_buckets": "relative_attention_num_buckets",
           "rel_pos_max_distance": "relative_attention_max_distance", "norm_eps": "layer_norm_epsilon"}


def _read(hf: object, keys: dict[str, str]) -> dict[str, Any]:
    """``keys``' values from a Hugging Face config, under famlab's names."""
    return {ours: getattr(hf, theirs) for ours, theirs in keys.items()}


def _written(cfg: ModelConfig, keys: dict[str, str]) -> dict[str, Any]:
    """``keys``' values of ``cfg``, under the Hugging Face config's names."""
    return {theirs: getattr(cfg, ours) for ours, theirs in keys.items()}


class HFConversionError(ValueError):
    """A setting one side cannot express the way the other computes it; one line naming setting and value."""


def _refuse_from(cfg: object, key: str, value: object, why: str) -> HFConversionError:
    return HFConversionError(f"from_hf: {type(cfg).__name__}.{key}={value!r} {why}")


def _activation(cfg: object, key: str) -> str:
    name = getattr(cfg, key)
    if name not in ACT_FROM_HF:
        raise _refuse_from(cfg, key, name, f"has no famlab activation (famlab reads: {', '.join(ACT_FROM_HF)})")
    return ACT_FROM_HF[name]


def _same_dropout(cfg: object, keys: tuple[str, ...]) -> float:
    """famlab has one dropout rate for embeddings, attention weights and residual branches."""
    values = {k: float(getattr(cfg, k)) for k in keys}
    first = values[keys[0]]
    for key, value in values.items():
        if value != first:
            raise _refuse_from(cfg, key, value, f"differs from {keys[0]}={first} (famlab has one model.dropout)")
    return first


def _require_false(cfg: object, *keys: str) -> None:
    for key in keys:
        if getattr(cfg, key, False):
            raise _refuse_from(cfg, key, getattr(cfg, key), "has no famlab equivalent (needs False)")


def _fixed(family: str) -> dict[str, Any]:
    """The settings the family's HF class has no config key for, and its init scheme (famlab.families.faithful)."""
    d = family_defaults(family)
    return {key: d.model[key] for key in (*d.hf_fixed, "init")}


def _tied(model: torch.nn.Module, head: str, embed: str) -> bool:
    """Whether the model's output weight shares storage with its input embedding (what HF actually does)."""
    try:
        head_w, embed_w = model.get_parameter(head), model.get_parameter(embed)
    except AttributeError:  # a model class without the head (BertModel, GPT2Model): the config says
        return bool(getattr(model.config, "tie_word_embeddings", True))
    return bool(head_w.data_ptr() == embed_w.data_ptr())


def bert_config(model: PreTrainedModel, family: str) -> ModelConfig:
    """:class:`ModelConfig` of a ``BertForMaskedLM`` / ``BertForPreTraining`` / ``BertModel`` as ``family``."""
    c = model.config
    _require_false(c, "is_decoder", "add_cross_attention")
    if c.type_vocab_size < 1:
        raise _refuse_from(c, "type_vocab_size", c.type_vocab_size, "must be >= 1 (famlab's BERT has token types)")
    prefix = "bert." if hasattr(model, "bert") else ""
    return ModelConfig(
        family=family,  # type: ignore[arg-type]  # enum fields accept their string values
        **_read(c, BERT_KEYS),
        activation=_activation(c, "hidden_act"),  # type: ignore[arg-type]
        dropout=_same_dropout(c, ("hidden_dropout_prob", "attention_probs_dropout_prob")),
        tie_embeddings=_tied(model, "cls.predictions.decoder.weight", f"{prefix}embeddings.word_embeddings.weight"),
        pad_token_id=c.pad_token_id or 0,
        **_fixed(family),
    )


def gpt_config(model: PreTrainedModel, family: str) -> ModelConfig:
    """:class:`ModelConfig` of a ``GPT2LMHeadModel`` / ``GPT2Model`` as ``family``."""
    c = model.config
    # scale_attn_by_inverse_layer_idx divides layer i's logits by i + 1: famlab has one qk_scale per model
    _require_false(c, "scale_attn_by_inverse_layer_idx", "add_cross_attention")
    # reorder_and_upcast_attn only changes the precision of the score matmul (fp32 either way here): honoured
    return ModelConfig(
        family=family,  # type: ignore[arg-type]
        **_read(c, GPT2_KEYS),
        ffn_dim=c.n_inner or 4 * c.n_embd,
        activation=_activation(c, "activation_function"),  # type: ignore[arg-type]
        dropout=_same_dropout(c, ("resid_pdrop", "embd_pdrop", "attn_pdrop")),
        tie_embeddings=_tied(model, "lm_head.weight", "transformer.wte.weight"),
        qk_scale=None if c.scale_attn_weights else 1.0,
        pad_token_id=c.pad_token_id or 0,
        **_fixed(family),
    )


def t5_config(model: PreTrainedModel, family: str) -> ModelConfig:
    """:class:`ModelConfig` of a ``T5ForConditionalGeneration`` as ``family``."""
    c = model.config
    _require_false(c, "is_decoder")
    if not c.is_encoder_decoder:
        raise _refuse_from(c, "is_encoder_decoder", False, "has no famlab equivalent (needs True)")
    # transformers 5 always ties T5's head and keeps the rescaling in `scale_decoder_outputs`; 4.x ties and
    # rescales together under `tie_word_embeddings`
    scaled = getattr(c, "scale_decoder_outputs", c.tie_word_embeddings)
    return ModelConfig(
        family=family,  # type: ignore[arg-type]
        **_read(c, T5_KEYS),
        ffn="gated" if c.is_gated_act else "plain",  # type: ignore[arg-type]
        activation=_activation(c, "dense_act_fn"),  # type: ignore[arg-type]
        dropout=float(c.dropout_rate),
        tie_embeddings=_tied(model, "lm_head.weight", "shared.weight"),
        qk_scale=family_defaults(family).model["qk_scale"],  # HF T5 has no attention scale setting
        head_scale=c.d_model**-0.5 if scaled else 1.0,
        init_std=0.02 * c.initializer_factor,
        pad_token_id=c.pad_token_id or 0,
        **_fixed(family),
    )


def hf_adapter(name: str, what: str = "to_hf") -> HFAdapter:
    """Family ``name``'s :class:`~famlab.families.registry.HFAdapter`; HFConversionError when it has none."""
    adapter = family(name).hf
    if adapter is None:
        raise HFConversionError(f"{what}: model.family={name} has no Hugging Face equivalent")
    return adapter


def config_from_hf(model: PreTrainedModel) -> ModelConfig:
    """The :class:`ModelConfig` equivalent to a Hugging Face model; raises HFConversionError for a setting famlab
    does not model (the message names the HF setting and its value). The family is the one whose adapter reads the
    model's class."""
    name = type(model).__name__
    readers = {c: n for n in family_names() if (a := family(n).hf) is not None for c in a.classes}
    if name not in readers:
        lm = [a.lm_class for n in family_names() if (a := family(n).hf) is not None]
        raise HFConversionError(f"from_hf: unsupported model class {name}; expected {', '.join(lm[:-1])} or {lm[-1]}")
    return hf_adapter(readers[name], "from_hf").config_from_hf(model, readers[name])


def _value(x: object) -> object:
    return getattr(x, "value", x)


def _refuse_to(cfg: ModelConfig, key: str, why: str) -> HFConversionError:
    return HFConversionError(
        f"to_hf: model.{key}={_value(getattr(cfg, key))} {why} in Hugging Face's {cfg.family.value} model"
    )


def check_expressible(cfg: ModelConfig) -> None:
    """Raise HFConversionError naming the first ``model.*`` setting the family's HF class cannot express."""
    adapter = hf_adapter(cfg.family.value)
    defaults = family_defaults(cfg.family.value)
    for key in defaults.hf_fixed:
        value = defaults.model[key]
        if _value(getattr(cfg, key)) != value:
            raise _refuse_to(cfg, key, f"is not expressible (needs {value})")
    if cfg.num_kv_heads != cfg.num_heads:
        raise _refuse_to(cfg, "num_kv_heads", f"(GQA, num_heads={cfg.num_heads}) is not expressible")
    assert cfg.head_dim is not None and cfg.head_scale is not None
    adapter.check(cfg)


def _check_gpt_style(cfg: ModelConfig, allowed_scales: tuple[float, ...], names: str) -> None:
    """BERT's and GPT-2's attention: head_dim is dim / num_heads, qk_scale one of ``allowed_scales``, no head scale."""
    assert cfg.head_dim is not None
    if cfg.head_dim * cfg.num_heads != cfg.dim:
        per_head = f"{cfg.dim / cfg.num_heads:g}"
        raise _refuse_to(cfg, "head_dim", f"!= model.dim/model.num_heads={per_head} is not expressible")
    if cfg.qk_scale is not None and not any(math.isclose(cfg.qk_scale, a, rel_tol=1e-9) for a in allowed_scales):
        raise _refuse_to(cfg, "qk_scale", f"is not expressible (needs null = {names})")
    if cfg.head_scale != 1.0:
        raise _refuse_to(cfg, "head_scale", "is not expressible (needs 1.0)")


def check_bert(cfg: ModelConfig) -> None:
    """What ``BertForMaskedLM`` cannot express beyond the fixed keys (:func:`check_expressible`)."""
    assert cfg.head_dim is not None
    _check_gpt_style(cfg, (1.0 / math.sqrt(cfg.head_dim),), "1/sqrt(head_dim)")
    if not cfg.type_vocab_size:
        raise _refuse_to(cfg, "type_vocab_size", "is not expressible (needs >= 1)")


def check_gpt2(cfg: ModelConfig) -> None:
    """What ``GPT2LMHeadModel`` cannot express beyond the fixed keys (its ``scale_attn_weights=False`` is 1.0)."""
    assert cfg.head_dim is not None
    _check_gpt_style(cfg, (1.0 / math.sqrt(cfg.head_dim), 1.0), "1/sqrt(head_dim) or 1.0")


def check_t5(cfg: ModelConfig) -> None:
    """What ``T5ForConditionalGeneration`` cannot express beyond the fixed keys."""
    assert cfg.head_scale is not None
    if cfg.qk_scale != family_defaults(cfg.family.value).model["qk_scale"]:
        raise _refuse_to(cfg, "qk_scale", "is not expressible (T5 attention is unscaled: needs 1.0)")
    if not (cfg.head_scale == 1.0 or math.isclose(cfg.head_scale, cfg.dim**-0.5, rel_tol=1e-9)):
        raise _refuse_to(cfg, "head_scale", f"is not expressible (needs 1.0 or dim^-0.5={cfg.dim**-0.5:.6g})")


def config_to_hf(cfg: ModelConfig) -> PretrainedConfig:
    """The family's Hugging Face config equivalent to ``cfg`` (``BertConfig`` / ``GPT2Config`` / ``T5Config``; checked
    with :func:`check_expressible` first)."""
    check_expressible(cfg)
    return hf_adapter(cfg.family.value).config_to_hf(cfg)


def _common(cfg: ModelConfig) -> dict[str, object]:
    return dict(pad_token_id=cfg.pad_token_id, tie_word_embeddings=cfg.tie_embeddings)


def bert_config_to_hf(cfg: ModelConfig) -> BertConfig:
    """The ``BertConfig`` of ``cfg`` (unchecked: :func:`config_to_hf` checks)."""
    transformers = importlib.import_module("transformers")  # optional extra: imported lazily
    return transformers.BertConfig(
        **_written(cfg, BERT_KEYS),
        hidden_act=ACT_TO_HF[cfg.activation.value],
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        **_common(cfg),
    )


def gpt2_config_to_hf(cfg: ModelConfig) -> GPT2Config:
    """The ``GPT2Config`` of ``cfg`` (unchecked: :func:`config_to_hf` checks)."""
    transformers = importlib.import_module("transformers")  # optional extra: imported lazily
    return transformers.GPT2Config(
        **_written(cfg, GPT2_KEYS),
        n_inner=cfg.ffn_dim,
        activation_function=ACT_TO_HF[cfg.activation.value],
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.dropout,
        scale_attn_weights=cfg.qk_scale is None or cfg.qk_scale != 1.0,
        bos_token_id=None,
        eos_token_id=None,
        **_common(cfg),
    )


def t5_config_to_hf(cfg: ModelConfig) -> T5Config:
    """The ``T5Config`` of ``cfg`` (unchecked: :func:`config_to_hf` checks)."""
    transformers = importlib.import_module("transformers")  # optional extra: imported lazily
    act = cfg.activation.value
    ffp = f"gated-{T5_GATED_TO_HF[act]}" if cfg.ffn.gated else ACT_TO_HF[act]
    common = _common(cfg)
    common["tie_word_embeddings"] = cfg.head_scale != 1.0  # transformers 5: False means "do not rescale"
    return transformers.T5Config(
        **_written(cfg, T5_KEYS),
        dropout_rate=cfg.dropout,
        initializer_factor=cfg.init_std / 0.02,
        feed_forward_proj=ffp,
        decoder_start_token_id=cfg.pad_token_id,
        eos_token_id=None,
        **common,
    )
