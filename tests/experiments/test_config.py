"""Config composition: every preset composes and validates; merge order; one-line errors naming keys."""

import pytest
from famlab.experiments.configuration.compose import compose, flatten, parse_overrides, preset_names, to_plain, to_yaml
from famlab.experiments.configuration.config import ConfigInputError
from famlab.families import family_defaults

FAMILIES = ("bert", "gpt", "t5")
SIZES = ("tiny", "small", "base")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_preset_composes_and_validates(family, size):
    """Each family x size composes, the family's faithful defaults survive and derived fields are filled."""
    cfg = compose([family, size], []).cfg
    assert cfg.model.family.value == family
    assert cfg.size == size
    assert cfg.model.head_dim * cfg.model.num_heads == cfg.model.dim
    assert cfg.data.seq_len <= cfg.model.max_seq_len
    assert cfg.objective.name == family_defaults(family).objective


def test_all_bundled_presets_are_known():
    """The presets directory holds the three families and three sizes."""
    assert set(FAMILIES) | set(SIZES) <= set(preset_names())


def test_family_presets_are_faithful():
    """The family presets compose to the family's faithful block choices (famlab.families.faithful; their HF parity
    is tests/families/test_fam_hf_faithful.py's) and each brings its own optimiser settings."""
    bert, gpt, t5 = (compose([f], []).cfg for f in FAMILIES)
    for cfg in (bert, gpt, t5):
        model = {k: getattr(getattr(cfg.model, k), "value", getattr(cfg.model, k)) for k in ("pos", "norm", "init")}
        assert model.items() <= family_defaults(cfg.model.family.value).model.items()
    assert t5.model.num_decoder_layers == t5.model.num_layers
    assert len({bert.optim.lr, gpt.optim.lr, t5.optim.lr}) == 3  # each family has its own optimiser settings
    assert gpt.optim.betas == [0.9, 0.95] and t5.optim.weight_decay == 0.0


@pytest.mark.parametrize("family", FAMILIES)
def test_merge_order_family_preset_or_override_give_the_same_config(family):
    """`famlab pretrain t5 tiny` == `famlab pretrain tiny model.family=t5` (family preset applied first)."""
    a = to_yaml(compose([family, "tiny"], []).cfg)
    b = to_yaml(compose(["tiny"], [f"model.family={family}"]).cfg)
    c = to_yaml(compose(["tiny", family], []).cfg)
    assert a == b == c


def test_size_preset_overrides_family_preset_and_overrides_win():
    """Later presets beat the family preset; key=value overrides beat every preset."""
    cfg = compose(["gpt", "tiny"], ["model.dim=32", "optim.lr=0.5"]).cfg
    assert cfg.model.dim == 32 and cfg.optim.lr == 0.5
    assert cfg.model.num_layers == 2  # from tiny
    assert cfg.optim.betas == [0.9, 0.95]  # from gpt, untouched by tiny


def test_yaml_file_preset(tmp_path):
    """A preset may be a path to a YAML file."""
    path = tmp_path / "mine.yaml"
    path.write_text("model:\n  num_layers: 3\ndata:\n  batch_size: 7\n")
    cfg = compose(["bert", "tiny", str(path)], []).cfg
    assert cfg.model.num_layers == 3 and cfg.data.batch_size == 7


def test_override_formats_and_none():
    """Bare key=value, --key=value and a literal None (W&B's rendering of null) all parse."""
    node = parse_overrides(["model.dim=48", "--data.batch_size=3", "optim.grad_clip=None", "--wandb.group=None"])
    assert node.model.dim == 48 and node.data.batch_size == 3
    assert node.optim.grad_clip is None and node.wandb.group is None
    cfg = compose(["gpt", "tiny"], ["optim.grad_clip=None", "--trainer.max_steps=7"]).cfg
    assert cfg.optim.grad_clip is None and cfg.trainer.max_steps == 7


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["model.famly=x"], "model.famly"),
        (["model.pos=xpos"], "learned, sinusoidal, rope, alibi, t5_bias, none"),
        (["model.dim=abc"], "model.dim"),
        (["objective.name=clm"], "valid pairs"),
        (["data.seq_len=4096"], "model.max_seq_len"),
        (["model.dim=63"], "model.num_heads"),
        (["wandb.mode=maybe"], "auto, online, offline, disabled"),
        (["finetune.pooling=decoder"], "model.family=t5"),
    ],
)
def test_bad_input_is_one_line_naming_the_key(args, needle):
    """Typos, enum violations, types and cross-field problems raise a one-line ValueError naming the key."""
    with pytest.raises(ValueError) as info:
        compose(["bert", "tiny"], args)
    message = str(info.value)
    assert needle in message and "\n" not in message


def test_typo_gets_omegaconf_suggestion():
    """A misspelt key gets OmegaConf's 'Did you mean' suggestion."""
    with pytest.raises(ConfigInputError, match="Did you mean: 'family'"):
        compose(["gpt"], ["model.famly=x"])


def test_contradicting_family_presets_fail():
    """Naming a family preset and a different model.family is ambiguous and fails."""
    with pytest.raises(ConfigInputError, match="contradicts model.family=t5"):
        compose(["bert", "tiny"], ["model.family=t5"])


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ConfigInputError, match="valid presets: .*tiny"):
        compose(["tinyy"], [])


def test_flatten_and_plain_use_dotted_keys_and_enum_values():
    """The W&B config is flat (dotted keys) with enum values, not names."""
    flat = flatten(to_plain(compose(["t5", "tiny"], []).cfg))
    assert flat["model.family"] == "t5" and flat["model.pos"] == "t5_bias"
    assert flat["data.tokenizer.vocab_size"] == 2048
    assert not any(isinstance(v, dict) and v for v in flat.values())


def test_size_preset_by_family_adjusts_only_that_family(tmp_path):
    """`by_family.<family>` in a size preset applies to that family only, right after the preset."""
    t5, gpt = compose(["t5", "tiny"], []).cfg, compose(["gpt", "tiny"], []).cfg
    assert (t5.optim.name, t5.optim.lr_scale, t5.optim.weight_decay) == ("adafactor", 30.0, 0.0)
    assert (gpt.optim.name, gpt.optim.lr_scale, gpt.optim.weight_decay) == ("adamw", 10.0, 0.1)
    assert compose(["bert", "tiny"], []).cfg.optim.name == "adamw"
    assert compose(["tiny"], ["model.family=t5", "optim.lr_scale=2"]).cfg.optim.lr_scale == 2.0  # overrides win
    path = tmp_path / "later.yaml"
    path.write_text("optim:\n  lr_scale: 5.0\n")
    assert compose(["t5", "tiny", str(path)], []).cfg.optim.lr_scale == 5.0  # later presets win too
