"""Zero-shot scoring, bits per byte and length extrapolation on the inputs a real tokenizer produces: one-token
candidates and contexts, candidates that tokenize alike, candidates that encode to nothing, items and texts longer
than the positions, non-Latin text, validation streams shorter than a block. Never a crash; skips are counted."""

import math
import unicodedata
import zlib

import numpy as np
import pytest
import torch
from famlab.experiments.steps.evaluate import summarise
from famlab.objectives import ObjectiveError
from famlab.objectives.evaluation import bits_per_byte, byte_score, length_extrapolation, pll_bits_per_byte
from famlab.objectives.prefix import prefix_lm_mask
from famlab.objectives.zeroshot import (
    EMPTY_CANDIDATE,
    BigramLM,
    ChoiceScores,
    Item,
    Scorer,
    correct,
    skipped,
    split_blank,
)

# (family, objective): every input format the scorer has; the bigram floor reads GPT's causal format.
SCORERS = [("bert", "mlm"), ("gpt", "clm"), ("gpt", "prefix_lm"), ("gpt", "ul2"), ("gpt", "span"),
           ("t5", "span"), ("t5", "prefix_lm"), ("t5", "ul2"), ("bigram", "clm")]
SCORER_IDS = [f"{f}-{o}" for f, o in SCORERS]
CAT_EMOJI = "\U0001f408\u200d\u2b1b"  # black cat: cat + zero-width joiner + black square, 3 code points, 10 bytes


pytestmark = pytest.mark.usefixtures("one_thread")


def _id(piece: str) -> int:
    """A stable id in 10..889: past the specials (0..9), below the sentinels (900..999)."""
    return 10 + zlib.crc32(piece.encode("utf-8")) % 880


def _words(text: str) -> list[int]:
    """Word-level: one token per whitespace-separated word, lowercased and NFC-normalised (as many tokenizers do),
    so `" cat"` is one token and `"Cat"` / `"cat"` (or a decomposed / composed accent) are the same token."""
    return [_id(unicodedata.normalize("NFC", w.lower())) for w in text.split()]


def _chars(text: str) -> list[int]:
    """Character-level: one token per code point except zero-width spaces, which it drops (a text of only those
    encodes to nothing). A CJK character is 3 UTF-8 bytes and one token; an emoji ZWJ sequence several tokens."""
    return [_id(c) for c in text if c != "\u200b"]


def _single(text: str) -> list[int]:
    """Every non-empty text is one token: every candidate, prefix and suffix is one token long."""
    return [_id(text)]


def _ascii_words(text: str) -> list[int]:
    """Word-level, dropping words it has no token for (non-ASCII): a candidate `"猫"` encodes to nothing."""
    return [_id(w) for w in text.split() if w.isascii()]


def _scorer(family, objective, ids, tiny_net, encode, rule="full", **overrides):
    if family == "bigram":
        docs = [_words(t) for t in ("the dog ran far", "a cat sat here", "dogs ran home", "the old cats sat")]
        net = BigramLM.fit(docs, ids.vocab_size, separator=ids.eos, k=0.1)
    else:
        net = tiny_net(family, **overrides).eval()
    return Scorer(net, encode, ids, objective=objective, rule=rule)


