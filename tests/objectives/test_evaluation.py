"""Bits per byte, BERT's pseudo-log-likelihood and length extrapolation against naive token-by-token loops."""

import math

import pytest
import torch
from famlab.objectives import ObjectiveError
from famlab.objectives.evaluation import bits_per_byte, byte_score, length_extrapolation, pll_bits_per_byte
from famlab.objectives.prefix import prefix_lm_mask

TEXTS = ["a cat sat", "", "the dog ran far away from home", "élan vital ✓"]


def _encode(text: str) -> list[int]:
    """A toy tokenizer: one id per UTF-8 byte, shifted past the specials (ids 10..265)."""
    return [10 + b for b in text.encode("utf-8")]


def _num_bytes() -> int:
    return sum(len(t.encode("utf-8")) for t in TEXTS)


def _naive_gpt_bits(net, start: int, chunk: int) -> float:
    """Token by token: log p(t_k | start, t_<k within its chunk), one full forward per token."""
    bits = 0.0
    for text in TEXTS:
        tokens = _encode(text)
        for c in range(0, len(tokens), chunk):
            piece = tokens[c : c + chunk]
            for k, token in enumerate(piece):
                logits = net(torch.tensor([[start] + piece[:k]])).logits[0, -1].double()
                bits -= logits.log_softmax(-1)[token].item() / math.log(2)
    return bits


@pytest.mark.parametrize("objective,start", [("clm", "eos"), ("ul2", "s")])
def test_gpt_bits_per_byte_matches_a_token_by_token_loop(ids, tiny_net, objective, start):
    """Chunked (max_len 8) batched scoring equals the naive loop; bytes are UTF-8 bytes; [S] leads for ul2."""
    net = tiny_net("gpt", vocab_size=1000).eval()
    score = bits_per_byte(net, TEXTS, _encode, ids, objective=objective, max_len=8, batch_size=3)
    expected = _naive_gpt_bits(net, getattr(ids, start), chunk=8)
    assert score.measure == "bits_per_byte" and score.num_bytes == _num_bytes() and score.num_texts == 3
    assert score.num_tokens == _num_bytes()
    assert math.isclose(score.total_bits, expected, rel_tol=1e-5)
    assert math.isclose(score.value, expected / _num_bytes(), rel_tol=1e-5)


def test_gpt_span_bits_per_byte_uses_the_span_rule_under_a_prefix_mask(ids, tiny_net):
    """A span-trained GPT: `<s0> [EOS]` as a bidirectional prefix, `<s0>` given, then the text, token by token."""
    net = tiny_net("gpt", vocab_size=1000).eval()
    score = bits_per_byte(net, TEXTS, _encode, ids, objective="span", max_len=9)
    s0 = ids.sentinel_ids[0]
    bits = 0.0
    for text in TEXTS:
        tokens = _encode(text)
        for c in range(0, len(tokens), 7):  # 9 - 3 context tokens + 1
            piece = tokens[c : c + 7]
            for k, token in enumerate(piece):
                seq = torch.tensor([[s0, ids.eos, s0] + piece[:k]])
                logits = net(seq, attention_mask=prefix_lm_mask(torch.tensor([2]), seq.shape[1])).logits[0, -1]
                bits -= logits.double().log_softmax(-1)[token].item() / math.log(2)
    assert math.isclose(score.total_bits, bits, rel_tol=1e-5)


@pytest.mark.parametrize("objective", ["span", "prefix_lm", "ul2"])
def test_t5_bits_per_byte_matches_a_token_by_token_loop(ids, tiny_net, objective):
    """The decoder scores the text given an encoder input without text, exactly as documented per objective."""
    net = tiny_net("t5", vocab_size=1000).eval()
    score = bits_per_byte(net, TEXTS, _encode, ids, objective=objective, max_len=10)
    s0 = ids.sentinel_ids[0]
    encoder = {"span": [s0, ids.eos], "prefix_lm": [ids.eos], "ul2": [ids.s, ids.eos]}[objective]
    given = [s0] if objective == "span" else []
    chunk = 10 - len(given)
    bits = 0.0
    for text in TEXTS:
        tokens = _encode(text)
        for c in range(0, len(tokens), chunk):
            piece = tokens[c : c + chunk]
            for k, token in enumerate(piece):
                dec = torch.tensor([[ids.pad] + given + piece[:k]])
                logits = net(torch.tensor([encoder]), decoder_input_ids=dec).logits[0, -1].double()
                bits -= logits.log_softmax(-1)[token].item() / math.log(2)
    assert math.isclose(score.total_bits, bits, rel_tol=1e-5)


