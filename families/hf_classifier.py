"""A fine-tuned famlab classifier (network + :class:`ClassificationHead`) as a Hugging Face
``…ForSequenceClassification`` with the same logits.

Which poolings HF's classes compute:

| family | famlab pooling | Hugging Face class |
|---|---|---|
| bert | ``cls`` (pooler dense + tanh on ``[CLS]``) | ``BertForSequenceClassification`` |
| gpt | ``last`` (last non-pad token) | ``GPT2ForSequenceClassification`` (last token that is not ``pad_token_id``) |

Every other pooling, and T5 (whose HF classifier reads the decoder at the last ``[EOS]``), is refused with one
line. Two exact rewrites make the head fit: a ``standardize`` head's batch norm (evaluation statistics, no
affine) is folded into the classifier, and GPT-2's ``score`` Linear, which has no bias, gets ours through the
final LayerNorm's bias: ``W (γ n + β') = W (γ n + β) + b`` for ``β' = β + W⁺ b`` (``W⁺`` the pseudo-inverse;
exact when the K x C classifier has full row rank, checked).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import torch
from famlab.families import registry
from famlab.families.heads import ClassificationHead, Pooler
from famlab.families.hf import to_hf
from famlab.families.hf_settings import HFConversionError
from famlab.families.network import Network
from torch import Tensor

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def check_classifier_expressible(family: str, pooling: str) -> None:
    """Raise HFConversionError unless HF has a sequence classifier computing ``pooling`` for ``family`` (its
    :class:`~famlab.families.registry.HFAdapter`'s ``classifier_pooling``)."""
    adapter = registry.family(family).hf if family in registry.family_names() else None
    if adapter is None or adapter.classifier is None:
        raise HFConversionError(
            f"export: model.family={family} classifiers have no Hugging Face class with famlab's pooling "
            f"(finetune.pooling={pooling}; T5ForSequenceClassification reads the decoder at the last [EOS])"
        )
    if pooling != adapter.classifier_pooling:
        raise HFConversionError(
            f"export: finetune.pooling={pooling} has no Hugging Face {family} sequence classifier "
            f"(it pools with {adapter.classifier_pooling})"
        )


def folded_classifier(head: ClassificationHead) -> tuple[Tensor, Tensor]:
    """The classifier's ``(K, C)`` weight and ``(K,)`` bias with the evaluation-mode standardisation folded in."""
    weight, bias = head.classifier.weight.detach().double(), head.classifier.bias.detach().double()
    if head.norm is not None:
        assert head.norm.running_mean is not None and head.norm.running_var is not None
        inv_std = (head.norm.running_var.double() + head.norm.eps).rsqrt()  # (C,)
        weight = weight * inv_std
        bias = bias - weight @ head.norm.running_mean.double()
    return weight, bias


def classifier_to_hf(net: Network, head: ClassificationHead, pooling: str, labels: list[str]) -> PreTrainedModel:
    """``BertForSequenceClassification`` / ``GPT2ForSequenceClassification`` equivalent to ``head(pool(net(x)))``
    in evaluation mode, with ``id2label`` from ``labels``; raises HFConversionError for what HF cannot express."""
    family = str(getattr(net, "family", ""))
    check_classifier_expressible(family, pooling)
    lm = to_hf(net)  # checks the network's settings before anything else is built
    config = lm.config
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {name: i for i, name in enumerate(labels)}
    config.tie_word_embeddings = False
    weight, bias = folded_classifier(head)
    adapter = registry.family(family).hf
    assert adapter is not None and adapter.classifier is not None  # checked
    model, state = adapter.classifier(lm, weight, bias, head.pooler)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(".attn.bias") and "masked_bias" not in k]
    if missing or unexpected:
        raise RuntimeError(f"classifier_to_hf: missing {missing}, unexpected {unexpected}")
    return model.eval()


def bert_classifier(lm: PreTrainedModel, weight: Tensor, bias: Tensor, pooler: Pooler | None
                    ) -> tuple[PreTrainedModel, dict[str, Tensor]]:
    """``BertForSequenceClassification`` (``cls`` pooling through the head's pooler) and its state dict."""
    transformers = importlib.import_module("transformers")  # optional extra: imported lazily
    model = transformers.BertForSequenceClassification(lm.config)
    state = {k: v for k, v in lm.state_dict().items() if k.startswith("bert.")}
    assert pooler is not None
    state["bert.pooler.dense.weight"] = pooler.dense.weight.detach()
    state["bert.pooler.dense.bias"] = pooler.dense.bias.detach()
    state["classifier.weight"], state["classifier.bias"] = weight.float(), bias.float()
    return model, state


def gpt2_classifier(lm: PreTrainedModel, weight: Tensor, bias: Tensor, pooler: Pooler | None
                    ) -> tuple[PreTrainedModel, dict[str, Tensor]]:
    """``GPT2ForSequenceClassification`` (``last`` pooling; the bias moved into the final LayerNorm) and its state."""
    transformers = importlib.import_module("transformers")  # optional extra: imported lazily
    model = transformers.GPT2ForSequenceClassification(lm.config)
    state = {k: v for k, v in lm.state_dict().items() if k.startswith("transformer.")}
    beta = state["transformer.ln_f.bias"].double()
    shift = torch.linalg.pinv(weight) @ bias  # (C,): W shift = b when W has full row rank
    if (weight @ shift - bias).abs().max() > 1e-6 * max(1.0, bias.abs().max().item()):
        raise HFConversionError(
            "export: the classifier's bias cannot move into GPT-2's final LayerNorm (its weight is rank-deficient)"
        )
    state["transformer.ln_f.bias"] = (beta + shift).float()
    state["score.weight"] = weight.float()
    return model, state
