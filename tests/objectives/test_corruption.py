"""Statistics and exact properties of the corruption functions (MLM, CLM, T5 span corruption)."""

import math

import numpy as np
import pytest
import torch
from famlab.objectives import ObjectiveError, clm_shift, mlm_mask, random_spans_noise_mask, span_corrupt, t5_lengths


def _blocks(batch: int, length: int, vocab: int, seed: int = 0, sep_every: int | None = None) -> torch.Tensor:
    """Random non-special tokens (ids 10 .. vocab-101), optionally with [SEP] (id 3) at random places."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(10, vocab - 100, (batch, length), generator=g)
    if sep_every:
        seps = torch.rand(batch, length, generator=g) < 1.0 / sep_every
        tokens = tokens.masked_fill(seps, 3)
    return tokens


# -- MLM ----------------------------------------------------------------------------------------------------------


def test_mlm_selects_fixed_count_of_non_special_tokens(ids):
    """Every row selects exactly round(0.15 L) positions, none of them special; labels are -100 elsewhere."""
    tokens = _blocks(64, 127, ids.vocab_size, sep_every=8)
    inputs, labels = mlm_mask(tokens, ids, generator=torch.Generator().manual_seed(1))
    selected = labels != -100
    assert (selected.sum(1) == round(0.15 * 127)).all()
    assert not (selected & (tokens == ids.sep)).any()
    torch.testing.assert_close(labels[selected], tokens[selected])
    # Unselected positions are never changed.
    torch.testing.assert_close(inputs[~selected], tokens[~selected])


def test_mlm_80_10_10_split_within_sampling_error(ids):
    """Of ~50k selected positions, 80 % become [MASK], 10 % a random non-special token, 10 % stay."""
    tokens = _blocks(512, 640, ids.vocab_size)
    inputs, labels = mlm_mask(tokens, ids, generator=torch.Generator().manual_seed(2))
    selected = labels != -100
    n = int(selected.sum())
    assert abs(n / tokens.numel() - 0.15) < 1e-3
    masked = (inputs == ids.mask) & selected
    changed = (inputs != tokens) & (inputs != ids.mask) & selected
    same = (inputs == tokens) & selected
    # A random replacement equals the original with probability 1 / (non-special count): expected shift.
    p_collide = 1.0 / (ids.vocab_size - len(ids.special))
    for count, p in ((masked, 0.8), (changed, 0.1 * (1 - p_collide)), (same, 0.1 + 0.1 * p_collide)):
        sigma = math.sqrt(p * (1 - p) / n)
        assert abs(int(count.sum()) / n - p) < 5 * sigma
    special = ids.special_lookup()
    assert not special[inputs[changed]].any(), "random replacements must be non-special tokens"
    # Random replacements are spread over the vocabulary, not one id.
    assert inputs[changed].unique().numel() > 500


def test_mlm_selection_is_uniform_over_positions(ids):
    """No position is favoured: per-position selection rates stay near 15 %."""
    tokens = _blocks(4000, 20, ids.vocab_size)
    _, labels = mlm_mask(tokens, ids, generator=torch.Generator().manual_seed(3))
    rate = (labels != -100).float().mean(0)  # (L,) each over 4000 rows, expected 3/20
    sigma = math.sqrt(0.15 * 0.85 / 4000)
    assert (rate - 0.15).abs().max() < 5 * sigma


def test_mlm_row_with_few_normal_tokens_selects_only_those(ids):
    """A row that is mostly specials selects its non-special tokens and nothing else."""
    tokens = torch.full((1, 40), ids.sep)
    tokens[0, [5, 17]] = torch.tensor([50, 60])
    inputs, labels = mlm_mask(tokens, ids, generator=torch.Generator().manual_seed(0))
    assert (labels != -100).nonzero()[:, 1].tolist() == [5, 17]


def test_mlm_is_reproducible_with_generator(ids):
    tokens = _blocks(4, 32, ids.vocab_size)
    a = mlm_mask(tokens, ids, generator=torch.Generator().manual_seed(7))
    b = mlm_mask(tokens, ids, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(a, b)


def test_mlm_rejects_bad_rate(ids):
    with pytest.raises(ObjectiveError, match="mask_rate"):
        mlm_mask(_blocks(1, 8, ids.vocab_size), ids, rate=1.5)


# -- CLM ----------------------------------------------------------------------------------------------------------


def test_clm_shift_is_a_view_shifted_by_one():
    """Labels are the inputs moved one step left, sliced from the same storage (no copy)."""
    block = torch.arange(2 * 9).reshape(2, 9)
    inputs, labels = clm_shift(block)
    assert inputs.shape == labels.shape == (2, 8)
    torch.testing.assert_close(labels[:, :-1], inputs[:, 1:])
    torch.testing.assert_close(labels[:, -1], block[:, -1])
    assert inputs.untyped_storage().data_ptr() == labels.untyped_storage().data_ptr() == block.data_ptr()


# -- T5 span corruption -------------------------------------------------------------------------------------------


def _t5_random_spans_helper(inputs_length: int, noise_density: float, mean_noise_span_length: float) -> tuple:
    """T5's random_spans_helper (t5/data/preprocessors.py), as published, with one extra token per span."""

    def lengths(tokens_length):
        num_noise_tokens = int(round(tokens_length * noise_density))
        num_nonnoise_tokens = tokens_length - num_noise_tokens
        num_noise_spans = int(round(num_noise_tokens / mean_noise_span_length))
        return num_nonnoise_tokens + num_noise_spans + 1, num_noise_tokens + num_noise_spans + 1

    tokens_length = inputs_length - 1
    while lengths(tokens_length + 1)[0] <= inputs_length:
        tokens_length += 1
    inputs_length, targets_length = lengths(tokens_length)
    if noise_density == 0.5 and targets_length > inputs_length:
        tokens_length -= 1
        targets_length -= 1
    return tokens_length, targets_length