def test_bert_pll_matches_masking_one_token_at_a_time(ids, tiny_net):
    """PLL: [CLS] chunk [SEP], each token masked in turn; its own measure name."""
    net = tiny_net("bert", vocab_size=1000).eval()
    score = pll_bits_per_byte(net, TEXTS, _encode, ids, max_len=12, batch_size=7)
    bits = 0.0
    for text in TEXTS:
        tokens = _encode(text)
        for c in range(0, len(tokens), 10):
            seq = [ids.cls] + tokens[c : c + 10] + [ids.sep]
            for i in range(1, len(seq) - 1):
                masked = torch.tensor([seq[:i] + [ids.mask] + seq[i + 1 :]])
                logits = net(masked).logits[0, i].double()
                bits -= logits.log_softmax(-1)[seq[i]].item() / math.log(2)
    assert score.measure == "pll_bits_per_byte"
    assert math.isclose(score.total_bits, bits, rel_tol=1e-5)
    assert byte_score(net, TEXTS, _encode, ids, max_len=12).measure == "pll_bits_per_byte"


def test_measures_are_never_mixed_up(ids, tiny_net):
    """bits_per_byte refuses BERT; pll_bits_per_byte refuses GPT."""
    with pytest.raises(ObjectiveError, match="pll_bits_per_byte"):
        bits_per_byte(tiny_net("bert"), TEXTS, _encode, ids)
    with pytest.raises(ObjectiveError, match="bits_per_byte"):
        pll_bits_per_byte(tiny_net("gpt"), TEXTS, _encode, ids)


def test_length_extrapolation_skips_learned_positions_past_max_seq_len(ids, tiny_net):
    """Learned positions: 1x and 2x of 16 fit max_seq_len 40, 4x does not (None + reason); RoPE gives all three."""
    tokens = torch.randint(10, 900, (3000,), generator=torch.Generator().manual_seed(0))
    learned = tiny_net("gpt", max_seq_len=40)
    points = length_extrapolation(learned, tokens, ids, objective="clm", train_seq_len=16)
    assert [p.seq_len for p in points] == [16, 32, 64]
    assert points[0].loss is not None and points[1].loss is not None
    assert points[2].loss is None and "max_seq_len=40" in (points[2].reason or "")
    rope = tiny_net("gpt", pos="rope", max_seq_len=40)
    points = length_extrapolation(rope, tokens, ids, objective="clm", train_seq_len=16)
    assert all(p.loss is not None and p.num_label_tokens > 0 for p in points)


def test_length_extrapolation_loss_is_the_token_weighted_val_loss(ids, tiny_net):
    """At 1x the result equals the objective's own loss over the same blocks (same seeded masks)."""
    from famlab.objectives import make_objective

    net = tiny_net("t5").eval()
    tokens = torch.randint(10, 900, (800,), generator=torch.Generator().manual_seed(1))
    (point,) = length_extrapolation(net, tokens, ids, objective="span", train_seq_len=32, multiples=(1,), batch_size=2)
    obj = make_objective("span", ids, seq_len=32, family="t5", generator=torch.Generator().manual_seed(0))
    n = len(tokens) // obj.raw_block_len
    blocks = tokens[: n * obj.raw_block_len].reshape(n, -1)
    nll, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, n, 2):
            out = obj.loss(net, obj.collate(list(blocks[start : start + 2])))
            nll += out.loss.item() * int(out.num_label_tokens)
            count += int(out.num_label_tokens)
    assert point.num_label_tokens == count
    assert math.isclose(point.loss, nll / count, rel_tol=1e-5)
    other = make_objective("span", ids, seq_len=32, family="t5", generator=torch.Generator().manual_seed(5))
    assert not torch.equal(
        other.collate(list(blocks[:2]))["labels"],
        obj.__class__(ids, 32, 0.15, 3.0, torch.Generator().manual_seed(0)).collate(list(blocks[:2]))["labels"],
    )  # masks vary
