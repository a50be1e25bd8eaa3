"""Property test of the HF conversion: random HF configs are converted exactly or refused naming the setting."""

import random

import pytest
import torch
from famlab.families import from_hf, to_hf
from famlab.families.hf_settings import ACT_FROM_HF, HFConversionError
from hf_models import logits_diff, transformers

DRAWS = 50  # configs per family
ACTS = sorted(transformers.activations.ACT2CLS)
REFUSED_ACTS = [a for a in ACTS if a not in ACT_FROM_HF]


def _act(rng: random.Random) -> str:
    """Mostly an activation famlab models; every fourth draw any name HF knows."""
    return rng.choice(ACTS) if rng.random() < 0.25 else rng.choice(sorted(ACT_FROM_HF))


def _dropouts(rng: random.Random, keys: list[str], refused: list[str]) -> dict[str, float]:
    rate = rng.choice([0.0, 0.1])
    out = dict.fromkeys(keys, rate)
    if rng.random() < 0.1:  # one rate differs from the first: famlab has one model.dropout
        out[keys[-1]] = 0.2
        refused.append(keys[-1])
    return out


def draw_bert(rng: random.Random) -> tuple[dict, list[str]]:
    refused: list[str] = []
    heads = rng.choice([1, 2, 4])
    act = _act(rng)
    if act in REFUSED_ACTS:
        refused.append("hidden_act")
    cfg = dict(
        vocab_size=rng.choice([61, 97]),
        hidden_size=heads * rng.choice([4, 8]),
        num_hidden_layers=rng.randint(1, 2),
        num_attention_heads=heads,
        intermediate_size=rng.choice([16, 24, 40]),
        max_position_embeddings=rng.choice([16, 24]),
        type_vocab_size=rng.randint(1, 3),
        hidden_act=act,
        layer_norm_eps=rng.choice([1e-12, 1e-5]),
        tie_word_embeddings=rng.random() < 0.5,
        pad_token_id=rng.choice([0, 3]),
        **_dropouts(rng, ["hidden_dropout_prob", "attention_probs_dropout_prob"], refused),
    )
    if rng.random() < 0.05:
        cfg["is_decoder"] = True
        refused.append("is_decoder")
    return cfg, refused


def draw_gpt(rng: random.Random) -> tuple[dict, list[str]]:
    refused: list[str] = []
    heads = rng.choice([1, 2, 4])
    act = _act(rng)
    if act in REFUSED_ACTS:
        refused.append("activation_function")
    cfg = dict(
        vocab_size=rng.choice([61, 97]),
        n_embd=heads * rng.choice([4, 8]),
        n_layer=rng.randint(1, 3),
        n_head=heads,
        n_inner=rng.choice([None, 24, 40]),
        n_positions=rng.choice([16, 24]),
        activation_function=act,
        layer_norm_epsilon=rng.choice([1e-5, 1e-6]),
        tie_word_embeddings=rng.random() < 0.5,
        scale_attn_weights=rng.random() < 0.7,
        scale_attn_by_inverse_layer_idx=rng.random() < 0.15,
        reorder_and_upcast_attn=rng.random() < 0.3,
        bos_token_id=None,
        eos_token_id=None,
        **_dropouts(rng, ["resid_pdrop", "embd_pdrop", "attn_pdrop"], refused),
    )
    if cfg["scale_attn_by_inverse_layer_idx"]:
        refused.append("scale_attn_by_inverse_layer_idx")
    return cfg, refused


def draw_t5(rng: random.Random) -> tuple[dict, list[str]]:
    refused: list[str] = []
    act = _act(rng)
    gated = rng.random() < 0.5
    if act in REFUSED_ACTS:
        refused.append("dense_act_fn")
    buckets = rng.choice([4, 8, 32])
    cfg = dict(
        vocab_size=rng.choice([61, 97]),
        d_model=rng.choice([16, 24, 32]),
        d_kv=rng.choice([4, 8, 12]),
        d_ff=rng.choice([16, 40]),
        num_layers=rng.randint(1, 2),
        num_decoder_layers=rng.randint(1, 3),
        num_heads=rng.randint(1, 4),
        feed_forward_proj=f"gated-{act}" if gated else act,
        relative_attention_num_buckets=buckets,
        # HF's decoder buckets divide by log(max_distance / (buckets // 2)): equal values give NaN indices
        relative_attention_max_distance=rng.randint(buckets // 2 + 1, 3 * buckets),
        layer_norm_epsilon=rng.choice([1e-6, 1e-5]),
        dropout_rate=rng.choice([0.0, 0.1]),
        tie_word_embeddings=rng.random() < 0.5,  # transformers 5: whether the head rescales by d_model^-0.5
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=None,
    )
    if act == "gelu" and gated:  # "gated-gelu" is the tanh GELU (transformers' backward-compatibility rule)
        cfg["feed_forward_proj"] = "gated-gelu"
    return cfg, refused


DRAW = {"bert": draw_bert, "gpt": draw_gpt, "t5": draw_t5}
BUILD = {
    "bert": lambda c: transformers.BertForMaskedLM(transformers.BertConfig(**c)),
    "gpt": lambda c: transformers.GPT2LMHeadModel(transformers.GPT2Config(**c)),
    "t5": lambda c: transformers.T5ForConditionalGeneration(transformers.T5Config(**c)),
}


@pytest.mark.parametrize("family", ["bert", "gpt", "t5"])
def test_random_hf_configs_convert_exactly_or_are_refused(family):
    """50 seeded random HF configs per family: from_hf -> logits within 1e-4 -> to_hf -> within 1e-4 again, or a
    one-line refusal naming the HF setting and its value."""
    rng = random.Random(f"hf-property-{family}")
    converted = refusals = 0
    for i in range(DRAWS):
        cfg, refused = DRAW[family](rng)
        torch.manual_seed(i)
        model = BUILD[family](cfg).eval()
        if family == "t5" and rng.random() < 0.3:  # transformers 5 ties T5's head: untie it by hand
            model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
        where = f"draw {i}: {family} {cfg}"
        if refused:
            with pytest.raises(HFConversionError) as err:
                from_hf(model)
            message = str(err.value)
            assert "\n" not in message, where
            assert any(f".{key}=" in message for key in refused), (where, message)
            refusals += 1
            continue
        try:
            net = from_hf(model).eval()
        except HFConversionError as e:
            pytest.fail(f"{where}: refused unexpectedly: {e}")
        c = model.config
        length = min(13, getattr(c, "max_position_embeddings", None) or getattr(c, "n_positions", 13))
        assert logits_diff(model, net, seed=i, length=length) <= 1e-4, where
        back = to_hf(net).eval()
        assert logits_diff(model, back, seed=i, length=length) <= 1e-4, where
        converted += 1
    print(f"{family}: {converted} converted exactly, {refusals} refused")
    assert converted >= DRAWS // 2 and refusals >= 1  # the draw exercises both paths


def test_every_hf_activation_is_honoured_or_refused():
    """Every name in transformers' ACT2FN is read by from_hf as a famlab activation or refused by name."""
    for act in ACTS:
        torch.manual_seed(0)
        model = BUILD["bert"](
            dict(vocab_size=61, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
                 max_position_embeddings=16, hidden_act=act)
        ).eval()
        if act in ACT_FROM_HF:
            assert logits_diff(model, from_hf(model).eval()) <= 1e-4, act
        else:
            with pytest.raises(HFConversionError, match=rf"BertConfig\.hidden_act='{act}' has no famlab activation"):
                from_hf(model)
