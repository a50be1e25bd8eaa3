"""Length extrapolation measures positions: at 2x and 4x span corruption uses only the sentinels training used."""

import pytest
import torch
from famlab.objectives import ObjectiveError, make_objective
from famlab.objectives.corruption import span_counts
from famlab.objectives.evaluation import extrapolation_objective, length_extrapolation

SENTINEL_OBJECTIVES = [("t5", "span"), ("gpt", "span"), ("t5", "ul2"), ("gpt", "ul2")]


pytestmark = pytest.mark.usefixtures("one_thread")


def _sentinels_used(ids, obj, rows: int = 64) -> set[int]:
    """Distinct sentinels in the inputs and labels of one seeded batch of `rows` random blocks."""
    blocks = torch.randint(10, 890, (rows, obj.raw_block_len), generator=torch.Generator().manual_seed(0))
    batch = obj.collate(list(blocks))
    seen = torch.cat([batch["input_ids"].flatten(), batch["labels"].flatten()]).tolist()
    return set(seen) & set(ids.sentinel_ids)


@pytest.mark.parametrize("family,objective", SENTINEL_OBJECTIVES, ids=[f"{f}-{o}" for f, o in SENTINEL_OBJECTIVES])
@pytest.mark.parametrize("train_seq_len", [16, 32, 64])
def test_longer_blocks_use_no_sentinel_training_did_not(ids, family, objective, train_seq_len):
    """The sentinels of 2x and 4x blocks are a subset of those of 1x blocks (never-trained embeddings stay out)."""
    at = {m: extrapolation_objective(objective, ids, family=family, train_seq_len=train_seq_len, multiple=m)
          for m in (1, 2, 4)}
    trained = _sentinels_used(ids, at[1])
    assert trained
    for m in (2, 4):
        assert at[m].raw_block_len > at[1].raw_block_len * (m - 0.5)  # the blocks do grow
        assert _sentinels_used(ids, at[m]) <= trained, m


def test_t5_span_keeps_the_training_targets_and_grows_only_the_input(ids):
    """T5 span at 2x / 4x: the training block's (noise, spans) and target length; the encoder reads m x T tokens."""
    train = make_objective("span", ids, seq_len=32, family="t5")
    counts = span_counts(train.raw_block_len, 0.15, 3.0)
    blocks = torch.randint(10, 890, (4, 4 * 200), generator=torch.Generator().manual_seed(0))
    for m in (1, 2, 4):
        obj = extrapolation_objective("span", ids, family="t5", train_seq_len=32, multiple=m)
        batch = obj.collate(list(blocks[:, : obj.raw_block_len]))
        assert span_counts(obj.raw_block_len, obj.density, obj.mean_span) == counts
        assert batch["input_ids"].shape == (4, 32 * m)
        assert batch["labels"].shape == (4, sum(counts) + 1)


def test_t5_at_4x_of_512_fits_the_sentinels_a_tokenizer_has(ids):
    """At the training density 4 x 512 would need 114 spans, more than 100 sentinels; now it uses training's 28."""
    obj = extrapolation_objective("span", ids, family="t5", train_seq_len=512, multiple=4)
    assert span_counts(obj.raw_block_len, obj.density, obj.mean_span)[1] == 28
    with pytest.raises(ObjectiveError, match="sentinels"):
        make_objective("span", ids, seq_len=2048, family="t5").collate([torch.full((2274,), 10)])


@pytest.mark.parametrize("family,objective", [("gpt", "clm"), ("gpt", "prefix_lm"), ("bert", "mlm"),
                                              ("bert", "span_mlm"), ("t5", "prefix_lm")])
def test_objectives_without_sentinels_are_built_as_at_the_training_length(ids, family, objective):
    """No sentinels, nothing to hold: the 2x objective is the registry's at 2 x T, with the same masks."""
    obj = extrapolation_objective(objective, ids, family=family, train_seq_len=24, multiple=2, seed=3)
    ref = make_objective(objective, ids, seq_len=48, family=family, generator=torch.Generator().manual_seed(3))
    assert obj.raw_block_len == ref.raw_block_len
    blocks = list(torch.randint(10, 890, (3, ref.raw_block_len), generator=torch.Generator().manual_seed(0)))
    got, want = obj.collate(blocks), ref.collate(blocks)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)


def _periodic_t5(ids, tiny_net, steps: int = 300):
    """A tiny relative-bias T5 trained on span corruption of a stream with period 16 (1x loss well below 1.5)."""
    period = torch.randint(10, 890, (16,), generator=torch.Generator().manual_seed(0))
    stream = period.repeat(1000)
    net = tiny_net("t5")
    obj = make_objective("span", ids, seq_len=32, family="t5", generator=torch.Generator().manual_seed(2))
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    offsets = torch.Generator().manual_seed(1)
    for _ in range(steps):
        starts = torch.randint(0, len(stream) - obj.raw_block_len, (16,), generator=offsets).tolist()
        loss = obj.loss(net, obj.collate([stream[i : i + obj.raw_block_len] for i in starts])).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.eval(), stream


def test_a_trained_relative_bias_t5_does_not_jump_at_2x(ids, tiny_net):
    """A T5 that learned a periodic stream keeps its loss at 2x and 4x (only positions change), while corrupting
    the 2x blocks at the training density (sentinels no training block used) more than doubles it
    (about 0.80 / 0.88 / 1.02, and 2.81 at the training density)."""
    net, stream = _periodic_t5(ids, tiny_net)
    one, two, four = (p.loss for p in length_extrapolation(net, stream, ids, objective="span", train_seq_len=32,
                                                          max_tokens=4096))
    assert one < 1.5 and two < 1.5 * one and four < 2 * one, (one, two, four)
    naive = make_objective("span", ids, seq_len=64, family="t5", generator=torch.Generator().manual_seed(0))
    blocks = stream[: 4096 // naive.raw_block_len * naive.raw_block_len].reshape(-1, naive.raw_block_len)
    with torch.no_grad():
        untrained = float(naive.loss(net, naive.collate(list(blocks))).loss)
    assert untrained > 2 * two, (untrained, two)