@torch.no_grad()
def _reference(scorer: Scorer, item: Item) -> list[tuple[float, int, int]]:
    """(log-probability, tokens, bytes) per candidate by brute force: one plain forward per candidate that feeds
    exactly the positions the rule needs, written from the module docstring's rules (not from the scorer's code)."""
    net, ids, enc, objective, rule = scorer.net, scorer.ids, scorer.encode, scorer.objective, scorer.rule
    full = rule == "full"
    out = []
    for choice in item.choices:
        pt, st, xt = split_blank(item.text, choice)
        p, s, x = (list(enc(t)) if t else [] for t in (pt, st, xt))
        if scorer.family == "bert":
            row = [ids.cls] + p + s + x + [ids.sep]
            lp = 0.0
            for i in range(1 + len(p), 1 + len(p) + len(s)):
                masked = torch.tensor([row[:i] + [ids.mask] + row[i + 1 :]])
                lp += net(masked).logits[0, i].double().log_softmax(-1)[row[i]].item()
            out.append((lp, len(s), len(st.encode())))
        elif scorer.family == "t5" or objective == "span":
            close = ids.sentinel_ids[1] if x and xt.strip() else ids.eos
            s0 = ids.sentinel_ids[0]
            if objective == "prefix_lm":  # T5 only
                encoder, given, target = p + [ids.eos], [], s + x
                scored = [True] * len(s) + [full] * len(x)
                nbytes = len((st + xt if full else st).encode())
            else:
                lead = [ids.r] if objective == "ul2" else []
                encoder, given, target = lead + p + [s0] + x + [ids.eos], [s0], s + [close]
                scored, nbytes = [True] * len(target), len(st.encode())
            if scorer.family == "t5":
                dec = torch.tensor([[ids.pad] + given + target[:-1]])
                logits = net(torch.tensor([encoder]), decoder_input_ids=dec).logits[0, len(given) :]
            else:  # GPT trained with decoder-only span: the input as a bidirectional prefix, in one sequence
                seq = encoder + given + target[:-1]
                mask = prefix_lm_mask(torch.tensor([len(encoder)]), len(seq))
                logits = net(torch.tensor([seq]), attention_mask=mask).logits[0, len(encoder) + len(given) - 1 :]
            lp = logits.double().log_softmax(-1)[torch.arange(len(target)), torch.tensor(target)]
            out.append((float(lp[torch.tensor(scored)].sum()), sum(scored), nbytes))
        else:  # GPT causal and the bigram: [lead] prefix span suffix
            seq = [ids.s if objective == "ul2" else ids.eos] + p + s + x
            lo, hi = (1, len(seq)) if full else (1 + len(p), 1 + len(p) + len(s))
            if scorer.family == "bigram":
                t = torch.tensor(seq)
                lp = net.log_prob(t[:-1], t[1:])[lo - 1 : hi - 1].sum().item()
            else:
                logits = net(torch.tensor([seq[:-1]])).logits[0].double().log_softmax(-1)
                lp = sum(logits[i - 1, seq[i]].item() for i in range(lo, hi))
            out.append((lp, hi - lo, len((pt + st + xt if full else st).encode())))
    return out


def _assert_matches(got: ChoiceScores, ref: list[tuple[float, int, int]]) -> None:
    assert got.skipped is None
    assert all(math.isfinite(v) for v in got.log_prob)
    for k, (lp, tokens, nbytes) in enumerate(ref):
        assert math.isclose(got.log_prob[k], lp, rel_tol=1e-6, abs_tol=1e-6), (k, got.log_prob[k], lp)
        assert got.num_tokens[k] == tokens and got.num_bytes[k] == nbytes


# --- one-token candidates and contexts of zero or one token -------------------------------------------------------

EDGE_ITEMS = {
    "all-one-token-blank-at-end": Item("the dog ran ___", ("far", "home", "away"), 1),  # the reported crash
    "all-one-token-blank-inside": Item("a ___ sat here", ("cat", "dog"), 0),
    "mixed-lengths-blank-at-end": Item("the dog ran ___", ("far", "back home", "very far away"), 0),
    "mixed-lengths-blank-inside": Item("a ___ sat", ("cat", "big old dog"), 1),
    "no-prefix": Item("___ ran", ("dogs", "the old cats"), 0),
    "no-prefix-no-suffix": Item("___", ("yes", "no way"), 0),
    "no-prefix-one-token-candidates": Item("___", ("yes", "no"), 0),
    "one-token-prefix": Item("dogs ___", ("ran", "sat"), 0),
    "one-token-suffix": Item("___ home", ("go", "run fast"), 1),
    "one-token-prefix-and-suffix": Item("a ___ sat", ("cat", "dog"), 0),
}


