"""Zero-shot multiple-choice scoring against brute-force loops, Hugging Face losses and a memorisation toy."""

import math

import pytest
import torch
from famlab.families import from_hf
from famlab.objectives import ObjectiveError, make_objective
from famlab.objectives.prefix import prefix_lm_mask
from famlab.objectives.zeroshot import BigramLM, Item, Scorer, correct, is_correct, split_blank

ITEM = Item("a cat ___ on the mat", ("sat", "sat down", "élan"), 0)
END = Item("the dog ran ___", ("far", "home now"), 1)  # blank at the end: [EOS] closes the span


def _encode(text: str) -> list[int]:
    """A toy tokenizer: one id per UTF-8 byte, past the specials (ids 10..265)."""
    return [10 + b for b in text.encode("utf-8")]


def _lp(logits: torch.Tensor, target: int) -> float:
    return logits.double().log_softmax(-1)[target].item()


def test_split_blank_moves_the_space_into_the_span_and_ties_lose():
    """`a ___ of` -> `a` | ` cat` | ` of`; a tie never counts as correct."""
    assert split_blank("a ___ of", "cat") == ("a", " cat", " of")
    assert split_blank("___: x", "dog") == ("", "dog", ": x")
    assert not is_correct([-1.0, -1.0], 0) and is_correct([-1.0, -2.0], 0) and not is_correct([-3.0, -2.0], 0)


@pytest.mark.parametrize("rule", ["full", "span"])
@pytest.mark.parametrize("objective,lead", [("clm", "eos"), ("ul2", "s")])
def test_gpt_scores_equal_a_full_forward_per_candidate(ids, tiny_net, rule, objective, lead):
    """Cached, batched scoring equals one plain forward of `[lead] prefix span suffix` per candidate."""
    net = tiny_net("gpt", vocab_size=1000).eval()
    for item in (ITEM, END):
        got = Scorer(net, _encode, ids, objective=objective, rule=rule).score(item)
        for k, choice in enumerate(item.choices):
            p, s, x = (_encode(t) for t in split_blank(item.text, choice))
            seq = [getattr(ids, lead)] + p + s + x
            logits = net(torch.tensor([seq])).logits[0]
            lo, hi = (1, len(seq)) if rule == "full" else (1 + len(p), 1 + len(p) + len(s))
            expected = sum(_lp(logits[i - 1], seq[i]) for i in range(lo, hi))
            assert math.isclose(got.log_prob[k], expected, rel_tol=1e-6, abs_tol=1e-6)
            assert got.num_tokens[k] == hi - lo
            text = item.text.replace("___", choice)
            assert got.num_bytes[k] == len((text if rule == "full" else split_blank(item.text, choice)[1]).encode())


def _t5_target(ids, item, choice):
    p, s, x = (_encode(t) for t in split_blank(item.text, choice))
    s0 = ids.sentinel_ids[0]
    close = ids.sentinel_ids[1] if x and split_blank(item.text, choice)[2].strip() else ids.eos
    return p + [s0] + x + [ids.eos], [s0], s + [close]


@pytest.mark.parametrize("item", [ITEM, END])
def test_t5_scores_the_span_and_its_closing_token_given_the_sentinel_input(ids, tiny_net, item):
    """T5: encoder `prefix <s0> suffix [EOS]`, decoder given `<s0>`, scores span + `<s1>` (or `[EOS]` at the end)."""
    net = tiny_net("t5", vocab_size=1000).eval()
    got = Scorer(net, _encode, ids).score(item)
    for k, choice in enumerate(item.choices):
        enc, given, target = _t5_target(ids, item, choice)
        dec = [ids.pad] + given + target
        logits = net(torch.tensor([enc]), decoder_input_ids=torch.tensor([dec[:-1]])).logits[0]
        expected = sum(_lp(logits[len(given) + j], t) for j, t in enumerate(target))
        assert math.isclose(got.log_prob[k], expected, rel_tol=1e-6)
        assert got.num_tokens[k] == len(target)


def test_span_trained_gpt_uses_t5s_format_under_a_prefix_mask(ids, tiny_net):
    """GPT trained with decoder-only span: input as a bidirectional prefix, `<s0>` given, then span + close."""
    net = tiny_net("gpt", vocab_size=1000).eval()
    got = Scorer(net, _encode, ids, objective="span").score(ITEM)
    for k, choice in enumerate(ITEM.choices):
        enc, given, target = _t5_target(ids, ITEM, choice)
        seq = enc + given + target
        mask = prefix_lm_mask(torch.tensor([len(enc)]), len(seq))
        logits = net(torch.tensor([seq]), attention_mask=mask).logits[0]
        start = len(enc) + len(given)
        expected = sum(_lp(logits[start + j - 1], t) for j, t in enumerate(target))
        assert math.isclose(got.log_prob[k], expected, rel_tol=1e-6)


