"""Hugging Face interop: weight maps for ``BertForMaskedLM``, ``GPT2LMHeadModel`` and ``T5ForConditionalGeneration``.

``transformers`` is imported inside the functions only (it is an optional extra). The maps split or
concatenate where our blocks fuse projections: q/k/v into one ``qkv`` Linear, cross-attention k/v into
``kv``, T5 v1.1's ``wi_0``/``wi_1`` into the gated ``up`` Linear; GPT-2's ``Conv1D`` stores ``(in, out)``
weights, so they are transposed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import torch
from famlab.families.build import build_network
from famlab.families.config import ModelConfig
from famlab.families.hf_settings import HFConversionError, config_from_hf, config_to_hf, hf_adapter
from famlab.families.network import Network
from torch import Tensor, nn

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = [
    "HFConversionError", "bert_head_weight_map", "bert_lm_weight_map", "bert_weight_map", "config_from_hf",
    "copy_weights", "from_hf", "gpt2_weight_map", "hf_pooler_state", "t5_weight_map", "to_hf",
]


def bert_weight_map(cfg: ModelConfig, prefix: str = "bert.") -> list[tuple[str, list[str], str]]:
    """(our key, HF keys, how) triples of a BERT body; how is ``copy``, ``cat`` (concatenate rows) or ``t``
    (transpose). ``prefix="roformer."`` maps RoFormer's body, which has the same names and no position table."""
    p = prefix
    m = [
        ("embed.weight", [f"{p}embeddings.word_embeddings.weight"], "copy"),
        ("token_types.weight", [f"{p}embeddings.token_type_embeddings.weight"], "copy"),
    ]
    if cfg.pos.value == "learned":
        m.append(("encoder.positions.weight", [f"{p}embeddings.position_embeddings.weight"], "copy"))
    m += [
        ("encoder.embed_norm.weight", [f"{p}embeddings.LayerNorm.weight"], "copy"),
        ("encoder.embed_norm.bias", [f"{p}embeddings.LayerNorm.bias"], "copy"),
    ]
    for i in range(cfg.num_layers):
        h, o = f"{p}encoder.layer.{i}.", f"encoder.layers.{i}."
        for w in ("weight", "bias"):
            m += [
                (f"{o}attn.qkv.{w}", [f"{h}attention.self.{n}.{w}" for n in ("query", "key", "value")], "cat"),
                (f"{o}attn.o.{w}", [f"{h}attention.output.dense.{w}"], "copy"),
                (f"{o}attn_norm.{w}", [f"{h}attention.output.LayerNorm.{w}"], "copy"),
                (f"{o}ffn.up.{w}", [f"{h}intermediate.dense.{w}"], "copy"),
                (f"{o}ffn.down.{w}", [f"{h}output.dense.{w}"], "copy"),
                (f"{o}ffn_norm.{w}", [f"{h}output.LayerNorm.{w}"], "copy"),
            ]
    return m


def bert_head_weight_map(cfg: ModelConfig) -> list[tuple[str, list[str], str]]:
    """The MLM head's triples (``cls.predictions.*``, the same in ``BertForMaskedLM`` and ``RoFormerForMaskedLM``)."""
    c = "cls.predictions."
    untied = [] if cfg.tie_embeddings else [("head.weight", [f"{c}decoder.weight"], "copy")]
    return untied + [
        ("head.transform.weight", [f"{c}transform.dense.weight"], "copy"),
        ("head.transform.bias", [f"{c}transform.dense.bias"], "copy"),
        ("head.norm.weight", [f"{c}transform.LayerNorm.weight"], "copy"),
        ("head.norm.bias", [f"{c}transform.LayerNorm.bias"], "copy"),
        ("head.bias", [f"{c}bias"], "copy"),
        # the forward adds decoder.bias, which transformers ties to cls.predictions.bias only when the word
        # embeddings are tied too: an untied head needs it written (and from_hf reads it, the last entry)
        ("head.bias", [f"{c}decoder.bias"], "copy"),
    ]