def _t5_noise_mask(length: int, noise_density: float, mean_noise_span_length: float, rng) -> np.ndarray:
    """T5's random_spans_noise_mask, numpy port as in Hugging Face's run_t5_mlm_flax.py."""
    num_noise_tokens = int(np.round(length * noise_density))
    num_noise_tokens = min(max(num_noise_tokens, 1), length - 1)
    num_noise_spans = int(np.round(num_noise_tokens / mean_noise_span_length))
    num_noise_spans = max(num_noise_spans, 1)
    num_nonnoise_tokens = length - num_noise_tokens

    def segmentation(num_items, num_segments):
        mask_indices = np.arange(num_items - 1) < (num_segments - 1)
        rng.shuffle(mask_indices)
        first_in_segment = np.pad(mask_indices, [[1, 0]])
        segment_id = np.cumsum(first_in_segment)
        _, segment_length = np.unique(segment_id, return_counts=True)
        return segment_length

    noise_span_lengths = segmentation(num_noise_tokens, num_noise_spans)
    nonnoise_span_lengths = segmentation(num_nonnoise_tokens, num_noise_spans)
    interleaved = np.reshape(np.stack([nonnoise_span_lengths, noise_span_lengths], axis=1), [num_noise_spans * 2])
    span_starts = np.cumsum(interleaved)[:-1]
    indicator = np.zeros((length,), dtype=np.int8)
    indicator[span_starts] = True
    return np.equal(np.cumsum(indicator) % 2, 1)


def test_t5_lengths_match_t5_for_512():
    """The published case: inputs 512, density 0.15, mean span 3 -> raw 568, targets 114."""
    assert t5_lengths(512, 0.15, 3.0) == (568, 114)


@pytest.mark.parametrize("inputs_len", [16, 33, 64, 100, 128, 256, 511, 1024])
@pytest.mark.parametrize("density,mean_span", [(0.15, 3.0), (0.3, 8.0), (0.5, 3.0), (0.15, 1.0)])
def test_t5_lengths_match_reference_helper(inputs_len, density, mean_span):
    assert t5_lengths(inputs_len, density, mean_span) == _t5_random_spans_helper(inputs_len, density, mean_span)