@pytest.mark.parametrize("name", list(EDGE_ITEMS))
@pytest.mark.parametrize("family,objective", SCORERS, ids=SCORER_IDS)
def test_one_token_candidates_and_short_contexts_equal_a_brute_force_forward(ids, tiny_net, family, objective, name):
    """Every family scores one-token candidates (all, or mixed with longer ones) and prefixes / suffixes of zero or
    one token: finite, and equal to one plain forward per candidate, tokens and bytes counted as documented."""
    scorer = _scorer(family, objective, ids, tiny_net, _words)
    item = EDGE_ITEMS[name]
    _assert_matches(scorer.score(item), _reference(scorer, item))


@pytest.mark.parametrize("family,objective", [("gpt", "clm"), ("gpt", "ul2"), ("t5", "prefix_lm"), ("bigram", "clm")])
def test_span_rule_scores_one_token_candidates_at_the_end(ids, tiny_net, family, objective):
    """Rule `span` (only the span given the prefix): the one-token case of the reported crash, every causal format."""
    scorer = _scorer(family, objective, ids, tiny_net, _words, rule="span")
    for item in (EDGE_ITEMS["all-one-token-blank-at-end"], EDGE_ITEMS["one-token-suffix"]):
        _assert_matches(scorer.score(item), _reference(scorer, item))


@pytest.mark.parametrize("family,objective", SCORERS, ids=SCORER_IDS)
def test_a_tokenizer_that_makes_every_piece_one_token(ids, tiny_net, family, objective):
    """Prefix, every candidate and suffix one token each (a tokenizer with the whole text in its vocabulary)."""
    scorer = _scorer(family, objective, ids, tiny_net, _single)
    item = Item("the dog ran to the ___ at noon", ("park", "big old house", "shop"), 2)
    got = scorer.score(item)
    _assert_matches(got, _reference(scorer, item))
    if family != "bigram":  # the bigram never saw these tokens: every unseen bigram has the same probability
        assert len(set(got.log_prob)) == 3  # three different tokens, three different scores


@pytest.mark.parametrize("family,objective", SCORERS, ids=SCORER_IDS)
def test_non_latin_items_count_utf8_bytes(ids, tiny_net, family, objective):
    """CJK, emoji and Cyrillic under a character-level tokenizer: bytes are UTF-8 bytes, tokens code points."""
    scorer = _scorer(family, objective, ids, tiny_net, _chars)
    item = Item("猫が___に座った " + CAT_EMOJI, ("マット", "床", "кот"), 0)
    got = scorer.score(item)
    _assert_matches(got, _reference(scorer, item))
    if family == "bert" or objective == "span" or (family, objective) == ("t5", "ul2"):  # the span alone is scored
        assert got.num_bytes == [9, 3, 6]


# --- candidates that tokenize alike ------------------------------------------------------------------------------


@pytest.mark.parametrize("family,objective", SCORERS, ids=SCORER_IDS)
def test_candidates_that_tokenize_alike_tie_and_never_win(ids, tiny_net, family, objective):
    """`café` and `CAFE` + combining acute encode alike (lowercased, NFC): the same score bit for bit and a loss under
    every normalisation, even per byte where their 5 and 6 bytes would break the tie; the other candidate's score
    is the one it gets in an item without the twins."""
    scorer = _scorer(family, objective, ids, tiny_net, _words)
    twins = Item("a ___ sat", ("café", "CAFE\u0301", "dog"), 1)
    got = scorer.score(twins)
    assert got.log_prob[0] == got.log_prob[1] and got.num_tokens[0] == got.num_tokens[1]
    assert got.token_class == (0, 0, 2) and got.skipped is None
    _assert_matches(got, _reference(scorer, twins))
    for norm in ("raw", "per_token", "per_byte"):
        assert correct([twins], [got], norm) == [0.0]
        assert correct([Item(twins.text, twins.choices, 0)], [got], norm) == [0.0]
    alone = scorer.score(Item("a ___ sat", ("café", "dog"), 0))
    assert math.isclose(alone.log_prob[1], got.log_prob[2], rel_tol=1e-9)
    assert math.isclose(alone.log_prob[0], got.log_prob[0], rel_tol=1e-9)
    same = Item("a ___ sat", ("cat", "CAT", "Cat"), 2)  # every candidate alike: one row scored, no winner
    got = scorer.score(same)
    assert len(set(got.log_prob)) == 1 and got.token_class == (0, 0, 0) and math.isfinite(got.log_prob[0])
    assert all(correct([Item(same.text, same.choices, k)], [got], "raw") == [0.0] for k in range(3))