def gpt2_weight_map(cfg: ModelConfig, hf_class: str = "GPT2LMHeadModel") -> list[tuple[str, list[str], str]]:
    """(our key, HF keys, how) triples of a ``GPT2LMHeadModel`` (``GPT2Model``'s keys are the same under
    ``transformer.``; ``from_hf`` reads either)."""
    m = [
        ("embed.weight", ["transformer.wte.weight"], "copy"),
        ("decoder.positions.weight", ["transformer.wpe.weight"], "copy"),
        ("decoder.final_norm.weight", ["transformer.ln_f.weight"], "copy"),
        ("decoder.final_norm.bias", ["transformer.ln_f.bias"], "copy"),
    ]
    for i in range(cfg.num_layers):
        h, o = f"transformer.h.{i}.", f"decoder.layers.{i}."
        m += [
            (f"{o}attn.qkv.weight", [f"{h}attn.c_attn.weight"], "t"),
            (f"{o}attn.qkv.bias", [f"{h}attn.c_attn.bias"], "copy"),
            (f"{o}attn.o.weight", [f"{h}attn.c_proj.weight"], "t"),
            (f"{o}attn.o.bias", [f"{h}attn.c_proj.bias"], "copy"),
            (f"{o}ffn.up.weight", [f"{h}mlp.c_fc.weight"], "t"),
            (f"{o}ffn.up.bias", [f"{h}mlp.c_fc.bias"], "copy"),
            (f"{o}ffn.down.weight", [f"{h}mlp.c_proj.weight"], "t"),
            (f"{o}ffn.down.bias", [f"{h}mlp.c_proj.bias"], "copy"),
        ]
        for w in ("weight", "bias"):
            m += [(f"{o}attn_norm.{w}", [f"{h}ln_1.{w}"], "copy"), (f"{o}ffn_norm.{w}", [f"{h}ln_2.{w}"], "copy")]
    if not cfg.tie_embeddings:
        m.append(("head.weight", ["lm_head.weight"], "copy"))
    return m


def t5_weight_map(cfg: ModelConfig, hf_class: str = "T5ForConditionalGeneration") -> list[tuple[str, list[str], str]]:
    """(our key, HF keys, how) triples of a ``T5ForConditionalGeneration``."""
    m = [("embed.weight", ["shared.weight"], "copy")]
    wi = ["wi_0", "wi_1"] if cfg.ffn.gated else ["wi"]
    for side, depth in (("encoder", cfg.num_layers), ("decoder", cfg.num_decoder_layers or 0)):
        m += [
            (
                f"{side}.positions.weight",
                [f"{side}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"],
                "copy",
            ),
            (f"{side}.final_norm.weight", [f"{side}.final_layer_norm.weight"], "copy"),
        ]
        for i in range(depth):
            h, o = f"{side}.block.{i}.layer.", f"{side}.layers.{i}."
            m += [
                (f"{o}attn.qkv.weight", [f"{h}0.SelfAttention.{n}.weight" for n in "qkv"], "cat"),
                (f"{o}attn.o.weight", [f"{h}0.SelfAttention.o.weight"], "copy"),
                (f"{o}attn_norm.weight", [f"{h}0.layer_norm.weight"], "copy"),
            ]
            f = 1
            if side == "decoder":
                f = 2
                m += [
                    (f"{o}cross_attn.q.weight", [f"{h}1.EncDecAttention.q.weight"], "copy"),
                    (f"{o}cross_attn.kv.weight", [f"{h}1.EncDecAttention.{n}.weight" for n in "kv"], "cat"),
                    (f"{o}cross_attn.o.weight", [f"{h}1.EncDecAttention.o.weight"], "copy"),
                    (f"{o}cross_norm.weight", [f"{h}1.layer_norm.weight"], "copy"),
                ]
            m += [
                (f"{o}ffn.up.weight", [f"{h}{f}.DenseReluDense.{n}.weight" for n in wi], "cat"),
                (f"{o}ffn.down.weight", [f"{h}{f}.DenseReluDense.wo.weight"], "copy"),
                (f"{o}ffn_norm.weight", [f"{h}{f}.layer_norm.weight"], "copy"),
            ]
    if not cfg.tie_embeddings:
        m.append(("head.weight", ["lm_head.weight"], "copy"))
    return m


