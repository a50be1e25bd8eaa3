"""Parity with Hugging Face: same weights -> same logits; weight maps round-trip; sizes and init agree."""

import pytest
import torch
from famlab.families import build_network, from_hf, to_hf
from famlab.families.faithful import family_defaults
from famlab.families.hf import config_from_hf, hf_pooler_state
from hf_models import SPECS, VOCAB, make_hf, parity_diff, transformers


@pytest.mark.parametrize("name", list(SPECS))
def test_logits_match_hugging_face(name):
    """fp32 logits equal the reference's within 1e-4 (BERT: padding + token types; T5: padded encoder batch)."""
    diff = parity_diff(name)
    print(f"parity {name}: max abs diff {diff:.3g}")
    assert diff <= 1e-4


@pytest.mark.parametrize("name", list(SPECS))
def test_to_hf_round_trips_state_dict_exactly(name):
    model = make_hf(name)
    back = to_hf(from_hf(model))
    ref, got = model.state_dict(), back.state_dict()
    assert set(ref) == set(got)
    for key in ref:
        assert torch.equal(ref[key], got[key]), key
    assert parity_diff(name, net=from_hf(back).eval()) <= 1e-4


@pytest.mark.parametrize("name", list(SPECS))
def test_parameter_count_equals_reference(name):
    model = make_hf(name)
    net = build_network(config_from_hf(model))
    assert sum(p.numel() for p in net.parameters()) == model.num_parameters()


def _init_specs():
    return {
        "bert": transformers.BertForMaskedLM(
            transformers.BertConfig(
                vocab_size=800, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128
            )
        ),
        "gpt": transformers.GPT2LMHeadModel(
            transformers.GPT2Config(
                vocab_size=800, n_embd=64, n_layer=4, n_head=4, n_positions=128, bos_token_id=None, eos_token_id=None
            )
        ),
        "t5": transformers.T5ForConditionalGeneration(
            transformers.T5Config(
                vocab_size=800,
                d_model=64,
                d_kv=16,
                d_ff=128,
                num_layers=3,
                num_heads=4,
                decoder_start_token_id=0,
                pad_token_id=0,
                feed_forward_proj="gated-gelu",
            )
        ),
    }


@pytest.mark.parametrize("family", ["bert", "gpt", "t5"])
def test_init_std_per_parameter_matches_reference(family):
    """Our family init (built from scratch) has the reference _init_weights' per-parameter mean and std."""
    torch.manual_seed(0)
    model = _init_specs()[family]
    net = build_network(config_from_hf(model))
    ours = to_hf(net).state_dict()  # same names as the reference: compare parameter by parameter
    for key, ref in model.state_dict().items():
        if not ref.is_floating_point() or "position_ids" in key:
            continue
        got = ours[key]
        ref_std, got_std = ref.float().std().item(), got.float().std().item()
        # sampling error of a std estimate is ~ std / sqrt(2n); allow 6 of those plus slack for tiny tensors
        tol = 6 * max(ref_std, 1e-8) / (2 * ref.numel()) ** 0.5 + 0.02 * ref_std + 1e-7
        assert abs(got_std - ref_std) <= tol, (key, got_std, ref_std)
        assert abs(got.float().mean().item() - ref.float().mean().item()) <= 6 * ref_std / ref.numel() ** 0.5 + 1e-6, (
            key
        )


def test_bert_pooler_state_from_bert_model_and_pretraining():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64
    )
    pre = transformers.BertForPreTraining(cfg).eval()
    state = hf_pooler_state(pre)
    assert torch.equal(state["dense.weight"], pre.bert.pooler.dense.weight)
    base = transformers.BertModel(cfg)
    assert torch.equal(hf_pooler_state(base)["dense.bias"], base.pooler.dense.bias)
    assert hf_pooler_state(make_hf("bert-a")) is None
    # BertForPreTraining carries the MLM head: its prediction logits match ours
    net = from_hf(pre).eval()
    ids = torch.randint(1, VOCAB, (2, 9))
    with torch.no_grad():
        assert (pre(input_ids=ids).prediction_logits - net(ids).logits).abs().max() <= 1e-4
    hidden = from_hf(base).eval()(ids).hidden
    with torch.no_grad():
        assert (base.eval()(input_ids=ids).last_hidden_state - hidden).abs().max() <= 1e-4


def test_to_hf_rejects_settings_hf_cannot_express(make_net):
    with pytest.raises(ValueError, match="model.pos=rope"):
        to_hf(make_net("bert", pos="rope"))
    with pytest.raises(ValueError, match="num_kv_heads"):
        to_hf(make_net("gpt", num_kv_heads=2))


def test_untied_bert_mlm_bias_is_the_decoder_bias_both_ways(make_net):
    """With untied embeddings transformers also unties cls.predictions.decoder.bias, the bias BertForMaskedLM adds,
    from cls.predictions.bias: to_hf writes it and from_hf reads it."""
    net = make_net("bert", **{**family_defaults("bert").model, "tie_embeddings": False})
    with torch.no_grad():
        net.head.bias.normal_()
    hf = to_hf(net).eval()
    with torch.no_grad():
        hf.cls.predictions.bias.zero_()  # the copy the forward does not add: neither side may depend on it
    ids = torch.randint(1, net.config.vocab_size, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=ids).logits, net(ids).logits, atol=1e-4, rtol=0)
        torch.testing.assert_close(from_hf(hf).eval()(ids).logits, net(ids).logits, atol=1e-4, rtol=0)


def test_from_hf_rejects_unknown_model():
    with pytest.raises(ValueError, match="unsupported model class"):
        from_hf(torch.nn.Linear(2, 2))
