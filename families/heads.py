"""Output heads: the (tied) LM head, BERT's MLM head, pooling and classification heads.

LM and MLM heads take the output weight as an argument so a tied head reads the embedding's own
parameter (one storage, one state-dict key) and an untied one owns its weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from famlab.families.blocks.feedforward import get_activation
from famlab.families.blocks.norms import make_norm
from torch import Tensor, nn


def _output_weight(own: Tensor | None, tied: Tensor | None) -> Tensor:
    """A head's output weight: its own, or the embedding weight passed in when it is tied."""
    weight = own if own is not None else tied
    assert weight is not None, "a tied head needs the embedding weight"
    return weight


class LMHead(nn.Module):
    """``logits = (scale * h) @ W^T`` with W the token embedding (tied) or a weight of its own.

    Args:
        dim: Model width C.
        vocab_size: V.
        tied: Use the weight passed to :meth:`forward` (the token embedding).
        scale: Multiplier on ``h`` (T5 scales by d_model^-0.5 with a tied head, Mesh-TF convention).
    """

    def __init__(self, dim: int, vocab_size: int, *, tied: bool = True, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale
        self.weight = None if tied else nn.Parameter(torch.empty(vocab_size, dim).normal_(std=0.02))

    def forward(self, hidden: Tensor, tied_weight: Tensor | None = None) -> Tensor:
        """``(..., C) -> (..., V)``."""
        weight = self.output_weight(tied_weight)
        if self.scale != 1.0:
            hidden = hidden * self.scale
        return F.linear(hidden, weight)

    def output_weight(self, tied_weight: Tensor | None = None) -> Tensor:
        """The ``(V, C)`` weight :meth:`forward` multiplies by: the head's own, or ``tied_weight`` when tied."""
        return _output_weight(self.weight, tied_weight)


class MLMHead(nn.Module):
    """BERT's MLM head: dense + activation + norm, then the (tied) decoder with its own bias.

    Apply it to selected positions only (``net.project(hidden[labels != -100])``): the vocabulary
    projection is the most expensive matmul of a small BERT and only ~15 % of positions carry a label.
    """

    bias: Tensor

    def __init__(
        self,
        dim: int,
        vocab_size: int,
        *,
        activation: str = "gelu",
        norm: str = "layernorm",
        norm_eps: float = 1e-12,
        bias: bool = True,
        tied: bool = True,
    ) -> None:
        super().__init__()
        self.transform = nn.Linear(dim, dim, bias=bias)
        self.act = get_activation(activation)
        self.norm = make_norm(norm, dim, eps=norm_eps, bias=bias)
        self.weight = None if tied else nn.Parameter(torch.empty(vocab_size, dim).normal_(std=0.02))
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, hidden: Tensor, tied_weight: Tensor | None = None) -> Tensor:
        """``(..., C) -> (..., V)``."""
        weight = _output_weight(self.weight, tied_weight)
        return F.linear(self.norm(self.act(self.transform(hidden))), weight, self.bias)


def pool(hidden: Tensor, attention_mask: Tensor | None, how: str) -> Tensor:
    """Pool ``(B, T, C)`` to ``(B, C)``.

    Args:
        hidden: Final hidden states.
        attention_mask: ``(B, T)`` padding mask (1 = token) or None (no padding).
        how: ``cls`` (first position), ``last`` (last non-pad token, from the mask, so right and left padding
            both work; GPT-2 has no pad token), or ``mean`` (mean over non-pad tokens).
    """
    how = getattr(how, "value", how)
    if how == "cls":
        return hidden[:, 0]
    if attention_mask is None:
        return hidden[:, -1] if how == "last" else hidden.mean(dim=1) if how == "mean" else _bad_pool(how)
    keep = attention_mask.to(hidden.dtype)  # (B, T)
    if how == "last":
        T = hidden.shape[1]
        positions = torch.arange(T, device=hidden.device)
        last = (attention_mask.bool() * positions).max(dim=1).values  # (B,) index of the last kept token
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    if how == "mean":
        return (hidden * keep[..., None]).sum(1) / keep.sum(1, keepdim=True).clamp(min=1)
    return _bad_pool(how)


def _bad_pool(how: str) -> Tensor:
    raise ValueError(f"pooling={how!r} is not one of: cls, last, mean")


class Pooler(nn.Module):
    """BERT's pooler: dense + tanh on the pooled vector ``(B, C) -> (B, C)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.dense(x))


class ClassificationHead(nn.Module):
    """Optional pooler, optional standardisation, dropout and a linear classifier ``(B, C) -> (B, num_classes)``.

    Args:
        dim: Model width C.
        num_classes: Number of labels.
        dropout: Dropout before the classifier.
        pooler: Insert BERT's dense + tanh pooler first.
        standardize: Standardise each pooled feature over the batch (``BatchNorm1d`` without affine, running
            statistics at evaluation), as MAE's linear probe does (He et al. 2021): pretrained features can
            share one large constant direction with little spread between examples, which a freshly
            initialised linear classifier separates only slowly.
    """

    def __init__(
        self, dim: int, num_classes: int, dropout: float = 0.1, pooler: bool = False, standardize: bool = False
    ) -> None:
        super().__init__()
        self.pooler = Pooler(dim) if pooler else None
        self.norm = nn.BatchNorm1d(dim, affine=False) if standardize else None
        self.drop = nn.Dropout(dropout)
        self.classifier = nn.Linear(dim, num_classes)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, pooled: Tensor) -> Tensor:
        if self.pooler is not None:
            pooled = self.pooler(pooled)
        if self.norm is not None:
            if self.training and pooled.shape[0] == 1:  # an epoch's last batch of one has no batch statistics
                pooled = F.batch_norm(pooled, self.norm.running_mean, self.norm.running_var, eps=self.norm.eps)
            else:
                pooled = self.norm(pooled)
        return self.classifier(self.drop(pooled))
