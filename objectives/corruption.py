"""Pure corruption functions: masked LM, causal LM shift and T5 span corruption.

Every function works on a whole batch at once (no Python loop over tokens) and draws its randomness
from the `generator` argument (`None` = torch's global generator, which Lightning seeds and an exact
resume restores; see docs/scale.md).

Legend: B batch, L raw block length, T model sequence length, K selected / label positions per row.
"""

from __future__ import annotations

import torch
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.tokens import TokenIds

IGNORE = -100  # label value skipped by the loss (torch's cross_entropy default ignore_index)


def mlm_mask(
    tokens: torch.Tensor,
    ids: TokenIds,
    *,
    rate: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masked-LM corruption with a fixed number of selected positions per row.

    Each row selects exactly `round(rate * L)` non-special positions (uniformly, without replacement); a
    fixed count keeps the sparse MLM head's shape static for `torch.compile`. A row with fewer non-special
    tokens than that selects all of them. Of the selected positions 80 % become `[MASK]`, 10 % a random
    non-special token and 10 % stay unchanged (Devlin et al. 2019, sec. 3.1).

    Args:
        tokens: `(B, L)` long token ids.
        ids: the tokenizer's special ids; specials (including sentinels) are never selected.
        rate: fraction of the row to select.
        generator: source of randomness.

    Returns:
        `(inputs, labels)`, both `(B, L)`: corrupted inputs, and the original id at selected positions
        with `-100` elsewhere.
    """
    if not 0.0 < rate < 1.0:
        raise ObjectiveError(f"objective.mask_rate={rate} must be in (0, 1)")
    batch, length = tokens.shape
    device = tokens.device
    num_select = max(1, round(rate * length))
    special = ids.special_lookup(device)[tokens]  # (B, L)
    # Random scores, specials pushed past every real score: the smallest `num_select` are a uniform subset.
    scores = torch.rand(batch, length, generator=generator, device=device)
    scores = scores.masked_fill(special, 2.0)
    chosen = scores.topk(num_select, dim=1, largest=False).indices  # (B, K)
    selected = torch.zeros_like(special).scatter_(1, chosen, True) & ~special  # short rows drop specials

    action = torch.rand(batch, length, generator=generator, device=device)
    to_mask = selected & (action < 0.8)
    to_random = selected & (action >= 0.8) & (action < 0.9)
    normal = ids.normal_ids(device)
    pick = torch.randint(len(normal), (batch, length), generator=generator, device=device)
    inputs = torch.where(to_mask, torch.full_like(tokens, ids.mask), tokens)
    inputs = torch.where(to_random, normal[pick], inputs)
    labels = torch.where(selected, tokens, torch.full_like(tokens, IGNORE))
    return inputs, labels


def clm_shift(block: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal LM: predict token t+1 from tokens <= t.

    Slices the `(B, T + 1)` block instead of shifting the logits, so the `(B, T, V)` logits are never
    copied (see `famlab bench`). Returns `(inputs, labels)`, both `(B, T)` views of `block`.
    """
    return block[:, :-1], block[:, 1:]


def span_counts(length: int, density: float, mean_span: float) -> tuple[int, int]:
    """`(num_noise_tokens, num_noise_spans)` for a raw row of `length` tokens, as T5's random_spans_noise_mask."""
    num_noise = min(max(round(length * density), 1), length - 1)
    num_spans = max(round(num_noise / mean_span), 1)
    # Every noise and non-noise span needs at least one token.
    num_spans = min(num_spans, num_noise, length - num_noise)
    return num_noise, num_spans


def t5_lengths(inputs_len: int, density: float = 0.15, mean_span: float = 3.0) -> tuple[int, int]:
    """Raw block length and targets length for span corruption whose inputs fit `inputs_len` with no padding.

    T5's `random_spans_helper`: the largest raw length whose corrupted inputs (non-noise tokens, one sentinel
    per span, `[EOS]`) are at most `inputs_len` tokens. For `(512, 0.15, 3.0)` this is `(568, 114)`.

    Returns:
        `(raw_len, targets_len)`; the inputs then have `raw_len - noise + spans + 1 <= inputs_len` tokens.
    """
    if not 0.0 < density <= 0.5:
        raise ObjectiveError(f"objective.noise_density={density} must be in (0, 0.5]")
    if mean_span < 1.0:
        raise ObjectiveError(f"objective.mean_span={mean_span} must be >= 1")

    def inputs_targets(raw: int) -> tuple[int, int]:
        noise, spans = span_counts(raw, density, mean_span)
        return raw - noise + spans + 1, noise + spans + 1

    raw = inputs_len - 1
    if raw < 2 or inputs_targets(raw)[0] > inputs_len:
        raise ObjectiveError(f"sequence length {inputs_len} is too short for span corruption (need at least 3)")
    while inputs_targets(raw + 1)[0] <= inputs_len:
        raw += 1
    realised_inputs, targets_len = inputs_targets(raw)
    # T5's "minor hack": at density 0.5 keep the targets no longer than the inputs (a round number).
    if density == 0.5 and targets_len > realised_inputs:
        raw -= 1
        targets_len = inputs_targets(raw)[1]
    return raw, targets_len


def _random_segmentation(
    batch: int, num_items: int, num_segments: int, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """`(B, num_segments)` lengths: each row splits `num_items` into `num_segments` non-empty parts uniformly."""
    if num_segments == 1:
        return torch.full((batch, 1), num_items, dtype=torch.long, device=device)
    # Choose num_segments - 1 distinct cut points among 1 .. num_items - 1 (T5 shuffles a boolean vector).
    scores = torch.rand(batch, num_items - 1, generator=generator, device=device)
    cuts = scores.topk(num_segments - 1, dim=1).indices.sort(dim=1).values + 1  # (B, S - 1)
    zero = torch.zeros(batch, 1, dtype=torch.long, device=device)
    end = torch.full((batch, 1), num_items, dtype=torch.long, device=device)
    return torch.cat([zero, cuts, end], dim=1).diff(dim=1)  # (B, S)


def random_spans_noise_mask(
    batch: int,
    length: int,
    *,
    density: float = 0.15,
    mean_span: float = 3.0,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """T5's noise mask: alternating non-noise / noise spans, starting with non-noise.

    Every row has exactly `round(length * density)` noise tokens in `round(noise / mean_span)` spans
    (Raffel et al. 2020, `random_spans_noise_mask`).

    Returns:
        `(B, L)` bool, True at noise positions.
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    num_noise, num_spans = span_counts(length, density, mean_span)
    noise_lengths = _random_segmentation(batch, num_noise, num_spans, generator, device)  # (B, S)
    keep_lengths = _random_segmentation(batch, length - num_noise, num_spans, generator, device)  # (B, S)
    interleaved = torch.stack([keep_lengths, noise_lengths], dim=2).reshape(batch, 2 * num_spans)  # (B, 2S)
    starts = interleaved.cumsum(dim=1)[:, :-1]  # (B, 2S - 1) first index of every span after the first
    indicator = torch.zeros(batch, length, dtype=torch.long, device=device).scatter_(1, starts, 1)
    return indicator.cumsum(dim=1) % 2 == 1  # odd span numbers are noise


def _replace_spans(tokens: torch.Tensor, noise: torch.Tensor, sentinels: torch.Tensor, eos: int) -> torch.Tensor:
    """Replace each noise span by its sentinel, drop the rest of the span, append `[EOS]`.

    Every row has the same number of noise tokens and spans, so the kept tokens reshape to `(B, L')`.
    """
    batch = tokens.shape[0]
    previous = torch.nn.functional.pad(noise[:, :-1], (1, 0), value=False)
    first = noise & ~previous  # first token of each span
    span_index = first.long().cumsum(dim=1) - 1  # (B, L) 0 for the first span
    marked = torch.where(first, sentinels[span_index.clamp(min=0)], tokens)
    kept = marked[~(noise & previous)].reshape(batch, -1)
    return torch.cat([kept, torch.full((batch, 1), eos, dtype=tokens.dtype, device=tokens.device)], dim=1)


def span_corrupt(
    tokens: torch.Tensor,
    ids: TokenIds,
    *,
    density: float = 0.15,
    mean_span: float = 3.0,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """T5 span corruption of a `(B, L)` raw block.

    Inputs are the block with each noise span replaced by one sentinel (`sentinel_ids[i]` for the i-th span)
    and `[EOS]` appended; targets are `s0 span0 s1 span1 ... [EOS]`. With `L` from `t5_lengths` the inputs
    need no padding.

    Returns:
        `(inputs, targets)`: `(B, L - noise + spans + 1)` and `(B, noise + spans + 1)`.
    """
    batch, length = tokens.shape
    num_spans = span_counts(length, density, mean_span)[1]
    if num_spans > len(ids.sentinel_ids):
        raise ObjectiveError(
            f"span corruption of {length} tokens makes {num_spans} spans but the tokenizer has "
            f"{len(ids.sentinel_ids)} sentinels; raise data.tokenizer.num_sentinels"
        )
    noise = random_spans_noise_mask(
        batch, length, density=density, mean_span=mean_span, generator=generator, device=tokens.device
    )
    sentinels = torch.tensor(ids.sentinel_ids, dtype=tokens.dtype, device=tokens.device)
    inputs = _replace_spans(tokens, noise, sentinels, ids.eos)
    targets = _replace_spans(tokens, ~noise, sentinels, ids.eos)
    return inputs, targets