def test_span_corruption_shapes_need_no_padding(ids):
    """A 568-token raw block becomes exactly 512 inputs and 114 targets, both ending with [EOS]."""
    raw, targets_len = t5_lengths(512)
    inputs, targets = span_corrupt(_blocks(8, raw, ids.vocab_size), ids, generator=torch.Generator().manual_seed(0))
    assert inputs.shape == (8, 512) and targets.shape == (8, targets_len)
    assert (inputs[:, -1] == ids.eos).all() and (targets[:, -1] == ids.eos).all()


def test_noise_mask_counts_and_span_statistics():
    """Exact noise count and span count per row; mean span length as asked; starts with non-noise."""
    noise = random_spans_noise_mask(2000, 568, density=0.15, mean_span=3.0, generator=torch.Generator().manual_seed(0))
    assert (noise.sum(1) == 85).all()
    starts = noise & ~torch.nn.functional.pad(noise[:, :-1], (1, 0))
    assert (starts.sum(1) == 28).all()
    assert not noise[:, 0].any()
    assert abs(85 / 28 - 3.0) < 0.05  # realised mean span length
    # Span lengths vary (T5 draws a random segmentation), they are not all equal to the mean.
    ends = noise & ~torch.nn.functional.pad(noise[:, 1:], (0, 1))
    lengths = ends.nonzero()[:, 1] - starts.nonzero()[:, 1] + 1
    assert lengths.float().mean().item() == pytest.approx(85 / 28)
    assert lengths.max() > 6 and lengths.min() == 1


def test_noise_mask_matches_t5_reference_distribution():
    """Per-position noise frequencies agree with T5's numpy implementation over many draws."""
    rows, length = 6000, 40
    ours = random_spans_noise_mask(rows, length, generator=torch.Generator().manual_seed(0)).float().mean(0)
    rng = np.random.default_rng(0)
    ref = np.mean([_t5_noise_mask(length, 0.15, 3.0, rng) for _ in range(rows)], axis=0)
    torch.testing.assert_close(ours, torch.tensor(ref, dtype=torch.float32), atol=0.025, rtol=0)


def _reconstruct(inputs: list[int], targets: list[int], sentinel_ids: list[int], eos: int) -> list[int]:
    """Undo span corruption: put each target span back where its sentinel stands in the inputs."""
    spans: dict[int, list[int]] = {}
    current = None
    for tok in targets[:-1]:
        if tok in sentinel_ids:
            current = tok
            spans[current] = []
        else:
            spans[current].append(tok)
    out: list[int] = []
    for tok in inputs[:-1]:
        out.extend(spans[tok] if tok in sentinel_ids else [tok])
    return out


def test_span_corruption_round_trip_and_sentinel_order(ids):
    """Inputs + targets give back the original block; sentinels appear as sentinel_ids[0], [1], ... in order."""
    raw, _ = t5_lengths(64)
    tokens = _blocks(16, raw, ids.vocab_size, seed=4)
    inputs, targets = span_corrupt(tokens, ids, generator=torch.Generator().manual_seed(5))
    sentinels = list(ids.sentinel_ids)
    for i in range(16):
        rebuilt = _reconstruct(inputs[i].tolist(), targets[i].tolist(), sentinels, ids.eos)
        assert rebuilt == tokens[i].tolist()
        in_sent = [t for t in inputs[i].tolist() if t in sentinels]
        tg_sent = [t for t in targets[i].tolist() if t in sentinels]
        assert in_sent == tg_sent == sentinels[: len(in_sent)]
        assert targets[i, 0] == sentinels[0]  # the target starts with <extra_id_0>
    assert sentinels[0] == ids.vocab_size - 1  # <extra_id_0> is the top id in this layout


def test_span_corruption_errors(make_ids):
    """Too few sentinels, too short a sequence and a bad density each raise ObjectiveError."""
    few = make_ids(num_sentinels=3)
    with pytest.raises(ObjectiveError, match="sentinels"):
        span_corrupt(_blocks(1, 200, 1000), few)
    with pytest.raises(ObjectiveError, match="too short"):
        t5_lengths(2)
    with pytest.raises(ObjectiveError, match="noise_density"):
        t5_lengths(128, 0.7)
