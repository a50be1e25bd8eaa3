"""Output heads: the (tied) LM head, BERT's MLM head, pooling and classification heads.

LM and MLM heads take the output weight as an argument so a tied head reads the embedding's own
parameter (one storage, one state-dict key) and an untied one owns its weight.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from famlab.families.blocks.feedforward import get_activation
from famlab.families.blocks.norms import make_norm
from torch import Tensor, nn

IGNORE_INDEX = -100  # label of positions without a target (objectives.corruption.IGNORE; families do not import it)


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
        weight = _output_weight(self.weight, tied_weight)
        if self.scale != 1.0:
            hidden = hidden * self.scale
        return F.linear(hidden, weight)

    def loss(
        self, hidden: Tensor, labels: Tensor, tied_weight: Tensor | None = None, *, reduction: str = "sum"
    ) -> Tensor:
        """Cross-entropy of the head's logits against ``labels`` (``-100`` skipped), logits never kept.

        Equal to ``F.cross_entropy(self(hidden, tied_weight).float().flatten(0, -2), labels.flatten(),
        reduction=reduction)``; see :func:`linear_cross_entropy`.
        """
        weight = _output_weight(self.weight, tied_weight)
        return linear_cross_entropy(hidden, weight, labels, scale=self.scale, reduction=reduction)


CHUNK_ELEMENTS = 1 << 22  # logits per row chunk of linear_cross_entropy: 16 MiB of fp32
VOCAB_SLICE = 1024  # vocabulary columns per matmul of linear_cross_entropy


def linear_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    labels: Tensor,
    *,
    scale: float = 1.0,
    reduction: str = "sum",
    chunk_elements: int = CHUNK_ELEMENTS,
    vocab_slice: int = VOCAB_SLICE,
) -> Tensor:
    """``sum_i CE(((scale * hidden_i) @ W^T), labels_i)`` over rows with a label (``-100`` = none), fp32;
    divided by the number of labelled rows with ``reduction="mean"`` (as ``F.cross_entropy``; 0 when none).

    The vocabulary projection fused with the loss (as Liger-Kernel's fused linear cross-entropy): rows go
    through in chunks of at most ``chunk_elements`` logits, and when a gradient is wanted each chunk's
    gradient ``softmax - onehot`` is formed in place in its logits buffers and pushed through the two
    backward matmuls at once. No ``(N, V)`` logits, log-probabilities or their gradients are kept between
    forward and backward: one logits buffer per chunk instead of the five ``(N, V)`` tensors of
    ``F.linear`` + ``F.cross_entropy`` + autograd (about a quarter of a small T5's step on CPU went to
    allocating and filling them). The matmul FLOPs are those of the unfused head; each matmul covers
    ``vocab_slice`` vocabulary columns (``(n, C) @ (C, 1024)`` ran about 1.3x faster per FLOP than one
    ``(n, C) @ (C, 8192)`` on the CPUs here).

    Args:
        hidden: ``(..., C)`` final hidden states.
        weight: ``(V, C)`` output (or tied embedding) weight.
        labels: ``(...)`` target ids, ``-100`` where there is no label.
        scale: Multiplier on ``hidden`` (T5's tied-head ``dim^-0.5``).
        reduction: ``sum`` or ``mean``. With ``mean`` the gradients are formed already divided, so the usual
            ``loss.backward()`` hands them to autograd without another pass over the ``(V, C)`` gradient.
        chunk_elements: Upper bound on the logits of one row chunk.
        vocab_slice: Vocabulary columns per matmul.
    """
    if hidden.shape[:-1] != labels.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} and labels {tuple(labels.shape)} disagree")
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean', got {reduction!r}")
    hidden, labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    rows = max(1, chunk_elements // weight.shape[0])
    divisor = (labels != IGNORE_INDEX).sum().clamp(min=1) if reduction == "mean" else None
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _LinearCrossEntropy.apply(hidden, weight, labels, scale, divisor, rows, vocab_slice)
    total = hidden.new_zeros((), dtype=torch.float32)
    for _, _, logits, chunk_labels in _chunk_logits(hidden, weight, labels, scale, rows, vocab_slice):
        total = total + _nll_into_grad_([x.float() for x in logits], chunk_labels, grad_scale=None)
    return total / divisor if divisor is not None else total


def _chunk_logits(
    hidden: Tensor, weight: Tensor, labels: Tensor, scale: float, rows: int, vocab_slice: int
) -> Iterator[tuple[int, Tensor, list[Tensor], Tensor]]:
    """Per chunk of ``rows`` rows: its first row, the scaled hidden ``(n, C)``, the logits as vocabulary slices
    ``(n, v)`` (bf16 under autocast) and the chunk's labels ``(n,)``."""
    slices = weight.split(vocab_slice)  # (v, C) views
    for start in range(0, hidden.shape[0], rows):
        h = hidden[start : start + rows]
        if scale != 1.0:
            h = h * scale
        yield start, h, [F.linear(h, w) for w in slices], labels[start : start + rows]


def _nll_into_grad_(logits: list[Tensor], labels: Tensor, *, grad_scale: Tensor | float | None) -> Tensor:
    """Summed NLL at ``labels`` ``(n,)`` of the fp32 logits given as consecutive vocabulary slices ``(n, v_j)``.

    With a ``grad_scale``, each slice is overwritten by its part of ``grad_scale * d NLL / d logits``
    (softmax - onehot on labelled rows, 0 on the others). In-place passes only: max, subtract + exp, sum,
    normalise + mask, scatter.
    """
    grad = grad_scale is not None
    valid = labels != IGNORE_INDEX
    local, in_slice, offset = [], [], 0
    for part in logits:  # each label's column within its slice
        width = part.shape[1]
        local.append((labels - offset).clamp(0, width - 1)[:, None])  # (n, 1)
        in_slice.append(valid & (labels >= offset) & (labels < offset + width))  # (n,)
        offset += width
    target = sum(p.gather(1, i).squeeze(1) * m for p, i, m in zip(logits, local, in_slice, strict=True))  # (n,)
    peak = torch.stack([p.amax(-1) for p in logits]).amax(0)[:, None]  # (n, 1)
    exps = [p.sub_(peak).exp_() if grad else (p - peak).exp_() for p in logits]
    total = sum(e.sum(-1, keepdim=True) for e in exps)  # (n, 1)
    nll = (total.log() + peak).squeeze(1) - target  # type: ignore[union-attr]
    if grad:
        weights = valid[:, None] * grad_scale / total  # softmax normaliser on labelled rows, 0 on the others
        for e, i, m in zip(exps, local, in_slice, strict=True):
            e.mul_(weights).scatter_add_(1, i, m[:, None].to(e.dtype) * -grad_scale)
    return nll.masked_fill(~valid, 0.0).sum()


def _mm_into(out: Tensor, a: Tensor, b: Tensor, *, accumulate: bool) -> None:
    """``out = a @ b`` or ``out += a @ b`` into contiguous ``out``, without a temporary when the dtypes agree."""
    if out.dtype != a.dtype:  # bf16 products into an fp32 gradient under autocast
        out.add_(a @ b) if accumulate else out.copy_(a @ b)
    elif accumulate:
        out.addmm_(a, b)
    else:
        torch.mm(a, b, out=out)


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward computes the loss and both gradients chunk by chunk; backward scales them by ``grad_output`` in
    place (not at all when it is 1, as for ``loss.backward()`` of a mean) and hands them over, so it can run once.
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: Tensor,
        weight: Tensor,
        labels: Tensor,
        scale: float,
        divisor: Tensor | None,
        rows: int,
        vocab_slice: int,
    ) -> Tensor:
        total = hidden.new_zeros((), dtype=torch.float32)
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.empty_like(weight) if ctx.needs_input_grad[1] else None  # (V, C), filled slice by slice
        slices = weight.split(vocab_slice)  # (v, C) views
        grad_scale = 1.0 / divisor if divisor is not None else 1.0
        for start, h, logits, chunk_labels in _chunk_logits(hidden, weight, labels, scale, rows, vocab_slice):
            probs = [x if x.dtype == torch.float32 else x.float() for x in logits]
            total = total + _nll_into_grad_(probs, chunk_labels, grad_scale=grad_scale)
            grads = [p.to(x.dtype) for p, x in zip(probs, logits, strict=True)]  # d loss / d logits
            if grad_hidden is not None:
                grad_h = grad_hidden[start : start + rows]  # (n, C), contiguous rows
                for j, (g, w) in enumerate(zip(grads, slices, strict=True)):
                    _mm_into(grad_h, g, w.to(g.dtype), accumulate=j > 0)
                if scale != 1.0:
                    grad_h.mul_(scale)
            if grad_weight is not None:
                h = h.to(grads[0].dtype)
                offset = 0
                for g in grads:  # each slice's rows of grad_weight, accumulated over row chunks
                    _mm_into(grad_weight[offset : offset + g.shape[1]], g.t(), h, accumulate=start > 0)
                    offset += g.shape[1]
        ctx.grads = (grad_hidden, grad_weight)  # results, not inputs: held on ctx and handed over once
        return total / divisor if divisor is not None else total

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.grads is None:
            raise RuntimeError("the fused LM cross-entropy was already backpropagated (retain_graph is unsupported)")
        grads, ctx.grads = ctx.grads, None
        if grad_output.device.type != "cpu" or not bool(grad_output == 1):  # no host sync on an accelerator
            grads = tuple(g.mul_(grad_output) if g is not None else None for g in grads)
        return *grads, None, None, None, None, None


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
