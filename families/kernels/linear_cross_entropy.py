"""The LM head fused with its cross-entropy, for the dense LM loss (as Liger-Kernel's fused linear cross-entropy).

Reference: ``F.cross_entropy(head(hidden).float().flatten(0, -2), labels.flatten())`` with the head's logits
materialised (``famlab.families.heads.LMHead``; ``famlab.objectives.objective.dense_lm_loss`` chooses).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_INDEX = -100  # label of positions without a target (objectives.corruption.IGNORE; families do not import it)

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
    ``F.linear`` + ``F.cross_entropy`` + autograd, whose allocation and filling cost a small step much of its
    time on CPU. The matmul FLOPs are those of the unfused head; each matmul covers ``vocab_slice`` vocabulary
    columns, narrow matmuls being faster per FLOP on CPU than one over the whole vocabulary (both measured:
    docs/results.md, Speed).

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
    if grad_scale is not None:  # grad
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


class _Context(Protocol):
    """The autograd context (``torch.autograd.function.FunctionCtx``) as the two methods use it: ``grads`` is set
    by ``forward``."""

    needs_input_grad: tuple[bool, ...]
    grads: tuple[Tensor | None, ...] | None  # (grad of hidden, grad of weight) until backward hands them over


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward computes the loss and both gradients chunk by chunk; backward scales them by ``grad_output`` in
    place (not at all when it is 1, as for ``loss.backward()`` of a mean) and hands them over, so it can run once.
    """

    @staticmethod
    def forward(
        ctx: _Context,
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
    def backward(ctx: _Context, grad_output: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.grads is None:
            raise RuntimeError("the fused LM cross-entropy was already backpropagated (retain_graph is unsupported)")
        grads, ctx.grads = ctx.grads, None
        # skipping a multiplication by 1 reads the value: never on an accelerator (a host sync) or under
        # torch.compile (a data-dependent branch breaks the graph)
        if torch.compiler.is_compiling() or grad_output.device.type != "cpu" or not bool(grad_output == 1):
            grads = tuple(g.mul_(grad_output) if g is not None else None for g in grads)
        return *grads, None, None, None, None, None
