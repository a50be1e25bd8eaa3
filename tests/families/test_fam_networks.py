"""Family-level properties: every combination runs, causality, bidirectionality, padding, masks, tying, overfit."""

import subprocess
import sys

import pytest
import torch
from conftest import VOCAB, run, tiny
from famlab.families import NetworkOutput, build_network
from famlab.families.network import set_attn_impl
from torch.testing import assert_close

FAMILIES = ["bert", "gpt", "t5"]
POSITIONS = ["learned", "sinusoidal", "rope", "alibi", "t5_bias", "none"]


@pytest.mark.parametrize("norm_position", ["pre", "post"])
@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_position_norm_runs_forward_and_backward(family, pos, norm_position):
    torch.manual_seed(0)
    net = build_network(tiny(family, pos=pos, norm_position=norm_position, dropout=0.1)).train()
    ids = torch.randint(1, VOCAB, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    out = run(net, ids, mask, ids[:, :5])
    assert isinstance(out, NetworkOutput)
    assert out.logits.shape == (2, 5 if family == "t5" else 9, VOCAB)
    assert out.hidden.shape[-1] == 32 and (out.encoder_hidden is not None) == (family == "t5")
    out.logits.logsumexp(-1).mean().backward()
    grads = [p.grad for p in net.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(num_kv_heads=1),
        dict(num_kv_heads=2),
        dict(norm="rmsnorm"),
        dict(ffn="gated", activation="silu"),
        dict(ffn="gated", activation="gelu_tanh", head_dim=12),
        dict(bias=False, tie_embeddings=False),
    ],
)
@pytest.mark.parametrize("family", FAMILIES)
def test_block_choices_run_in_every_family(family, overrides, make_net):
    net = make_net(family, **overrides)
    ids = torch.randint(1, VOCAB, (2, 6))
    out = run(net, ids)
    assert torch.isfinite(out.logits).all()


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_decoder_is_causal(family, pos, make_net):
    """Changing tokens after t leaves outputs at positions <= t unchanged (GPT decoder, T5 decoder)."""
    net = make_net(family, pos=pos)
    ids = torch.randint(1, VOCAB, (2, 10))
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 7) % VOCAB
    if family == "gpt":
        a, b = net(ids).logits, net(changed).logits
    else:
        src = torch.randint(1, VOCAB, (2, 8))
        a, b = net(src, decoder_input_ids=ids).logits, net(src, decoder_input_ids=changed).logits
    assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


@pytest.mark.parametrize("family", ["bert", "t5"])
def test_encoder_is_bidirectional(family, make_net):
    """The encoder output at position 0 depends on the last token."""
    net = make_net(family)
    ids = torch.randint(1, VOCAB, (2, 8))
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 5) % VOCAB
    hidden = (lambda x: net.encode(x)) if family == "t5" else (lambda x: net(x).hidden)
    assert not torch.allclose(hidden(ids)[:, 0], hidden(changed)[:, 0])


