"""`famlab export`: run directories become Hugging Face folders that `transformers` loads offline, same logits."""

import json
import shutil

import pytest
import torch
import yaml
from famlab.experiments.commands.cli import main
from famlab.experiments.commands.export import export, plan_export
from famlab.experiments.configuration.compose import family_settings
from famlab.families import ModelConfig, build_network
from famlab.objectives import ClassifierModule, OptimSettings

transformers = pytest.importorskip("transformers")
TEXTS = ["the cat sat on the mat", "a dog looked at the cat and sat", "mat"]
LABELS = ["animal", "object", "place"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("task") / "task.csv"
    rows = [f"{t} {i},{LABELS[i % 3]}" for i, t in enumerate(TEXTS * 10)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


@pytest.fixture
def make_run(bundle, task_file, tmp_path):
    """A run directory as `famlab pretrain` / `famlab finetune` leave it (random weights, no training)."""

    def build(family, pooling=None, standardize=False, **overrides):
        run_dir = tmp_path / f"{family}-{pooling or 'lm'}"
        run_dir.mkdir()
        model = family_settings(family) | dict(vocab_size=bundle.vocab_size, dim=32, num_layers=2, num_heads=2,
                                              max_seq_len=48) | overrides  # fmt: skip
        torch.manual_seed(0)
        net = build_network(ModelConfig(**model))
        if pooling is None:  # a trained network: off its init, attention far from uniform (so positions and the
            with torch.no_grad():  # rotary layout show in the logits), a nonzero MLM bias
                for p in net.parameters():
                    p.add_(torch.randn_like(p), alpha=0.3)
        tokenizer = {"kind": "bpe", "num_sentinels": 10}
        config = {"model": model, "objective": {"name": "mlm"}, "data": {"tokenizer": tokenizer}}
        (run_dir / "checkpoints").mkdir()
        shutil.copyfile(bundle.path, run_dir / "tokenizer.json")
        if pooling is None:
            results = {"job": "pretrain", "steps": 2, "budget": {"tokens": 512, "flops": 1e9}}
            ckpt = {"state_dict": {f"net.{k}": v for k, v in net.state_dict().items()}}
            name, module = "last.ckpt", net
        else:
            optim = OptimSettings(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, warmup_steps=0, max_steps=2)
            module = ClassifierModule(net, 3, optim, pooling=pooling, standardize=standardize)
            with torch.no_grad():  # a trained head: nonzero bias, batch-norm statistics away from (0, 1)
                module.head.classifier.bias.normal_(std=0.5)
                module.head.classifier.weight.normal_(std=0.3)
                if standardize:
                    module.head.norm.running_mean.normal_()
                    module.head.norm.running_var.uniform_(0.5, 2.0)
            config["data"].update(task=str(task_file))
            results = {"job": "finetune", "task": "task", "mean": {"test/acc": 0.5}, "seeds": {"0": {"test/acc": 0.5}}}
            ckpt = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)}
            name = "best-step2.ckpt"
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
        (run_dir / "results.json").write_text(json.dumps(results))
        torch.save(ckpt, run_dir / "checkpoints" / name)
        return run_dir, module.eval()

    return build


LM_CLASS = {"bert": "AutoModelForMaskedLM", "gpt": "AutoModelForCausalLM", "t5": "AutoModelForSeq2SeqLM"}


def _load(out):
    tok = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    return tok, tok(TEXTS, return_tensors="pt", padding=True)


