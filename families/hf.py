"""Hugging Face interop: weight maps for ``BertForMaskedLM``, ``GPT2LMHeadModel`` and ``T5ForConditionalGeneration``.

``transformers`` is imported inside the functions only (it is an optional extra). The maps split or
concatenate where our blocks fuse projections: q/k/v into one ``qkv`` Linear, cross-attention k/v into
``kv``, T5 v1.1's ``wi_0``/``wi_1`` into the gated ``up`` Linear; GPT-2's ``Conv1D`` stores ``(in, out)``
weights, so they are transposed.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from famlab.families.config import ModelConfig
from torch import Tensor, nn

_ACT_FROM_HF = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
_ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}


def _kind(model: Any) -> str:
    name = type(model).__name__
    if name in ("BertForMaskedLM", "BertForPreTraining", "BertModel"):
        return "bert"
    if name in ("GPT2LMHeadModel", "GPT2Model"):
        return "gpt"
    if name in ("T5ForConditionalGeneration",):
        return "t5"
    raise ValueError(
        f"from_hf: unsupported model class {name}; expected BertForMaskedLM, GPT2LMHeadModel or "
        "T5ForConditionalGeneration"
    )


def _config(**kwargs: Any) -> ModelConfig:
    return ModelConfig(**kwargs)  # enum fields accept their string values (coerced in __post_init__)


def config_from_hf(model: Any) -> ModelConfig:
    """The :class:`ModelConfig` equivalent to a Hugging Face model's config."""
    kind, c = _kind(model), model.config
    if kind == "bert":
        return _config(
            family="bert",
            vocab_size=c.vocab_size,
            dim=c.hidden_size,
            num_layers=c.num_hidden_layers,
            num_heads=c.num_attention_heads,
            ffn_dim=c.intermediate_size,
            max_seq_len=c.max_position_embeddings,
            pos="learned",
            norm="layernorm",
            norm_position="post",
            ffn="plain",
            activation=_ACT_FROM_HF[c.hidden_act],
            dropout=c.hidden_dropout_prob,
            bias=True,
            tie_embeddings=True,
            type_vocab_size=c.type_vocab_size,
            norm_eps=c.layer_norm_eps,
            init="bert",
            init_std=c.initializer_range,
            pad_token_id=c.pad_token_id or 0,
        )
    if kind == "gpt":
        tied = model.lm_head.weight is model.transformer.wte.weight if hasattr(model, "lm_head") else True
        return _config(
            family="gpt",
            vocab_size=c.vocab_size,
            dim=c.n_embd,
            num_layers=c.n_layer,
            num_heads=c.n_head,
            ffn_dim=c.n_inner or 4 * c.n_embd,
            max_seq_len=c.n_positions,
            pos="learned",
            norm="layernorm",
            norm_position="pre",
            ffn="plain",
            activation=_ACT_FROM_HF[c.activation_function],
            dropout=c.resid_pdrop,
            bias=True,
            tie_embeddings=tied,
            norm_eps=c.layer_norm_epsilon,
            init="gpt2",
            init_std=c.initializer_range,
            pad_token_id=c.pad_token_id or 0,
        )
    tied = model.lm_head.weight.data_ptr() == model.shared.weight.data_ptr()
    # transformers 5 always ties T5's head and keeps the rescaling in `scale_decoder_outputs`; 4.x ties and
    # rescales together under `tie_word_embeddings`
    scaled = getattr(c, "scale_decoder_outputs", c.tie_word_embeddings)
    return _config(
        family="t5",
        vocab_size=c.vocab_size,
        dim=c.d_model,
        num_layers=c.num_layers,
        num_decoder_layers=c.num_decoder_layers,
        num_heads=c.num_heads,
        head_dim=c.d_kv,
        ffn_dim=c.d_ff,
        pos="t5_bias",
        norm="rmsnorm",
        norm_position="pre",
        ffn="gated" if c.is_gated_act else "plain",
        activation=_ACT_FROM_HF[c.dense_act_fn],
        dropout=c.dropout_rate,
        bias=False,
        tie_embeddings=tied,
        qk_scale=1.0,
        head_scale=c.d_model**-0.5 if scaled else 1.0,
        rel_pos_buckets=c.relative_attention_num_buckets,
        rel_pos_max_distance=c.relative_attention_max_distance,
        norm_eps=c.layer_norm_epsilon,
        init="t5",
        init_std=0.02 * c.initializer_factor,
        pad_token_id=c.pad_token_id or 0,
    )


