"""Generation: KV cache == full recompute, EOS stop, sampling filters, left-padding invariance."""

import pytest
import torch
from conftest import VOCAB
from famlab.families.generation import generate, sample_next


@pytest.mark.parametrize("pos", ["learned", "rope", "alibi", "t5_bias", "sinusoidal"])
@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_kv_cache_equals_full_recompute(family, pos, make_net):
    net = make_net(family, pos=pos, num_kv_heads=2)
    ids = torch.randint(1, VOCAB, (3, 6))
    mask = torch.ones(3, 6, dtype=torch.long)
    mask[0, :2] = 0  # left padding for GPT; for T5 it is just encoder padding
    for kwargs in (dict(), dict(temperature=0.8, top_k=12, top_p=0.9)):
        outs = []
        for use_cache in (True, False):
            g = torch.Generator().manual_seed(3)
            outs.append(
                generate(
                    net,
                    ids,
                    max_new_tokens=7,
                    eos_id=None,
                    attention_mask=mask,
                    generator=g,
                    use_cache=use_cache,
                    **kwargs,
                )
            )
        assert outs[0].shape == (3, 7)
        assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_cached_step_logits_equal_full_forward(family, make_net):
    """The incremental hidden states equal the corresponding positions of one full forward pass."""
    net = make_net(family, pos="rope")
    ids = torch.randint(1, VOCAB, (2, 9))
    with torch.no_grad():
        if family == "gpt":
            full = net(ids).hidden
            cache = net.decoder.new_cache()
            steps = [net(ids[:, :4], cache=cache).hidden] + [
                net(ids[:, t : t + 1], cache=cache).hidden for t in range(4, 9)
            ]
        else:
            src = torch.randint(1, VOCAB, (2, 5))
            enc = net.encode(src)
            full = net.decode(ids, enc)
            cache = net.decoder.new_cache()
            steps = [net.decode(ids[:, :4], enc, cache=cache)]
            steps += [net.decode(ids[:, t : t + 1], enc, cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_left_padded_prompt_generates_like_unpadded(make_net):
    net = make_net("gpt")
    prompt = torch.randint(1, VOCAB, (1, 5))
    alone = generate(net, prompt, max_new_tokens=6, eos_id=None)
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), prompt], 1)
    mask = torch.cat([torch.zeros(1, 3), torch.ones(1, 5)], 1).long()
    assert torch.equal(generate(net, padded, max_new_tokens=6, eos_id=None, attention_mask=mask), alone)


@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_eos_stops_and_pads(family, make_net):
    net = make_net(family)
    ids = torch.randint(1, VOCAB, (2, 5))
    free = generate(net, ids, max_new_tokens=8, eos_id=None)
    eos = int(free[0, 2])
    stopped = generate(net, ids, max_new_tokens=8, eos_id=eos)
    first = int((free[0] == eos).nonzero()[0])
    assert torch.equal(stopped[0, : first + 1], free[0, : first + 1])
    assert (stopped[0, first + 1 :] == net.config.pad_token_id).all()
    both = generate(net, ids[:1], max_new_tokens=8, eos_id=eos)
    assert both.shape[1] == first + 1  # every row finished: generation stops early


def test_top_k_and_top_p_restrict_the_support():
    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    g = torch.Generator().manual_seed(0)
    top3 = logits.topk(3).indices
    for _ in range(50):
        pick = sample_next(logits, temperature=1.0, top_k=3, generator=g)
        assert (top3 == pick[:, None]).any(-1).all()
    assert torch.equal(sample_next(logits, temperature=1.0, top_k=1, generator=g), logits.argmax(-1))
    assert torch.equal(sample_next(logits, temperature=1.0, top_p=1e-6, generator=g), logits.argmax(-1))
    # nucleus: the kept set is the smallest prefix of sorted probs reaching top_p
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    seen = {int(sample_next(probs, temperature=1.0, top_p=0.75, generator=g)) for _ in range(200)}
    assert seen == {0, 1}


def test_temperature_sampling_is_reproducible_and_varied(make_net):
    net = make_net("gpt")
    ids = torch.randint(1, VOCAB, (4, 3))
    a = generate(net, ids, max_new_tokens=10, eos_id=None, temperature=1.5, generator=torch.Generator().manual_seed(1))
    b = generate(net, ids, max_new_tokens=10, eos_id=None, temperature=1.5, generator=torch.Generator().manual_seed(1))
    c = generate(net, ids, max_new_tokens=10, eos_id=None, temperature=1.5, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_bad_generation_settings_raise(make_net):
    net = make_net("gpt")
    with pytest.raises(ValueError, match="top_p"):
        generate(net, torch.ones(1, 2, dtype=torch.long), max_new_tokens=2, eos_id=None, temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="gpt or t5"):
        generate(make_net("bert"), torch.ones(1, 2, dtype=torch.long), max_new_tokens=2, eos_id=None)
