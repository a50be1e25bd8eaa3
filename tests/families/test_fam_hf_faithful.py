"""Faithfulness beyond the parity shapes: to_hf refusals, settings newly honoured, dropout sites in training mode."""

import pytest
import torch
from famlab.experiments.configuration.compose import family_settings
from famlab.families import ModelConfig, build_network, from_hf, to_hf
from famlab.families.hf_settings import HFConversionError, config_to_hf
from hf_models import logits_diff, transformers
from torch.overrides import TorchFunctionMode


def preset_net(family: str, seed: int = 0, **overrides: object) -> torch.nn.Module:
    """A tiny network with the family preset's block choices (dim 32, 2 heads, 2 layers)."""
    settings = family_settings(family) | dict(vocab_size=61, dim=32, num_heads=2, num_layers=2, max_seq_len=32)
    settings.update(overrides)
    torch.manual_seed(seed)
    return build_network(ModelConfig(**settings)).eval()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("family", "overrides", "message"),
    [
        ("gpt", dict(qk_scale=0.5), r"^to_hf: model\.qk_scale=0\.5 is not expressible"),
        ("gpt", dict(head_scale=0.5), r"^to_hf: model\.head_scale=0\.5 is not expressible"),
        ("gpt", dict(head_dim=8), r"^to_hf: model\.head_dim=8 != model\.dim/model\.num_heads=16"),
        ("bert", dict(head_dim=8), r"^to_hf: model\.head_dim=8 != model\.dim/model\.num_heads=16"),
        ("bert", dict(qk_scale=1.0), r"^to_hf: model\.qk_scale=1\.0 is not expressible"),
        ("bert", dict(type_vocab_size=0), r"^to_hf: model\.type_vocab_size=0 is not expressible"),
        ("bert", dict(pos="rope"), r"^to_hf: model\.pos=rope is not expressible"),
        ("gpt", dict(num_kv_heads=1), r"^to_hf: model\.num_kv_heads=1 \(GQA"),
        ("t5", dict(qk_scale=None), r"^to_hf: model\.qk_scale=None is not expressible"),
        ("t5", dict(head_scale=0.5), r"^to_hf: model\.head_scale=0\.5 is not expressible"),
        ("t5", dict(bias=True), r"^to_hf: model\.bias=True is not expressible"),
    ],
)
def test_to_hf_refuses_what_hf_cannot_express(family, overrides, message):
    """A one-line HFConversionError (a ValueError) naming the setting, raised before any HF model is built."""
    net = preset_net(family, **overrides)
    built = []
    original = transformers.PreTrainedModel.__init__
    transformers.PreTrainedModel.__init__ = lambda self, *a, **k: built.append(self) or original(self, *a, **k)
    try:
        with pytest.raises(HFConversionError, match=message) as err:
            to_hf(net)
    finally:
        transformers.PreTrainedModel.__init__ = original
    assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
    assert not built


@pytest.mark.parametrize(
    ("family", "overrides"),
    [
        ("gpt", dict(qk_scale=1.0)),  # GPT-2's scale_attn_weights=False
        ("gpt", dict(tie_embeddings=False)),
        ("bert", dict(tie_embeddings=False)),  # its own MLM decoder weight
        ("t5", dict(ffn="gated", activation="gelu")),  # exact erf GELU: feed_forward_proj=gated-gelu_python
        ("t5", dict(ffn="gated", activation="gelu_tanh")),  # T5 v1.1: gated-gelu
        ("t5", dict(activation="gelu")),
        ("t5", dict(head_scale=1.0)),  # v1.1's unscaled head
        ("t5", dict(num_decoder_layers=3, head_dim=12)),
    ],
)
def test_to_hf_then_from_hf_keeps_the_logits(family, overrides):
    """Settings HF can express come back from HF unchanged and give the same logits within 1e-4."""
    net = preset_net(family, **overrides)
    model = to_hf(net).eval()
    assert logits_diff(model, net) <= 1e-4
    back = from_hf(model)
    unused = {"max_seq_len"} if family == "t5" else set()  # T5's relative bias has no length limit to carry
    ours, theirs = vars(back.config), vars(net.config)
    assert {k: v for k, v in ours.items() if k not in unused} == {k: v for k, v in theirs.items() if k not in unused}
    assert logits_diff(model, back.eval()) <= 1e-4


