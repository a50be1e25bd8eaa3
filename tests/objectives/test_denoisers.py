"""The pairs beyond each family's own objective.

Prefix-LM masks, which positions carry loss, UL2 modes and rates, SpanBERT spans, training."""

import math

import pytest
import torch
from famlab.objectives import OBJECTIVES, ObjectiveError, check_pair, make_objective, span_corrupt
from famlab.objectives.corruption import IGNORE
from famlab.objectives.prefix import prefix_lm_mask, split_prefix
from famlab.objectives.spans import geometric_span_lengths, span_mlm_mask

NEW_PAIRS = [
    ("bert", "span_mlm"),
    ("gpt", "prefix_lm"),
    ("gpt", "span"),
    ("gpt", "ul2"),
    ("t5", "prefix_lm"),
    ("t5", "ul2"),
]


def _block(objective, rows: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, 800, (rows, objective.raw_block_len), generator=g)


def _collate(objective, rows: int, seed: int = 0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    block = _block(objective, rows, seed)
    torch.manual_seed(seed)
    return block, objective.collate(list(block))


def test_pair_table_lists_every_new_pair_and_rejects_others():
    """The widened table accepts the new pairs; bert x ul2 fails listing them."""
    for family, name in NEW_PAIRS:
        assert name in OBJECTIVES[family]
        check_pair(family, name)
    with pytest.raises(ObjectiveError, match="gpt x prefix_lm"):
        check_pair("bert", "ul2")


def test_prefix_lm_mask_is_bidirectional_over_the_prefix_and_causal_after():
    """Query i reads key j iff j <= i or j < P, row by row."""
    mask = prefix_lm_mask(torch.tensor([1, 3]), 5)[:, 0]
    expected = torch.tensor([[[i >= j or j < p for j in range(5)] for i in range(5)] for p in (1, 3)])
    assert torch.equal(mask, expected)


def test_gpt_prefix_lm_loss_positions_are_the_continuation(ids):
    """Labels are the next token exactly from position P - 1 on; P is in [1, T - 1]; a fraction fixes P."""
    objective = make_objective("prefix_lm", ids, seq_len=16, family="gpt")
    block, batch = _collate(objective, 64)
    prefix = batch["prefix_len"]
    assert prefix.min() >= 1 and prefix.max() <= 15 and len(prefix.unique()) > 5
    for row in range(64):
        p = int(prefix[row])
        assert (batch["labels"][row, : p - 1] == IGNORE).all()
        assert torch.equal(batch["labels"][row, p - 1 :], block[row, p:])
    assert torch.equal(batch["input_ids"], block[:, :-1])
    fixed = make_objective("prefix_lm", ids, seq_len=16, family="gpt", prefix_fraction=0.25)
    assert (fixed.collate(list(block))["prefix_len"] == 4).all()


def test_gpt_prefix_lm_network_sees_the_prefix_both_ways_and_the_rest_causally(ids, tiny_net):
    """Through a real GPT: a later prefix token changes earlier prefix outputs; a continuation token changes
    nothing before it."""
    net = tiny_net("gpt")
    objective = make_objective("prefix_lm", ids, seq_len=12, family="gpt", prefix_fraction=0.5)
    block, batch = _collate(objective, 1)
    p = int(batch["prefix_len"][0])
    mask = prefix_lm_mask(batch["prefix_len"], 12)
    base = net(batch["input_ids"], attention_mask=mask).hidden
    in_prefix = batch["input_ids"].clone()
    in_prefix[0, p - 1] = 11
    changed = net(in_prefix, attention_mask=mask).hidden
    assert not torch.allclose(changed[0, 0], base[0, 0])  # position 0 reads the last prefix token
    after = batch["input_ids"].clone()
    after[0, p + 2] = 11
    changed = net(after, attention_mask=mask).hidden
    torch.testing.assert_close(changed[0, : p + 2], base[0, : p + 2])
    assert not torch.allclose(changed[0, p + 2], base[0, p + 2])


def test_gpt_span_is_the_corrupted_input_then_its_targets(ids):
    """One sequence = span_corrupt's inputs then targets; the prefix is the input; loss on the targets only."""
    objective = make_objective("span", ids, seq_len=32, family="gpt")
    block, batch = _collate(objective, 8, seed=3)
    torch.manual_seed(3)
    inputs, targets = span_corrupt(block, ids)
    n_in, n_t = inputs.shape[1], targets.shape[1]
    assert n_in + n_t <= 33
    assert (batch["prefix_len"] == n_in).all()
    assert torch.equal(batch["input_ids"][:, :n_in], inputs)
    assert torch.equal(batch["input_ids"][:, n_in : n_in + n_t - 1], targets[:, :-1])
    labelled = batch["labels"] != IGNORE
    assert labelled.sum(1).eq(n_t).all() and labelled[:, n_in - 1 : n_in - 1 + n_t].all()
    assert torch.equal(batch["labels"][:, n_in - 1 : n_in - 1 + n_t], targets)


def test_t5_prefix_lm_encoder_reads_the_prefix_and_decoder_writes_the_rest(ids):
    """Encoder `block[:P] [EOS]`, targets `block[P:] [EOS]`, padding masked and unlabelled, fixed widths."""
    objective = make_objective("prefix_lm", ids, seq_len=16, family="t5")
    block, batch = _collate(objective, 32, seed=1)
    assert batch["input_ids"].shape == (32, 16) and batch["labels"].shape == (32, 15)
    for row in range(32):
        n = int(batch["attention_mask"][row].sum())
        enc = batch["input_ids"][row, :n]
        assert enc[-1] == ids.eos and (batch["input_ids"][row, n:] == ids.pad).all()
        labels = batch["labels"][row]
        target = labels[labels != IGNORE]
        assert target[-1] == ids.eos
        assert torch.equal(torch.cat([enc[:-1], target[:-1]]), block[row])
        assert torch.equal(batch["decoder_input_ids"][row, 1 : len(target)], target[:-1])


def test_split_prefix_puts_the_lead_token_first(ids):
    """UL2's S mode for T5: `[S] prefix [EOS]`."""
    block = torch.arange(20, 30)[None].repeat(2, 1)
    enc, enc_len, tgt, tgt_len = split_prefix(block, torch.tensor([2, 5]), eos=6, pad=0, lead=9)
    assert enc[0, :4].tolist() == [9, 20, 21, 6] and enc_len.tolist() == [4, 7]
    assert tgt[1, : int(tgt_len[1])].tolist() == [25, 26, 27, 28, 29, 6]


@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_ul2_mode_tokens_follow_the_rates_and_each_mode_its_denoiser(ids, family):
    """Every row starts with [R]/[X]/[S] at the configured rates; R rows label ~15 % noise, X rows ~50 %."""
    rates = (0.5, 0.3, 0.2)
    objective = make_objective("ul2", ids, seq_len=48, family=family, ul2_rates=rates)
    _, batch = _collate(objective, 3000, seed=5)
    first = batch["input_ids"][:, 0]
    assert set(first.tolist()) <= {ids.r, ids.x, ids.s}
    for token, rate in zip((ids.r, ids.x, ids.s), rates, strict=True):
        share = (first == token).float().mean().item()
        assert abs(share - rate) < 4 * math.sqrt(rate * (1 - rate) / 3000), (token, share)
    raw = objective.raw_block_len
    sentinels = torch.tensor(ids.sentinel_ids)
    for token, density in ((ids.r, 0.15), (ids.x, 0.5)):
        rows = first == token
        labels = batch["labels"][rows]
        real = (labels != IGNORE) & ~torch.isin(labels, sentinels) & (labels != ids.eos)
        assert abs(real.sum(1).float().mean().item() / raw - density) < 0.03
    s_rows = first == ids.s
    if family == "gpt":  # S: [S] + the raw block, prefix boundary random
        assert len(batch["prefix_len"][s_rows].unique()) > 10
    else:
        assert len(batch["attention_mask"][s_rows].sum(1).unique()) > 10


def test_ul2_rejects_bad_rates(ids):
    with pytest.raises(ObjectiveError, match="ul2_rates"):
        make_objective("ul2", ids, seq_len=32, family="gpt", ul2_rates=(1.0, -1.0, 0.5))


def test_geometric_span_lengths_have_spanberts_mean():
    """Geometric(0.2) truncated at 10: mean 3.8 (SpanBERT), never above 10."""
    lengths = geometric_span_lengths((200_000,), generator=torch.Generator().manual_seed(0)).double()
    q = 0.8
    mean = sum(k * 0.2 * q ** (k - 1) for k in range(1, 11)) / (1 - q**10)
    assert abs(lengths.mean().item() - mean) < 0.02 and lengths.max() == 10 and lengths.min() == 1
    assert abs(mean - 3.8) < 0.05


def test_span_mlm_masks_k_tokens_in_contiguous_spans_80_10_10_per_span(ids):
    """Exactly K labels per row (no specials), in runs; a span is all [MASK], all kept or all replaced."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(10, 800, (400, 100), generator=g)
    inputs, labels = span_mlm_mask(tokens, ids, generator=g)
    selected = labels != IGNORE
    assert selected.sum(1).eq(15).all()
    assert torch.equal(labels[selected], tokens[selected])
    starts = selected & ~torch.nn.functional.pad(selected[:, :-1], (1, 0))
    assert starts.sum(1).float().mean() < 15 / 2.5  # spans, not scattered tokens (mean length ~3.8 before cut)
    masked = inputs == ids.mask
    share = masked[selected].float().mean().item()
    assert abs(share - 0.8) < 0.03
    span_id = starts.long().cumsum(1)
    for row in range(50):  # every span is uniformly [MASK] or not
        for s in span_id[row][selected[row]].unique():
            in_span = selected[row] & (span_id[row] == s)
            assert masked[row][in_span].all() or not masked[row][in_span].any()


def test_span_mlm_never_labels_specials(ids):
    tokens = torch.randint(10, 800, (50, 60))
    tokens[:, ::7] = ids.sep
    _, labels = span_mlm_mask(tokens, ids)
    assert not (labels == ids.sep).any() and (labels != IGNORE).sum(1).le(9).all()


@pytest.mark.parametrize("family,name", NEW_PAIRS)
def test_each_new_pair_trains(ids, tiny_net, family, name):
    """15 Adam steps on one fixed batch cut the loss below half its start."""
    net = tiny_net(family)
    objective = make_objective(name, ids, seq_len=24, family=family)
    _, batch = _collate(objective, 4, seed=2)
    start = objective.loss(net, batch).loss.item()
    optim = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(15):
        optim.zero_grad()
        objective.loss(net, batch).loss.backward()
        optim.step()
    end = objective.loss(net, batch).loss.item()
    assert end < 0.5 * start, (start, end)