def bert_lm_weight_map(cfg: ModelConfig, hf_class: str = "BertForMaskedLM") -> list[tuple[str, list[str], str]]:
    """(our key, HF keys, how) triples of a ``BertForMaskedLM`` / ``BertForPreTraining`` (body and MLM head), or of a
    ``BertModel`` (the body only, without the ``bert.`` prefix)."""
    if hf_class == "BertModel":
        return bert_weight_map(cfg, "")
    return bert_weight_map(cfg, "bert.") + bert_head_weight_map(cfg)


def _weight_map(cfg: ModelConfig, hf_class: str) -> list[tuple[str, list[str], str]]:
    return hf_adapter(cfg.family.value).weight_map(cfg, hf_class)


def from_hf(model: PreTrainedModel) -> Network:
    """Our network carrying the weights of a Hugging Face ``BertForMaskedLM`` (also ``BertForPreTraining`` /
    ``BertModel``, whose MLM head is then left at its init), ``GPT2LMHeadModel`` or ``T5ForConditionalGeneration``
    (v1.0 ReLU or v1.1 gated-GELU; tied or untied head)."""
    cfg = config_from_hf(model)
    net = build_network(cfg)
    hf = model.state_dict()
    ours: dict[str, Tensor] = {}
    for key, sources, how in _weight_map(cfg, type(model).__name__):
        tensors = [hf[s] for s in sources]
        ours[key] = torch.cat(tensors, dim=0) if how == "cat" else tensors[0].t() if how == "t" else tensors[0]
    missing, unexpected = net.load_state_dict(ours, strict=False)
    if type(model).__name__ in hf_adapter(cfg.family.value).bodies:  # a body without the LM head
        missing = [k for k in missing if not k.startswith("head.")]
    if missing or unexpected:
        raise RuntimeError(f"from_hf weight map incomplete: missing {missing}, unexpected {unexpected}")
    return net.train(model.training)


def hf_pooler_state(model: PreTrainedModel) -> dict[str, Tensor] | None:
    """State dict for :class:`famlab.families.heads.Pooler` from a ``BertModel`` / ``BertForPreTraining`` checkpoint,
    or None when the model has no pooler (``BertForMaskedLM``, GPT-2, T5)."""
    base = getattr(model, "bert", model)
    pooler = getattr(base, "pooler", None)
    if pooler is None:
        return None
    return {"dense.weight": pooler.dense.weight.detach().clone(), "dense.bias": pooler.dense.bias.detach().clone()}


def to_hf(net: Network) -> PreTrainedModel:
    """Build the Hugging Face model equivalent to ``net``; raises HFConversionError (a ValueError) naming the first
    ``model.*`` setting HF cannot express."""
    transformers = importlib.import_module("transformers")  # optional extra: imported lazily

    cfg = net.config
    hf_cfg = config_to_hf(cfg)  # refuses what HF cannot express, before anything is built
    adapter = hf_adapter(cfg.family.value)
    cls = getattr(transformers, adapter.lm_class)
    model = cls(hf_cfg)
    if adapter.always_tied and not cfg.tie_embeddings:  # e.g. transformers 5 ties T5 always: give the head its own
        model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())
        if hasattr(model.config, "tie_word_embeddings"):
            model.config.tie_word_embeddings = False
    copy_weights(model, net.state_dict(), _weight_map(cfg, cls.__name__))
    return model.train(net.training)


def copy_weights(model: nn.Module, ours: dict[str, Tensor], weight_map: list[tuple[str, list[str], str]]) -> None:
    """Copy the famlab state dict ``ours`` into the Hugging Face ``model`` along ``weight_map`` (a ``cat`` key is
    split into its targets' row counts, a ``t`` key transposed); a tied HF parameter is found under any of its names."""
    state = model.state_dict()
    hf: dict[str, Tensor] = {}
    for key, targets, how in weight_map:
        value = ours[key]
        if how == "cat":
            sizes = [state[t].shape[0] for t in targets]
            for t, part in zip(targets, value.split(sizes, dim=0), strict=True):
                hf[t] = part
        else:
            hf[targets[0]] = value.t() if how == "t" else value
    with torch.no_grad():
        params = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers())
        for name, value in hf.items():
            params[name].copy_(value)
