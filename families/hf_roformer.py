"""A famlab BERT with rotary positions (``model.pos=rope``) as Hugging Face's ``RoFormerForMaskedLM``.

RoFormer (Su et al. 2021; transformers' ``models/roformer/modeling_roformer.py``) is BERT with rotary q/k and no
absolute position table, so the BERT weight map carries over under the ``roformer.`` prefix, the MLM head
(dense + activation + LayerNorm, tied decoder with its own bias) included. What differs:

- the rotation's layout. RoFormer rotates the interleaved pairs ``(x_2i, x_2i+1)`` of a head by ``pos * f_i``,
  famlab's :class:`~famlab.families.blocks.positions.RotaryPositions` the halves ``(x_i, x_i+D/2)`` by the same
  angle (GPT-NeoX's rotate-half layout). Reordering the output rows of q and k inside each head (new row ``2i`` =
  old row ``i``, new row ``2i+1`` = old row ``i + D/2``) turns one into the other, and as q and k get the same
  reordering every score ``q . k`` is unchanged (values and the output projection are not touched);
- what RoFormer fixes: the base (``f_i = 10000^(-2i/D)``, its sinusoidal table), rotary on q and k only
  (``rotary_value=False``), ``embedding_size == hidden_size`` (no embedding projection), a table of
  ``max_position_embeddings = model.max_seq_len`` positions.

Everything else must be what ``BertForMaskedLM`` expresses (``famlab.families.hf_settings.check_expressible``).
``RoFormerForSequenceClassification`` cannot express a famlab classifier: its head reads ``[CLS]`` through a
dense layer and the model's feed-forward activation, where famlab's ``cls`` pooling is BERT's dense + tanh pooler.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import TYPE_CHECKING

import torch
from famlab.families.config import ModelConfig
from famlab.families.faithful import family_defaults
from famlab.families.hf import bert_head_weight_map, bert_weight_map, copy_weights
from famlab.families.hf_settings import HFConversionError, check_expressible, config_to_hf
from famlab.families.network import Network
from famlab.families.registry import family, family_names
from torch import Tensor

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ROFORMER_BASE = 10000.0  # RoFormerSinusoidalPositionalEmbedding.create_weight: pos / 10000^(2i/D)
# BertConfig keys RoFormerConfig reads with the same meaning
SHARED_KEYS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "hidden_act",
    "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
    "initializer_range", "layer_norm_eps", "pad_token_id", "tie_word_embeddings",
)  # fmt: skip


def is_roformer(cfg: ModelConfig) -> bool:
    """Whether ``cfg`` is exported as RoFormer: a network of a family whose Hugging Face adapter says so (BERT's,
    ``HFAdapter.rope_variant``) with rotary positions."""
    adapter = family(cfg.family).hf if cfg.family.value in family_names() else None
    return adapter is not None and adapter.rope_variant and cfg.pos.value == "rope"


def _as_bert(cfg: ModelConfig) -> ModelConfig:
    """``cfg`` with its family's (BERT's) own position scheme: the settings RoFormer shares with ``BertForMaskedLM``."""
    return dataclasses.replace(cfg, pos=family_defaults(cfg.family.value).model["pos"])


def check_roformer_expressible(cfg: ModelConfig) -> None:
    """Raise HFConversionError naming the first ``model.*`` setting ``RoFormerForMaskedLM`` cannot express."""
    if not is_roformer(cfg):
        raise HFConversionError(
            f"to_hf: model.family={cfg.family.value} with model.pos={cfg.pos.value} is not a RoFormer "
            "(needs bert with rope)"
        )
    if not math.isclose(cfg.rope_theta, ROFORMER_BASE, rel_tol=1e-9):
        raise HFConversionError(
            f"to_hf: model.rope_theta={cfg.rope_theta:g} is not expressible in Hugging Face's RoFormer "
            f"(its rotary base is fixed at {ROFORMER_BASE:g})"
        )
    check_expressible(_as_bert(cfg))


def interleave_rows(x: Tensor, num_heads: int) -> Tensor:
    """Rows of a q or k projection ``(H*D, ...)`` from the rotate-half order to RoFormer's interleaved order:
    inside each head, new row ``2i`` = old row ``i`` and new row ``2i+1`` = old row ``i + D/2``."""
    D = x.shape[0] // num_heads
    half = torch.arange(D // 2)
    order = torch.stack((half, half + D // 2), dim=1).flatten()  # (D,): 0, D/2, 1, D/2 + 1, ...
    return x.unflatten(0, (num_heads, D))[:, order].flatten(0, 1)  # (H, D, ...) -> (H*D, ...)


def roformer_to_hf(net: Network) -> PreTrainedModel:
    """``RoFormerForMaskedLM`` with the logits of the rotary BERT ``net``; raises HFConversionError (before anything
    is built) naming the first ``model.*`` setting RoFormer cannot express."""
    transformers = importlib.import_module("transformers")  # optional extra: imported lazily

    cfg = net.config
    check_roformer_expressible(cfg)
    bert = config_to_hf(_as_bert(cfg))
    hf_cfg = transformers.RoFormerConfig(
        **{k: getattr(bert, k) for k in SHARED_KEYS}, embedding_size=cfg.dim, rotary_value=False, is_decoder=False
    )
    model = transformers.RoFormerForMaskedLM(hf_cfg)
    ours = dict(net.state_dict())
    n = cfg.num_heads * (cfg.head_dim or 0)  # rows of q and of k in the fused qkv projection (no GQA: checked)
    for key in [k for k in ours if k.endswith((".attn.qkv.weight", ".attn.qkv.bias"))]:
        q, k, v = ours[key].split([n, n, ours[key].shape[0] - 2 * n])
        ours[key] = torch.cat((interleave_rows(q, cfg.num_heads), interleave_rows(k, cfg.num_heads), v))
    copy_weights(model, ours, bert_weight_map(cfg, "roformer.") + bert_head_weight_map(cfg))
    return model.train(net.training)
