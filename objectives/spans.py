"""SpanBERT's span masking (Joshi et al. 2020): contiguous spans with geometric lengths, 80/10/10 per span.

Legend: B batch, L raw block length, M spans per row (at most the budget K), K masked tokens per row.
"""

from __future__ import annotations

import math

import torch
from famlab.objectives.corruption import IGNORE
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.tokens import TokenIds


def geometric_span_lengths(
    shape: tuple[int, ...], *, p: float = 0.2, max_span: int = 10, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Span lengths from Geometric(p) on {1, 2, ...} truncated to `<= max_span` (renormalised, not clamped).

    SpanBERT's clipped geometric: with p=0.2 and max 10 the mean is 3.8 tokens (their sec. 3.1); clamping
    instead would pile 10 % of the mass on `max_span` and give a mean of 4.5. Inverse-CDF sampling, so the
    draw comes from `generator`.
    """
    if not 0.0 < p < 1.0:
        raise ObjectiveError(f"objective.span_p={p} must be in (0, 1)")
    if max_span < 1:
        raise ObjectiveError(f"objective.max_span={max_span} must be >= 1")
    q = 1.0 - p
    top = 1.0 - q**max_span  # CDF at max_span
    u = torch.rand(shape, generator=generator, dtype=torch.float64) * top  # uniform on [0, F(max_span))
    lengths = torch.floor(torch.log1p(-u) / math.log(q)).long() + 1
    return lengths.clamp(1, max_span)  # clamp only guards rounding at the top edge


def span_mlm_mask(
    tokens: torch.Tensor,
    ids: TokenIds,
    *,
    rate: float = 0.15,
    p: float = 0.2,
    max_span: int = 10,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SpanBERT corruption of a `(B, L)` block: `round(rate * L)` tokens per row in geometric-length spans.

    Span lengths are drawn until their sum reaches the budget K (the last one is cut to fit), so every row
    masks exactly K positions (static shapes for the sparse MLM head) minus any special tokens a span
    covers (a packed block's separators are never labels). Spans do not overlap or touch: their gaps are a
    uniformly random placement of the spans among the L - K kept tokens. Each span as a whole becomes
    `[MASK]` (80 %), random non-special tokens (10 %) or stays (10 %), as SpanBERT. Spans are over tokens,
    not whole words (SpanBERT masks complete words).

    Returns:
        `(inputs, labels)`, both `(B, L)`; labels hold the original id at masked positions, -100 elsewhere.
    """
    if not 0.0 < rate < 1.0:
        raise ObjectiveError(f"objective.mask_rate={rate} must be in (0, 1)")
    batch, length = tokens.shape
    device = tokens.device
    budget = max(1, round(rate * length))  # K
    if budget > length // 2:
        raise ObjectiveError(f"objective.mask_rate={rate} leaves too few kept tokens to separate spans")
    starts, lengths, used = _place_spans(batch, length, budget, p=p, max_span=max_span, generator=generator,
                                         device=device)
    inside, span_id = _span_cover(starts, lengths, used, length)
    action = torch.rand(batch, budget, generator=generator).to(device).gather(1, span_id)  # (B, L)
    return _corrupt_spans(tokens, ids, inside, action, generator)


def _place_spans(
    batch: int, length: int, budget: int, *, p: float, max_span: int, generator: torch.Generator | None,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(starts, lengths, used)``, each ``(B, K)``: per row, geometric span lengths summing to exactly ``budget``
    (K) placed without overlapping or touching among ``length`` positions; ``used`` marks the real spans (the
    rest have zero length)."""
    # Draw K lengths (enough: every span has >= 1 token), keep them while the running total stays < K and
    # cut the one that crosses K, so the lengths sum to exactly K.
    lengths = geometric_span_lengths((batch, budget), p=p, max_span=max_span, generator=generator).to(device)
    before = lengths.cumsum(1) - lengths  # (B, M) tokens in earlier spans
    lengths = torch.minimum(lengths, (budget - before).clamp(min=0))  # (B, M), zeros after the budget
    num_spans = (lengths > 0).sum(1)  # (B,)
    # Place the spans: choose num_spans distinct slots among the L - K + 1 gaps between kept tokens. The first
    # num_spans of a random permutation are a uniform subset; unused slots sort to the end.
    slots = length - budget + 1
    perm = torch.rand(batch, slots, generator=generator).to(device).argsort(1)[:, :budget]  # (B, M)
    used = torch.arange(budget, device=device)[None] < num_spans[:, None]
    slot = torch.where(used, perm, torch.full_like(perm, slots)).sort(1).values  # (B, M) ascending
    starts = slot + (lengths.cumsum(1) - lengths)  # kept tokens before + masked tokens before
    return starts, lengths, used


def _span_cover(
    starts: torch.Tensor, lengths: torch.Tensor, used: torch.Tensor, length: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inside, span_id)``, both ``(B, L)``: whether a position lies in a span, and which span (the index of the
    last span started at or before it, 0 before the first)."""
    batch, device = starts.shape[0], starts.device
    ends = starts + lengths
    # +1 at each start, -1 at each end, cumsum -> 1 inside spans (spans are disjoint). Unused spans have
    # zero length and cancel out; index `length` absorbs ends at the edge.
    delta = torch.zeros(batch, length + 1, dtype=torch.long, device=device)
    delta.scatter_add_(1, starts.clamp(max=length), used.long())
    delta.scatter_add_(1, ends.clamp(max=length), -used.long())
    inside = delta.cumsum(1)[:, :length] > 0  # (B, L)
    # Which span each position belongs to, to decide 80/10/10 per span.
    span_id = torch.zeros(batch, length + 1, dtype=torch.long, device=device)
    span_id.scatter_add_(1, starts.clamp(max=length), used.long())
    span_id = (span_id.cumsum(1)[:, :length] - 1).clamp(min=0)  # (B, L)
    return inside, span_id


def _corrupt_spans(
    tokens: torch.Tensor, ids: TokenIds, inside: torch.Tensor, action: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SpanBERT's 80/10/10 on the non-special positions ``inside`` spans, by each position's span's ``action``
    draw in [0, 1): ``[MASK]`` below 0.8, a random non-special token below 0.9, else kept; ``(inputs, labels)``."""
    batch, length = tokens.shape
    device = tokens.device
    special = ids.special_lookup(device)[tokens]
    selected = inside & ~special
    to_mask = selected & (action < 0.8)
    to_random = selected & (action >= 0.8) & (action < 0.9)
    normal = ids.normal_ids(device)
    pick = torch.randint(len(normal), (batch, length), generator=generator).to(device)
    inputs = torch.where(to_mask, torch.full_like(tokens, ids.mask), tokens)
    inputs = torch.where(to_random, normal[pick], inputs)
    labels = torch.where(selected, tokens, torch.full_like(tokens, IGNORE))
    return inputs, labels
