"""ModelConfig: OmegaConf compatibility, derived fields and one-line errors naming the keys."""

import pytest
from famlab.families import build_network
from famlab.families.config import ConfigError, Family, FFNKind, ModelConfig, PosScheme
from omegaconf import OmegaConf


def test_omegaconf_structured_round_trip_fills_derived_fields():
    """to_object runs __post_init__: derived fields come back filled and enums typed."""
    schema = OmegaConf.structured(ModelConfig)
    merged = OmegaConf.merge(schema, OmegaConf.from_dotlist(["family=t5", "dim=96", "num_heads=3", "pos=t5_bias"]))
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, ModelConfig)
    assert cfg.family == Family.T5 and cfg.pos == PosScheme.T5_BIAS
    assert (cfg.head_dim, cfg.num_kv_heads, cfg.num_decoder_layers, cfg.ffn_dim) == (32, 3, 4, 384)
    assert cfg.head_scale == pytest.approx(96**-0.5)  # tied T5 head is rescaled
    assert schema.head_dim is None  # the schema itself keeps derived fields unset


def test_an_unregistered_family_or_position_scheme_is_refused_in_one_line_naming_the_key():
    """``model.family`` and ``model.pos`` are plain strings to OmegaConf; ``to_object`` (``__post_init__``) checks them
    against their registries."""
    for key, value, valid in (("family", "lstm", "bert, gpt, t5"),
                              ("pos", "sinus", "learned, sinusoidal, rope, alibi, t5_bias, none")):
        merged = OmegaConf.merge(OmegaConf.structured(ModelConfig), {key: value})
        with pytest.raises(ConfigError) as err:
            OmegaConf.to_object(merged)
        assert str(err.value) == f"model.{key}={value!r} is not one of: {valid}"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(dim=250, num_heads=6), "model.dim=250 is not divisible by model.num_heads=6; set model.head_dim"),
        (dict(num_heads=4, num_kv_heads=3), "model.num_kv_heads=3"),
        (dict(family="gpt", num_decoder_layers=2), "model.num_decoder_layers=2"),
        (dict(pos="rope", head_dim=7), "model.head_dim=7"),
        (dict(dropout=1.5), "model.dropout=1.5"),
        (dict(pos="sinus"), "model.pos='sinus'"),
        (dict(vocab_size=-1), "model.vocab_size=-1"),
    ],
)
def test_invalid_config_raises_one_line_naming_key(kwargs, message):
    with pytest.raises(ConfigError) as err:
        ModelConfig(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, ValueError)


def test_head_dim_decouples_attention_width_from_dim():
    cfg = ModelConfig(dim=250, num_heads=6, head_dim=16)
    assert cfg.head_dim == 16


def test_derived_defaults_per_family_and_ffn():
    assert ModelConfig(family="bert").type_vocab_size == 2
    assert ModelConfig(family="gpt").type_vocab_size == 0
    assert ModelConfig(family="gpt").num_decoder_layers == 0
    gated = ModelConfig(dim=96, ffn=FFNKind.GATED)
    assert gated.ffn_dim == 256 and gated.ffn_dim % 8 == 0
    assert ModelConfig(family="t5", tie_embeddings=False).head_scale == 1.0


def test_vocab_size_zero_is_tolerated_until_build():
    cfg = ModelConfig()
    assert cfg.vocab_size == 0
    with pytest.raises(ConfigError, match="model.vocab_size"):
        build_network(cfg)