def test_bert_span_pll_equals_a_brute_force_loop(ids, tiny_net):
    """BERT: the span's pseudo-log-likelihood, one masked position at a time (Salazar et al. 2020)."""
    net = tiny_net("bert", vocab_size=1000).eval()
    got = Scorer(net, _encode, ids).score(ITEM)
    for k, choice in enumerate(ITEM.choices):
        p, s, x = (_encode(t) for t in split_blank(ITEM.text, choice))
        full = [ids.cls] + p + s + x + [ids.sep]
        expected = 0.0
        for i in range(1 + len(p), 1 + len(p) + len(s)):
            masked = full[:i] + [ids.mask] + full[i + 1 :]
            expected += _lp(net(torch.tensor([masked])).logits[0, i], full[i])
        assert math.isclose(got.log_prob[k], expected, rel_tol=1e-6)
        assert got.num_tokens[k] == len(s)


def test_bigram_counts_and_scores_by_hand(ids):
    """Add-k bigram probabilities from counts; the scorer's full rule sums them from [EOS]."""
    docs = [[10, 11, 12], [10, 12]]
    lm = BigramLM.fit(docs, 1000, separator=ids.eos, k=0.5)
    # c(10, 11) = 1, c(10) = 2 as a left context
    assert math.isclose(lm.log_prob(torch.tensor([10]), torch.tensor([11])).item(), math.log(1.5 / (2 + 500)))
    assert math.isclose(lm.log_prob(torch.tensor([13]), torch.tensor([11])).item(), math.log(1 / 1000))
    item = Item("\n___\x02", ("\x01", "\x02"), 0)  # bytes 10, (11 | 12), 12
    got = Scorer(lm, _encode, ids).score(item)
    for k, tok in enumerate((11, 12)):
        seq = torch.tensor([ids.eos, 20, tok, 12])
        assert math.isclose(got.log_prob[k], lm.log_prob(seq[:-1], seq[1:]).sum().item(), rel_tol=1e-9)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_bigram_from_a_prepared_stream_has_the_documents_counts(ids, chunk):
    """A training stream (each document followed by the separator, empty documents included), counted chunk by
    chunk, gives exactly fit's keys, counts and left-context counts."""
    import numpy as np

    g = torch.Generator().manual_seed(chunk)
    docs = [torch.randint(10, 40, (int(n),), generator=g).tolist() for n in torch.randint(0, 9, (40,), generator=g)]
    stream = np.array([t for d in docs for t in (*d, ids.eos)], dtype=np.uint16)
    want = BigramLM.fit(docs, 64, separator=ids.eos)
    got = BigramLM.fit_stream(stream, 64, separator=ids.eos, chunk=chunk)
    for a, b in ((got.keys, want.keys), (got.counts, want.counts), (got.unigram, want.unigram)):
        assert torch.equal(a, b)
    with pytest.raises(ObjectiveError, match="non-empty document"):
        BigramLM.fit_stream(np.array([ids.eos, ids.eos]), 64, separator=ids.eos)


def test_bad_rule_and_bad_objects_are_refused(ids, tiny_net):
    """Unknown rules and non-famlab modules raise ObjectiveError."""
    with pytest.raises(ObjectiveError, match="rule"):
        Scorer(tiny_net("gpt"), _encode, ids, rule="whole")
    with pytest.raises(ObjectiveError, match="famlab network"):
        Scorer(torch.nn.Linear(2, 2), _encode, ids)


# --- parity with Hugging Face losses ------------------------------------------------------------------------------