def test_wins_lets_the_label_beat_distractors_that_are_twins_of_each_other():
    """Only the label's own twin makes a tie; two identical distractors do not stop a better label, and a plain tie
    of scores still loses."""
    scores = ChoiceScores([-1.0, -2.0, -2.0], [1, 1, 1], [3, 3, 3], token_class=(0, 1, 1))
    assert scores.wins(0, "raw") and not scores.wins(1, "raw")
    assert not ChoiceScores([-1.0, -1.0], [1, 1], [3, 3]).wins(0, "raw")
    assert ChoiceScores([-1.0, -2.0], [1, 1], [3, 3]).wins(0, "raw")  # token_class None: all distinct


# --- candidates that encode to nothing ---------------------------------------------------------------------------


@pytest.mark.parametrize("family,objective", SCORERS, ids=SCORER_IDS)
def test_an_empty_candidate_skips_the_item_and_is_counted(ids, tiny_net, family, objective):
    """A candidate the tokenizer drops (`猫` has no token) skips the item: NaN scores, wrong under every norm,
    counted with its reason by `skipped` and `summarise`; the other items are scored as before."""
    scorer = _scorer(family, objective, ids, tiny_net, _ascii_words)
    items = [Item("a ___ sat", ("cat", "猫"), 0), Item("a ___ sat", ("cat", "dog"), 0)]
    got = [scorer.score(it) for it in items]
    assert got[0].skipped == EMPTY_CANDIDATE and all(math.isnan(v) for v in got[0].log_prob)
    assert got[1].skipped is None and all(math.isfinite(v) for v in got[1].log_prob)
    for norm in ("raw", "per_token", "per_byte"):
        assert correct(items, got, norm)[0] == 0.0
    assert skipped(got) == {EMPTY_CANDIDATE: 1}
    summary = summarise(items, got)
    assert summary.num_items == 2 and summary.num_skipped == 1 and summary.skipped == {EMPTY_CANDIDATE: 1}


# --- items longer than the positions -----------------------------------------------------------------------------

ABSOLUTE = [("gpt", "clm"), ("gpt", "span"), ("bert", "mlm"), ("t5", "span"), ("t5", "prefix_lm"), ("t5", "ul2")]


@pytest.mark.parametrize("family,objective", ABSOLUTE, ids=[f"{f}-{o}" for f, o in ABSOLUTE])
def test_items_past_an_absolute_position_table_are_skipped_at_exactly_the_limit(ids, tiny_net, family, objective):
    """Learned positions with max_seq_len 12: growing the prefix (and suffix, which T5's prefix_lm decodes) one word
    at a time, the last item scored is the last one a plain forward can run, and every longer item is skipped with
    the reason (never a crash), counted by `summarise`."""
    scorer = _scorer(family, objective, ids, tiny_net, _words, pos="learned", max_seq_len=12)
    items = [Item(" ".join(["w"] * n) + " ___ " + " ".join(["x"] * n), ("cat", "big dog"), 0) for n in range(1, 14)]
    got = [scorer.score(it) for it in items]
    scored = [s.skipped is None for s in got]
    last = scored.index(False) - 1
    assert last >= 0 and not any(scored[last + 1 :]), scored
    _assert_matches(got[last], _reference(scorer, items[last]))
    with pytest.raises(ValueError, match="exceeds model.max_seq_len=12"):
        _reference(scorer, items[last + 1])
    assert got[-1].skipped == "needs more than model.max_seq_len=12 positions (model.pos=learned)"
    assert summarise(items, got).num_skipped == len(items) - last - 1