@pytest.mark.parametrize(
    ("family", "overrides"),
    [
        ("bert", {}),
        ("gpt", {}),
        ("t5", {}),
        ("bert", dict(tie_embeddings=False, activation="gelu_tanh")),
        ("gpt", dict(qk_scale=1.0, tie_embeddings=False)),  # config.json: scale_attn_weights=false
        ("t5", dict(head_scale=1.0, ffn="gated", activation="gelu")),  # unscaled head, gated exact GELU
        ("bert", dict(pos="rope")),  # RoFormerForMaskedLM: q/k rows reordered for its interleaved rotation
        ("bert", dict(pos="rope", tie_embeddings=False, activation="relu", type_vocab_size=3)),
    ],
)
def test_exported_language_model_loads_offline_with_the_same_logits(make_run, tmp_path, family, overrides):
    """`famlab export` writes model, fast tokenizer, config.json and a model card; the Auto class of the family loads
    it from the folder offline and gives famlab's logits within 1e-4."""
    run_dir, net = make_run(family, **overrides)
    out = tmp_path / "hf"
    assert main(["export", str(run_dir), str(out)]) == 0
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md"} <= {p.name for p in out.iterdir()}
    model = getattr(transformers, LM_CLASS[family]).from_pretrained(str(out), local_files_only=True).eval()
    if overrides.get("pos") == "rope":
        assert isinstance(model, transformers.RoFormerForMaskedLM) and not model.config.rotary_value
    tok, batch = _load(out)
    assert isinstance(tok, transformers.PreTrainedTokenizerFast)
    assert tok.pad_token == "[PAD]" and tok.pad_token_id == net.config.pad_token_id
    assert tok.convert_tokens_to_ids("<extra_id_0>") == len(tok) - 1 and tok.mask_token == "[MASK]"
    with torch.no_grad():
        if family == "t5":
            dec = torch.full((len(TEXTS), 3), tok.pad_token_id)
            ours = net(batch.input_ids, batch.attention_mask, decoder_input_ids=dec).logits
            theirs = model(**batch, decoder_input_ids=dec).logits
        elif family == "bert":
            assert batch.input_ids[0, 0] == tok.cls_token_id  # [CLS] a [SEP], as famlab's collator
            ours = net(batch.input_ids, batch.attention_mask, token_type_ids=batch.token_type_ids).logits
            theirs = model(**batch).logits
        else:
            ours, theirs = net(batch.input_ids, batch.attention_mask).logits, model(**batch).logits
    keep = batch.attention_mask.bool() if family != "t5" else slice(None)
    assert (ours - theirs)[keep].abs().max() <= 1e-4
    card = (out / "README.md").read_text()
    assert "library_name: transformers" in card and LM_CLASS[family] in card and '"tokens": 512' in card


@pytest.mark.parametrize(("family", "pooling", "standardize"), [("bert", "cls", True), ("gpt", "last", False)])
def test_exported_classifier_has_label_names_and_the_same_logits(make_run, tmp_path, family, pooling, standardize):
    """A fine-tuned classifier becomes ...ForSequenceClassification with id2label; its logits equal the
    ClassifierModule's within 1e-4 (GPT's head bias moves into the final LayerNorm, a standardising head folds in)."""
    run_dir, module = make_run(family, pooling=pooling, standardize=standardize)
    out = tmp_path / "hf"
    export(plan_export(str(run_dir), str(out)))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(out), local_files_only=True).eval()
    assert model.config.id2label == dict(enumerate(LABELS))
    tok, batch = _load(out)
    assert batch.input_ids[0, batch.attention_mask[0].sum() - 1] == tok.convert_tokens_to_ids(
        "[SEP]" if family == "bert" else "[EOS]"
    )  # the fine-tuning collator's format
    with torch.no_grad():
        ours = module(dict(batch))
        theirs = model(**batch).logits
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("family", "overrides", "pooling", "named"),
    [
        ("gpt", dict(pos="rope"), None, "model.pos=rope"),
        ("t5", dict(pos="rope"), None, "model.pos=rope"),
        ("bert", dict(pos="rope", rope_theta=500000.0), None, "model.rope_theta=500000 is not expressible"),
        ("bert", dict(pos="rope", qk_scale=0.5), None, "model.qk_scale=0.5"),
        ("gpt", dict(qk_scale=0.5), None, "model.qk_scale=0.5"),
        ("t5", dict(qk_scale=None), None, "model.qk_scale=None"),
        ("t5", dict(tie_embeddings=False), None, "model.tie_embeddings=false"),
        ("bert", dict(norm="rmsnorm"), None, "model.norm=rmsnorm"),
    ],
)
def test_settings_hf_cannot_express_are_refused_on_one_line_before_writing(
    make_run, tmp_path, capsys, family, overrides, pooling, named
):
    run_dir, _ = make_run(family, pooling=pooling, **overrides)
    out = tmp_path / "hf"
    assert main(["export", str(run_dir), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("famlab: error: ") and named in err, err
    assert not out.exists()


def test_export_usage_errors(make_run, tmp_path, capsys):
    run_dir, _ = make_run("gpt")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    for args, message in [
        ([str(run_dir)], "usage: famlab export <run_dir> <out_dir>"),
        ([str(tmp_path / "nope"), str(tmp_path / "o")], "config.yaml is missing"),
        ([str(run_dir), str(tmp_path / "full")], "is not an empty directory"),
        ([str(run_dir), str(tmp_path / "o"), "steps=3"], "famlab export does not read steps"),
    ]:
        assert main(["export", *args]) == 2
        assert message in capsys.readouterr().err