def test_gpt_scores_equal_hf_gpt2_loss(ids):
    """A random HF GPT-2 converted with from_hf: the full-rule score is -(HF loss x scored tokens), within 1e-4."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4,
                                                              n_positions=64, bos_token_id=None, eos_token_id=None))
    hf.eval()
    net = from_hf(hf).eval()
    got = Scorer(net, _encode, ids).score(ITEM)
    for k, choice in enumerate(ITEM.choices):
        seq = torch.tensor([[ids.eos] + _encode(ITEM.text.replace("___", choice))])
        with torch.no_grad():
            loss = hf(input_ids=seq, labels=seq).loss.double()
        got_k = torch.tensor(got.log_prob[k], dtype=torch.float64)
        torch.testing.assert_close(got_k, -loss * (seq.shape[1] - 1), atol=1e-4, rtol=0)


def test_t5_scores_equal_hf_t5_loss(make_ids):
    """A random HF T5 converted with from_hf: the span score is HF's token losses over span + close, within 1e-4."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    ids = make_ids(vocab_size=300, num_sentinels=10)
    hf = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=300, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
        feed_forward_proj="relu", decoder_start_token_id=0, pad_token_id=0, eos_token_id=None))
    hf.eval()
    net = from_hf(hf).eval()
    got = Scorer(net, _encode, ids).score(ITEM)
    for k, choice in enumerate(ITEM.choices):
        enc, given, target = _t5_target(ids, ITEM, choice)
        labels = torch.tensor([given + target])
        with torch.no_grad():
            logits = hf(input_ids=torch.tensor([enc]), labels=labels).logits[0]
        per_token = torch.nn.functional.cross_entropy(logits.double(), labels[0], reduction="none")
        got_k = torch.tensor(got.log_prob[k], dtype=torch.float64)
        torch.testing.assert_close(got_k, -per_token[len(given) :].sum(), atol=1e-4, rtol=0)


# --- memorisation toy ---------------------------------------------------------------------------------------------

SENTENCES = ["the red fox jumps over a lazy dog", "my old cat sleeps on the warm mat",
             "a tall man reads his long blue book", "our new car needs some cheap black oil"]  # eight words each
WORDS = sorted({w for s in SENTENCES for w in s.split()})


def _word_encode(text: str) -> list[int]:
    return [10 + WORDS.index(w) for w in text.split()]


# Every block is one sentence laid out as the family's scoring input reads it (GPT: `[EOS] sentence [EOS]`; BERT:
# `[CLS] sentence [SEP]`; T5: the sentence, `[EOS]` appended by the corruption). T5 needs several one-token spans
# per block: T5's noise mask always ends with a noise span (random_spans_noise_mask interleaves non-noise, noise),
# so with one span per block only the last word is ever masked, and a network that memorised its blocks (loss
# 0.002) still scored the memorised filler of a middle blank at chance (4 of 12) and decoded the last word.
MEMORISE = [  # family, objective, seq_len, objective settings, lr, steps
    ("gpt", "clm", 9, {}, 1e-2, 150),
    ("bert", "mlm", 10, {"mask_rate": 0.3}, 3e-3, 200),
    ("t5", "span", 9, {"noise_density": 0.25, "mean_span": 1.0}, 3e-3, 200),
]


@pytest.mark.parametrize("family,objective,seq_len,settings,lr,steps", MEMORISE, ids=[m[0] for m in MEMORISE])
def test_each_family_memorises_sentences_and_picks_the_memorised_filler(make_ids, tiny_net, family, objective,
                                                                        seq_len, settings, lr, steps):
    """Trained with its objective on four sentences, the network scores the memorised filler highest."""
    ids = make_ids(vocab_size=64, num_sentinels=8)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a dim-32 network: threads cost more than they give
    try:
        torch.manual_seed(0)
        net = tiny_net(family, vocab_size=64)
        gen = torch.Generator().manual_seed(0)
        obj = make_objective(objective, ids, seq_len=seq_len, family=family, generator=gen, **settings)
        sep = obj.separator_id
        lead = [sep] if family == "gpt" else []
        blocks = [torch.tensor((lead + _word_encode(s) + [sep])[: obj.raw_block_len]) for s in SENTENCES]
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        net.train()
        for _ in range(steps):
            batch = obj.collate(blocks * 4)  # each sentence 4 times per batch, corrupted afresh every step
            loss = obj.loss(net, batch).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        items = []
        for s in SENTENCES:
            words = s.split()
            for pos in (1, 2, 4):
                others = [o.split()[pos] for o in SENTENCES if o != s]
                items.append(Item(" ".join(words[:pos] + ["___"] + words[pos + 1 :]), (words[pos], *others), 0))
        scores = [Scorer(net, _word_encode, ids, objective=objective).score(it) for it in items]
    finally:
        torch.set_num_threads(threads)
    # chance is 3 of 12. One miss is allowed: T5 can memorise its blocks and still score one middle blank's filler
    # second, which seeds and CPUs decide (measured on one CPU: each sentence 4 times per batch, 12 of 12 at each of
    # 8 seeds; twice per batch, 10 to 12, and 11 at seed 0, where another CPU gave 12)
    assert sum(correct(items, scores, "raw")) >= len(items) - 1