@pytest.mark.parametrize("family,objective", [("gpt", "clm"), ("t5", "span"), ("bert", "mlm")])
def test_relative_positions_score_items_of_any_length(ids, tiny_net, family, objective):
    """RoPE (GPT, BERT) and T5's bias have no table: a 100-word item past max_seq_len 12 is scored, as in training."""
    pos = {"t5": "t5_bias"}.get(family, "rope")
    scorer = _scorer(family, objective, ids, tiny_net, _words, pos=pos, max_seq_len=12)
    got = scorer.score(Item(" ".join(["w"] * 100) + " ___ end", ("cat", "dog"), 0))
    assert got.skipped is None and all(math.isfinite(v) for v in got.log_prob)


# --- bits per byte ------------------------------------------------------------------------------------------------

TEXTS = ["", "a", "猫", CAT_EMOJI, "Привет, мир!", "\u200b\u200b", "日本語の文は一字三バイト" * 4, "plain text"]
BYTE_SCORERS = [("gpt", "clm"), ("gpt", "prefix_lm"), ("gpt", "ul2"), ("gpt", "span"), ("t5", "span"),
                ("t5", "prefix_lm"), ("t5", "ul2"), ("bert", None)]


def _kept(texts):
    return [t for t in texts if _chars(t)]


@pytest.mark.parametrize("family,objective", BYTE_SCORERS, ids=[f"{f}-{o}" for f, o in BYTE_SCORERS])
def test_bits_per_byte_on_empty_one_token_long_and_non_latin_texts(ids, tiny_net, family, objective):
    """Empty and zero-token texts are skipped and counted; a one-token text, a 48-token CJK text past max_seq_len 16
    (chunked) and emoji / Cyrillic are scored: finite, UTF-8 bytes and code-point tokens counted exactly, and the
    total is the sum of the texts scored one at a time (chunks never cross texts)."""
    net = tiny_net(family, max_seq_len=16).eval()
    score = byte_score(net, TEXTS, _chars, ids, objective=objective)
    kept = _kept(TEXTS)
    assert score.measure == ("pll_bits_per_byte" if family == "bert" else "bits_per_byte")
    assert math.isfinite(score.value) and score.value > 0 and score.reason is None
    assert score.num_texts == len(kept) == 6 and score.num_skipped == 2
    assert score.num_bytes == sum(len(t.encode("utf-8")) for t in kept)
    assert score.num_tokens == sum(len(_chars(t)) for t in kept)
    alone = [byte_score(net, [t], _chars, ids, objective=objective).total_bits for t in kept]
    assert math.isclose(score.total_bits, sum(alone), rel_tol=1e-6)


@pytest.mark.parametrize("family,objective", BYTE_SCORERS, ids=[f"{f}-{o}" for f, o in BYTE_SCORERS])
def test_bits_per_byte_with_nothing_to_score_is_nan_with_a_reason(ids, tiny_net, family, objective):
    """No texts, or only texts that are empty or encode to nothing: NaN (not 0, a perfect score) with a reason."""
    net = tiny_net(family).eval()
    for texts in ([], ["", "\u200b"]):
        score = byte_score(net, texts, _chars, ids, objective=objective)
        assert math.isnan(score.value) and score.num_bytes == score.num_tokens == score.num_texts == 0
        assert score.num_skipped == len(texts) and "no text to score" in (score.reason or "")


def test_one_token_text_scores_one_token(ids, tiny_net):
    """A one-token text: GPT scores it given [EOS], BERT masks it between [CLS] and [SEP]."""
    gpt = tiny_net("gpt").eval()
    score = bits_per_byte(gpt, ["猫"], _chars, ids)
    with torch.no_grad():
        lp = gpt(torch.tensor([[ids.eos]])).logits[0, -1].double().log_softmax(-1)[_id("猫")].item()
    assert score.num_tokens == 1 and score.num_bytes == 3
    assert math.isclose(score.total_bits, -lp / math.log(2), rel_tol=1e-6)
    bert = tiny_net("bert").eval()
    score = pll_bits_per_byte(bert, ["猫"], _chars, ids)
    with torch.no_grad():
        lp = bert(torch.tensor([[ids.cls, ids.mask, ids.sep]])).logits[0, 1].double().log_softmax(-1)[_id("猫")].item()
    assert score.num_tokens == 1 and math.isclose(score.total_bits, -lp / math.log(2), rel_tol=1e-6)