def _bert_map(cfg: ModelConfig, prefix: str = "bert.") -> list[tuple[str, list[str], str]]:
    """(our key, HF keys, how) triples; how is ``copy``, ``cat`` (concatenate rows) or ``t`` (transpose)."""
    p = prefix
    m = [
        ("embed.weight", [f"{p}embeddings.word_embeddings.weight"], "copy"),
        ("token_types.weight", [f"{p}embeddings.token_type_embeddings.weight"], "copy"),
        ("encoder.positions.weight", [f"{p}embeddings.position_embeddings.weight"], "copy"),
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


def _bert_head_map() -> list[tuple[str, list[str], str]]:
    c = "cls.predictions."
    return [
        ("head.transform.weight", [f"{c}transform.dense.weight"], "copy"),
        ("head.transform.bias", [f"{c}transform.dense.bias"], "copy"),
        ("head.norm.weight", [f"{c}transform.LayerNorm.weight"], "copy"),
        ("head.norm.bias", [f"{c}transform.LayerNorm.bias"], "copy"),
        ("head.bias", [f"{c}bias"], "copy"),
    ]


def _gpt_map(cfg: ModelConfig) -> list[tuple[str, list[str], str]]:
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


def _t5_map(cfg: ModelConfig) -> list[tuple[str, list[str], str]]:
    m = [("embed.weight", ["shared.weight"], "copy")]
    wi = ["wi_0", "wi_1"] if cfg.ffn.value == "gated" else ["wi"]
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


def _weight_map(cfg: ModelConfig, kind_of_model: str) -> list[tuple[str, list[str], str]]:
    fam = cfg.family.value
    if fam == "bert":
        prefix = "" if kind_of_model == "BertModel" else "bert."
        m = _bert_map(cfg, prefix)
        if kind_of_model != "BertModel":
            m += _bert_head_map()
        return m
    return _gpt_map(cfg) if fam == "gpt" else _t5_map(cfg)


def from_hf(model: Any) -> nn.Module:
    """Our network carrying the weights of a Hugging Face ``BertForMaskedLM`` (also ``BertForPreTraining`` /
    ``BertModel``, whose MLM head is then left at its init), ``GPT2LMHeadModel`` or ``T5ForConditionalGeneration``
    (v1.0 ReLU or v1.1 gated-GELU; tied or untied head)."""
    from famlab.families import build_network

    cfg = config_from_hf(model)
    net = build_network(cfg)
    hf = model.state_dict()
    ours: dict[str, Tensor] = {}
    for key, sources, how in _weight_map(cfg, type(model).__name__):
        tensors = [hf[s] for s in sources]
        ours[key] = torch.cat(tensors, dim=0) if how == "cat" else tensors[0].t() if how == "t" else tensors[0]
    missing, unexpected = net.load_state_dict(ours, strict=False)
    if type(model).__name__ == "BertModel":
        missing = [k for k in missing if not k.startswith("head.")]
    if missing or unexpected:
        raise RuntimeError(f"from_hf weight map incomplete: missing {missing}, unexpected {unexpected}")
    return net.train(model.training)


def hf_pooler_state(model: Any) -> dict[str, Tensor] | None:
    """State dict for :class:`famlab.families.heads.Pooler` from a ``BertModel`` / ``BertForPreTraining`` checkpoint,
    or None when the model has no pooler (``BertForMaskedLM``, GPT-2, T5)."""
    base = getattr(model, "bert", model)
    pooler = getattr(base, "pooler", None)
    if pooler is None:
        return None
    return {"dense.weight": pooler.dense.weight.detach().clone(), "dense.bias": pooler.dense.bias.detach().clone()}


def _config_to_hf(cfg: ModelConfig) -> Any:
    transformers: Any = importlib.import_module("transformers")  # optional extra: imported lazily

    fam = cfg.family.value
    common = dict(vocab_size=cfg.vocab_size, pad_token_id=cfg.pad_token_id)
    if fam == "bert":
        _require(
            cfg, pos="learned", norm="layernorm", norm_position="post", ffn="plain", bias=True, tie_embeddings=True
        )
        return transformers.BertConfig(
            hidden_size=cfg.dim,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            intermediate_size=cfg.ffn_dim,
            max_position_embeddings=cfg.max_seq_len,
            hidden_act=_ACT_TO_HF[cfg.activation.value],
            hidden_dropout_prob=cfg.dropout,
            attention_probs_dropout_prob=cfg.dropout,
            type_vocab_size=cfg.type_vocab_size,
            layer_norm_eps=cfg.norm_eps,
            initializer_range=cfg.init_std,
            **common,
        )
    if fam == "gpt":
        _require(cfg, pos="learned", norm="layernorm", norm_position="pre", ffn="plain", bias=True)
        return transformers.GPT2Config(
            n_embd=cfg.dim,
            n_layer=cfg.num_layers,
            n_head=cfg.num_heads,
            n_inner=cfg.ffn_dim,
            n_positions=cfg.max_seq_len,
            activation_function=_ACT_TO_HF[cfg.activation.value],
            resid_pdrop=cfg.dropout,
            embd_pdrop=cfg.dropout,
            attn_pdrop=cfg.dropout,
            layer_norm_epsilon=cfg.norm_eps,
            initializer_range=cfg.init_std,
            tie_word_embeddings=cfg.tie_embeddings,
            bos_token_id=None,
            eos_token_id=None,
            **common,
        )
    _require(cfg, pos="t5_bias", norm="rmsnorm", norm_position="pre", bias=False)
    scaled = abs((cfg.head_scale or 1.0) - cfg.dim**-0.5) < 1e-9
    if not scaled and cfg.head_scale != 1.0:
        raise ValueError(f"to_hf: model.head_scale={cfg.head_scale} has no T5 equivalent (1.0 or dim^-0.5)")
    act = _ACT_TO_HF[cfg.activation.value]
    ffp = ("gated-gelu" if act == "gelu_new" else f"gated-{act}") if cfg.ffn.value == "gated" else act
    return transformers.T5Config(
        d_model=cfg.dim,
        d_kv=cfg.head_dim,
        d_ff=cfg.ffn_dim,
        num_layers=cfg.num_layers,
        num_decoder_layers=cfg.num_decoder_layers,
        num_heads=cfg.num_heads,
        relative_attention_num_buckets=cfg.rel_pos_buckets,
        relative_attention_max_distance=cfg.rel_pos_max_distance,
        dropout_rate=cfg.dropout,
        layer_norm_epsilon=cfg.norm_eps,
        initializer_factor=cfg.init_std / 0.02,
        feed_forward_proj=ffp,
        tie_word_embeddings=scaled,
        decoder_start_token_id=cfg.pad_token_id,
        eos_token_id=None,
        **common,
    )


def _require(cfg: ModelConfig, **want: object) -> None:
    for key, value in want.items():
        have = getattr(cfg, key)
        if getattr(have, "value", have) != value:
            raise ValueError(
                f"to_hf: model.{key}={getattr(have, 'value', have)} has no Hugging Face "
                f"{cfg.family.value} equivalent (needs {value})"
            )
    if cfg.num_kv_heads != cfg.num_heads:
        raise ValueError(f"to_hf: model.num_kv_heads={cfg.num_kv_heads} (GQA) has no Hugging Face equivalent")


def to_hf(net: nn.Module) -> Any:
    """Build the Hugging Face model equivalent to ``net`` (raises ValueError for settings HF cannot express)."""
    transformers: Any = importlib.import_module("transformers")  # optional extra: imported lazily

    cfg: ModelConfig = net.config  # type: ignore[assignment]
    fam = cfg.family.value
    hf_cfg = _config_to_hf(cfg)
    cls = {
        "bert": transformers.BertForMaskedLM,
        "gpt": transformers.GPT2LMHeadModel,
        "t5": transformers.T5ForConditionalGeneration,
    }[fam]
    model = cls(hf_cfg)
    if not cfg.tie_embeddings:  # transformers 5 ties T5 always: give the head its own parameter
        model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())
        if hasattr(model.config, "tie_word_embeddings"):
            model.config.tie_word_embeddings = False
    ours = net.state_dict()
    hf: dict[str, Tensor] = {}
    for key, targets, how in _weight_map(cfg, cls.__name__):
        value = ours[key]
        if how == "cat":
            sizes = [model.state_dict()[t].shape[0] for t in targets]
            for t, part in zip(targets, value.split(sizes, dim=0), strict=True):
                hf[t] = part
        else:
            hf[targets[0]] = value.t() if how == "t" else value
    with torch.no_grad():
        params = dict(model.named_parameters(remove_duplicate=False)) | dict(model.named_buffers())
        for name, value in hf.items():
            params[name].copy_(value)
    return model.train(net.training)