@pytest.mark.parametrize("pos", ["learned", "rope", "alibi", "t5_bias"])
@pytest.mark.parametrize("family", FAMILIES)
def test_padding_invariance(family, pos, make_net):
    """Appending padding (masked out) leaves the outputs at real positions unchanged."""
    net = make_net(family, pos=pos)
    ids = torch.randint(1, VOCAB, (2, 7))
    padded = torch.cat([ids, torch.zeros(2, 3, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(2, 7), torch.zeros(2, 3)], 1).long()
    if family == "t5":
        dec = torch.randint(1, VOCAB, (2, 4))
        assert_close(
            net(ids, decoder_input_ids=dec).logits,
            net(padded, mask, decoder_input_ids=dec).logits,
            atol=1e-5,
            rtol=1e-5,
        )
        dec_padded = torch.cat([dec, torch.zeros(2, 2, dtype=torch.long)], 1)
        dec_mask = torch.cat([torch.ones(2, 4), torch.zeros(2, 2)], 1).long()
        out = net(ids, decoder_input_ids=dec_padded, decoder_attention_mask=dec_mask).logits[:, :4]
        assert_close(net(ids, decoder_input_ids=dec).logits, out, atol=1e-5, rtol=1e-5)
    else:
        assert_close(net(ids).logits, net(padded, mask).logits[:, :7], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_full_boolean_mask_equal_to_padding_mask_gives_same_output(family, make_net):
    net = make_net(family, pos="alibi")
    ids = torch.randint(1, VOCAB, (2, 8))
    keep = torch.ones(2, 8, dtype=torch.bool)
    keep[0, 5:] = False
    if family == "gpt":  # a full mask replaces causality, so it must spell it out
        full = keep[:, None, :] & torch.ones(8, 8, dtype=torch.bool).tril()
    else:
        full = keep[:, None, :].expand(2, 8, 8)
    real = keep[..., None]
    for m in (full, full[:, None]):
        a, b = run(net, ids, keep).hidden, run(net, ids, m).hidden
        if family == "t5":
            assert_close(a, b)
        else:
            assert_close(a * real, b * real)


def test_prefix_lm_mask_changes_only_what_it_should(make_net):
    """A prefix-LM mask (bidirectional over 4 tokens) lets position 0 see position 3 but not 5."""
    net = make_net("gpt", pos="rope")
    ids = torch.randint(1, VOCAB, (1, 8))
    mask = torch.ones(8, 8, dtype=torch.bool).tril()
    mask[:4, :4] = True
    mask = mask[None]
    changed3, changed5 = ids.clone(), ids.clone()
    changed3[0, 3] = (ids[0, 3] + 1) % VOCAB
    changed5[0, 5] = (ids[0, 5] + 1) % VOCAB
    base = net(ids, mask).hidden
    assert not torch.allclose(base[0, 0], net(changed3, mask).hidden[0, 0])
    assert_close(base[0, :5], net(changed5, mask).hidden[0, :5])


@pytest.mark.parametrize("family", FAMILIES)
def test_sdpa_and_math_paths_agree_in_networks(family, make_net):
    net = make_net(family, pos="t5_bias" if family != "gpt" else "learned")
    ids = torch.randint(1, VOCAB, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    a = run(net, ids, mask).logits
    set_attn_impl(net, "math")
    assert_close(run(net, ids, mask).logits, a, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_project_on_selected_positions_equals_full_logits(family, make_net):
    net = make_net(family)
    ids = torch.randint(1, VOCAB, (2, 8))
    out = run(net, ids)
    sparse = run(net, ids).hidden if family != "t5" else out.hidden
    select = torch.zeros_like(out.logits[..., 0], dtype=torch.bool)
    select[0, 1] = select[1, 3] = True
    assert_close(net.project(sparse[select]), out.logits[select])
    assert run(net, ids).logits is not None
    no_logits = (
        net(ids, compute_logits=False) if family != "t5" else net(ids, decoder_input_ids=ids, compute_logits=False)
    )
    assert no_logits.logits is None


def test_tied_weights_share_storage(make_net):
    gpt, t5, bert = make_net("gpt"), make_net("t5"), make_net("bert")
    assert gpt.head.weight is None and bert.head.weight is None and t5.head.weight is None
    # the only vocabulary matrix is the embedding: a change to it changes the logits' projection
    for net in (gpt, bert, t5):
        n_vocab = [p for p in net.parameters() if p.shape[0] == VOCAB and p.dim() == 2]
        assert len(n_vocab) == 1 and n_vocab[0].data_ptr() == net.embed.weight.data_ptr()
    h = torch.randn(3, 32)
    assert_close(gpt.project(h), h @ gpt.embed.weight.T)
    assert_close(t5.project(h), (h * 32**-0.5) @ t5.embed.weight.T)
    untied = make_net("gpt", tie_embeddings=False)
    assert untied.head.weight.data_ptr() != untied.embed.weight.data_ptr()


def test_bert_token_types_default_to_zero(make_net):
    net = make_net("bert")
    ids = torch.randint(1, VOCAB, (2, 6))
    assert_close(net(ids).logits, net(ids, token_type_ids=torch.zeros_like(ids)).logits)
    assert not torch.allclose(net(ids).logits, net(ids, token_type_ids=torch.ones_like(ids)).logits)


def test_position_ids_are_used(make_net):
    net = make_net("gpt")
    ids = torch.randint(1, VOCAB, (1, 5))
    assert_close(net(ids).logits, net(ids, position_ids=torch.arange(5)[None]).logits)
    assert not torch.allclose(net(ids).logits, net(ids, position_ids=torch.arange(3, 8)[None]).logits)


def test_sequence_longer_than_max_seq_len_raises(make_net):
    net = make_net("gpt", max_seq_len=8)
    with pytest.raises(ValueError, match="max_seq_len=8"):
        net(torch.ones(1, 9, dtype=torch.long))


def test_t5_forward_without_decoder_inputs_raises(make_net):
    with pytest.raises(ValueError, match="decoder_input_ids"):
        make_net("t5")(torch.ones(1, 4, dtype=torch.long))


@pytest.mark.parametrize("family", FAMILIES)
def test_overfits_one_batch(family):
    """A few dozen Adam steps drive the loss on one fixed batch close to zero."""
    torch.manual_seed(0)
    net = build_network(tiny(family)).train()
    ids = torch.randint(1, VOCAB, (4, 12))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for step in range(60):
        out = run(net, ids)
        logits = out.logits[:, :-1] if family == "gpt" else out.logits
        target = ids[:, 1:] if family == "gpt" else ids
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))
        if step == 0:
            first = loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 3.5 and loss.item() < 0.3


def test_families_imports_nothing_beyond_torch_and_stdlib():
    """Importing families (and every submodule but hf) loads no optional framework."""
    code = (
        "import sys, families, families.bert, families.gpt, families.t5, families.generation, families.heads,"
        " families.hf, families.flops\n"
        "bad = [m for m in ('transformers', 'lightning', 'omegaconf', 'wandb', 'tokenizers', 'numpy_financial')"
        " if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