def test_bits_per_byte_refuses_a_max_len_without_room_or_past_the_table(ids, tiny_net):
    """A max_len that leaves no scored token per chunk, or exceeds learned positions, is a clear ObjectiveError."""
    with pytest.raises(ObjectiveError, match="no room"):
        bits_per_byte(tiny_net("gpt").eval(), ["abc"], _chars, ids, objective="span", max_len=2)
    with pytest.raises(ObjectiveError, match="no room"):
        pll_bits_per_byte(tiny_net("bert").eval(), ["abc"], _chars, ids, max_len=2)
    with pytest.raises(ObjectiveError, match="exceeds model.max_seq_len=16"):
        bits_per_byte(tiny_net("gpt", max_seq_len=16).eval(), ["abc"], _chars, ids, max_len=32)


def test_bigram_nll_of_texts_without_tokens_is_nan(ids):
    """The bigram's validation NLL over documents that all encoded to nothing is NaN, not a crash."""
    lm = BigramLM.fit([[10, 11]], ids.vocab_size, separator=ids.eos)
    assert math.isnan(lm.nll([[], []], ids.eos)) and math.isfinite(lm.nll([[10, 11]], ids.eos))


# --- length extrapolation -----------------------------------------------------------------------------------------

LENGTH = [("gpt", "clm"), ("gpt", "prefix_lm"), ("gpt", "span"), ("gpt", "ul2"), ("bert", "mlm"), ("t5", "span"),
          ("t5", "prefix_lm"), ("t5", "ul2")]


@pytest.mark.parametrize("family,objective", LENGTH, ids=[f"{f}-{o}" for f, o in LENGTH])
def test_length_extrapolation_with_fewer_tokens_than_a_block(ids, tiny_net, family, objective):
    """Validation tokens enough for one block at 1x but not at 2x or 4x, fewer than one block, none at all, or a
    NumPy array: `None` with a reason wherever no block fits, a finite loss where one does; never a crash."""
    net = tiny_net(family, pos="rope" if family != "t5" else "t5_bias").eval()
    # 20 tokens: one block at 16 (12 to 17 raw tokens, by objective), none at 32 (26 to 34) or 64
    stream = torch.randint(10, 890, (20,), generator=torch.Generator().manual_seed(0))
    points = length_extrapolation(net, stream, ids, objective=objective, train_seq_len=16)
    assert [p.multiple for p in points] == [1, 2, 4]
    assert points[0].loss is not None and math.isfinite(points[0].loss) and points[0].num_label_tokens > 0
    for p in points[1:]:
        assert p.loss is None and p.num_label_tokens == 0 and "hold no block" in (p.reason or ""), p
    for tokens in (stream[:5], stream[:0], stream[:5].numpy().astype(np.int64)):
        points = length_extrapolation(net, tokens, ids, objective=objective, train_seq_len=16)
        assert all(p.loss is None and "hold no block" in (p.reason or "") for p in points), points


def test_length_extrapolation_at_a_length_the_objective_cannot_build(ids, tiny_net):
    """A training length too short for the objective (clm needs 4 tokens) gives `None` with the objective's reason
    at 1x and 2x (1 and 2 tokens); 4x (4 tokens) is scored."""
    net = tiny_net("gpt", pos="rope").eval()
    stream = torch.randint(10, 890, (200,), generator=torch.Generator().manual_seed(0))
    points = length_extrapolation(net, stream, ids, objective="clm", train_seq_len=1)
    assert [p.loss is None for p in points] == [True, True, False]
    assert "too short" in (points[0].reason or "") and math.isfinite(points[2].loss)


def test_length_extrapolation_max_tokens_caps_the_stream(ids, tiny_net):
    """`max_tokens` below one block: the reason names the tokens used and the cap."""
    net = tiny_net("gpt").eval()
    stream = torch.randint(10, 890, (500,), generator=torch.Generator().manual_seed(0))
    (point,) = length_extrapolation(net, stream, ids, objective="clm", train_seq_len=16, multiples=(1,), max_tokens=10)
    assert point.loss is None and "10 validation tokens (max_tokens=10)" in (point.reason or "")