def test_from_hf_keeps_an_untied_bert_decoder():
    """An untied BertForMaskedLM keeps its own decoder weight (it used to be tied to the embeddings)."""
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=61, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        tie_word_embeddings=False,
    )
    model = transformers.BertForMaskedLM(cfg).eval()
    assert model.cls.predictions.decoder.weight.data_ptr() != model.bert.embeddings.word_embeddings.weight.data_ptr()
    net = from_hf(model).eval()
    assert not net.config.tie_embeddings
    torch.testing.assert_close(net.head.weight, model.cls.predictions.decoder.weight)
    assert logits_diff(model, net) <= 1e-4


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("scale_attn_by_inverse_layer_idx", True, r"^from_hf: GPT2Config\.scale_attn_by_inverse_layer_idx=True"),
        ("attn_pdrop", 0.3, r"^from_hf: GPT2Config\.attn_pdrop=0\.3 differs from resid_pdrop"),
        ("activation_function", "quick_gelu", r"^from_hf: GPT2Config\.activation_function='quick_gelu' has no"),
    ],
)
def test_from_hf_refuses_gpt2_settings_famlab_does_not_model(flag, value, message):
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=61, n_embd=16, n_layer=2, n_head=2, n_positions=16, **{flag: value})
    )
    with pytest.raises(HFConversionError, match=message):
        from_hf(model)


def test_from_hf_honours_unscaled_gpt2_attention():
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=61, n_embd=16, n_layer=2, n_head=2, n_positions=16, scale_attn_weights=False)
    ).eval()
    net = from_hf(model).eval()
    assert net.config.qk_scale == 1.0
    assert logits_diff(model, net) <= 1e-4
    assert not config_to_hf(net.config).scale_attn_weights


class DropoutCounter(TorchFunctionMode):
    """Counts dropout applications with p > 0: ``F.dropout`` calls (nn.Dropout modules and functional ones) and
    ``scaled_dot_product_attention`` calls with ``dropout_p > 0``."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "dropout":
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            self.count += int(p > 0 and training)
        elif name == "scaled_dot_product_attention":
            self.count += int(kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0) > 0)
        return func(*args, **kwargs)


def _count_dropouts(model, family: str, hf: bool) -> int:
    ids = torch.randint(1, 61, (2, 9))
    kwargs = dict(input_ids=ids) if hf else dict()
    if family == "t5":
        kwargs["decoder_input_ids"] = ids[:, :5]
    model.train()
    with DropoutCounter() as counter:
        if hf:
            model(**kwargs)
        else:
            model(ids, **kwargs)
    return counter.count


@pytest.mark.parametrize("family", ["bert", "gpt", "t5"])
@pytest.mark.parametrize("layers", [(1, 1), (2, 3)])
def test_dropout_sites_match_hugging_face_in_training_mode(family, layers):
    """In training mode the preset's network applies exactly as many dropouts as the HF model of the same config
    (T5: also after the FFN activation and after each stack's final norm). Two depths, so per-layer and
    per-stack sites are both checked."""
    encoder, decoder = layers
    overrides = dict(num_layers=encoder, dropout=0.1) | (dict(num_decoder_layers=decoder) if family == "t5" else {})
    net = preset_net(family, **overrides)
    model = to_hf(net)
    ours, theirs = _count_dropouts(net, family, hf=False), _count_dropouts(model, family, hf=True)
    print(f"{family} {layers}: famlab {ours} dropouts, HF {theirs}")
    assert ours == theirs
