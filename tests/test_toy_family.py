"""A family is an object: a test-only family, registered here and nowhere else, goes through famlab unchanged.

``toy`` is a GPT-like causal decoder under another name, built from the block library (``make_stack``, ``LMHead``)
with its own block choices (rotary positions, RMSNorm, SwiGLU). Registering its ``FamilySpec`` is all it takes: the
network build, ``model.family`` validation, the objective table (by architecture), a pretraining step through the
LightningModule, the fine-tuning collator and classifier, zero-shot scoring and ``famlab pretrain toy`` read the
registry; no library file names it (docs/architecture.md, "Adding a family").
"""

import dataclasses
import json
from types import MappingProxyType

import lightning as L
import pytest
import torch
import yaml
from famlab.families import Family, ModelConfig, build_network, family_defaults, family_names
from famlab.families.blocks.layers import LayerCache
from famlab.families.formats import Arch, DecoderFormat
from famlab.families.heads import LMHead
from famlab.families.network import Network, NetworkOutput, check_buildable, init_weights, make_stack
from famlab.families.registry import FamilyDefaults, FamilySpec, register_family, unregister_family
from famlab.objectives import (
    OBJECTIVES,
    REGISTRY,
    ClassificationCollator,
    ClassifierModule,
    ObjectiveError,
    OptimSettings,
    PretrainModule,
    TokenIds,
    default_objective,
    make_objective,
)
from famlab.objectives.evaluation import bits_per_byte, length_extrapolation
from famlab.objectives.zeroshot import Item, Scorer
from torch import Tensor, nn

NAME = "toy"
VOCAB = 300


class ToyDecoder(nn.Module):
    """A causal decoder: token embeddings, one causal stack, a tied LM head (GPT's layout, the toy's blocks)."""

    family = NAME

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        check_buildable(cfg)
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.decoder = make_stack(cfg, causal=True)
        self.head = LMHead(cfg.dim, cfg.vocab_size, tied=cfg.tie_embeddings, scale=cfg.head_scale or 1.0)
        init_weights(self, cfg)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, position_ids: Tensor | None = None,
                compute_logits: bool = True, cache: list[LayerCache] | None = None) -> NetworkOutput:
        hidden = self.decoder(self.embed(input_ids), attention_mask=attention_mask, position_ids=position_ids,
                              cache=cache)
        return NetworkOutput(self.project(hidden) if compute_logits else None, hidden, None)

    def project(self, hidden: Tensor) -> Tensor:
        return self.head(hidden, self.embed.weight)

    def output_embedding(self) -> tuple[Tensor, float]:
        return self.head.output_weight(self.embed.weight), self.head.scale


def toy_spec() -> FamilySpec:
    # GPT's defaults with the toy's own positions, norm and feed-forward: a Llama-like decoder
    model = {**family_defaults("gpt").model, "pos": "rope", "norm": "rmsnorm", "ffn": "gated", "activation": "silu",
             "bias": False, "dropout": 0.0}
    return FamilySpec(
        name=NAME,
        network=ToyDecoder,
        defaults=FamilyDefaults(model=MappingProxyType(model), objective="clm", pooling="last"),
        input_format=DecoderFormat(single="$A [EOS]", pair="$A [SEP] $B [EOS]", lm_template=False),
    )


@pytest.fixture
def toy():
    spec = register_family(toy_spec())
    try:
        yield spec
    finally:
        unregister_family(NAME)
    assert NAME not in family_names()


def token_ids() -> TokenIds:
    return TokenIds(vocab_size=VOCAB, pad=0, unk=1, cls=2, sep=3, mask=4, bos=5, eos=6, r=7, x=8, s=9,
                    sentinel_ids=[VOCAB - 1 - i for i in range(20)])


def toy_net(seed: int = 0) -> Network:
    torch.manual_seed(seed)
    cfg = ModelConfig(**toy_spec().model_settings(), vocab_size=VOCAB, dim=32, num_layers=2, num_heads=2,
                      max_seq_len=64)
    return build_network(cfg)


def encode(text: str) -> list[int]:
    """A toy tokenizer: one id per character (no special ids)."""
    return [10 + ord(c) % 200 for c in text]


def test_the_registry_lists_it_only_while_registered(toy):
    assert family_names() == ("bert", "gpt", "t5", NAME)
    assert Family(NAME).value == NAME and toy.arch is Arch.DECODER
    assert set(REGISTRY) == {"bert", "gpt", "t5", NAME} and REGISTRY[NAME] is REGISTRY["gpt"]  # by architecture
    assert set(OBJECTIVES) == {"bert", "gpt", "t5"}  # the import-time table of the built-in families
    with pytest.raises(ValueError, match="registered already"):
        register_family(toy_spec())
    with pytest.raises(ValueError, match="built in"):
        unregister_family("gpt")


def test_the_network_builds_from_the_registry(toy):
    net = toy_net()
    assert isinstance(net, ToyDecoder) and isinstance(net, Network)
    assert net.config.family == Family(NAME) and net.config.pos.value == "rope" and not net.config.pos.length_bounded
    out = net(torch.randint(10, VOCAB - 30, (2, 12)))
    assert out.logits is not None and out.logits.shape == (2, 12, VOCAB)
    with pytest.raises(ValueError, match="model.family='nope' is not one of: bert, gpt, t5, toy"):
        ModelConfig(family="nope")  # type: ignore[arg-type]


def test_a_pretraining_step_through_the_lightning_module(toy):
    """The objective comes from the toy's architecture (a decoder trains with clm); one optimiser step lowers nothing
    but runs the real Trainer loop and changes the weights."""
    ids = token_ids()
    assert default_objective(NAME) == "clm"
    objective = make_objective(default_objective(NAME), ids, seq_len=16, family=NAME)
    with pytest.raises(ObjectiveError, match="needs model.family bert"):
        make_objective("mlm", ids, seq_len=16, family=NAME)
    net = toy_net()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    raw = torch.randint(10, VOCAB - 30, (8, objective.raw_block_len), generator=torch.Generator().manual_seed(0))
    batches = [objective.collate(list(raw[i : i + 4])) for i in (0, 4)]
    module = PretrainModule(net, objective, OptimSettings(lr=1e-3, warmup_steps=0, max_steps=2))
    trainer = L.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    assert trainer.global_step == 2
    assert any(not torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert torch.isfinite(objective.loss(net, batches[0]).loss)


def test_classification_input_and_fine_tuning(toy):
    """The toy writes GPT's classification format (its template) and fine-tunes through ClassifierModule."""
    ids = token_ids()
    items = [{"input_ids": [11, 12, 13], "pair_ids": [14, 15], "label": 1}, {"input_ids": [16], "label": 0}]
    batch = ClassificationCollator(NAME, ids, max_len=8, pad_side="left")(items)
    gpt = ClassificationCollator("gpt", ids, max_len=8, pad_side="left")(items)
    assert batch.keys() == gpt.keys() == {"input_ids", "attention_mask", "labels"}
    assert all(torch.equal(batch[k], gpt[k]) for k in batch)
    assert batch["input_ids"].tolist() == [[11, 12, 13, 3, 14, 15, 6], [0, 0, 0, 0, 0, 16, 6]]  # a ([SEP] b) [EOS]
    module = ClassifierModule(toy_net(), 2, OptimSettings(lr=1e-3, warmup_steps=0, max_steps=1),
                              pooling=toy.defaults.pooling)
    logits = module(batch)
    assert logits.shape == (2, 2) and torch.isfinite(module.training_step(batch, 0))
    with pytest.raises(ObjectiveError, match="needs an encoder-decoder"):
        ClassifierModule(toy_net(), 2, OptimSettings(max_steps=1), pooling="decoder")


def test_zero_shot_scoring_is_gpt_s_on_the_same_weights(toy):
    """Scored by its architecture's rules: the toy's cloze scores and bits per byte are a GPT's carrying its weights
    and block choices, to the bit."""
    ids = token_ids()
    net = toy_net()
    gpt = build_network(dataclasses.replace(net.config, family=Family.GPT))
    gpt.load_state_dict(net.state_dict())
    item = Item("the cat ___ on the mat", ("sat", "ran", "sat down"), 0)
    for rule in ("full", "span"):
        ours, theirs = Scorer(net, encode, ids, rule=rule).score(item), Scorer(gpt, encode, ids, rule=rule).score(item)
        assert ours == theirs and all(torch.isfinite(torch.tensor(ours.log_prob)))
    texts = ["a short text", "another, longer text to score"]
    score = bits_per_byte(net, texts, encode, ids)
    assert score == bits_per_byte(gpt, texts, encode, ids) and score.value > 0
    points = length_extrapolation(net, torch.randint(10, 200, (400,)), ids, objective="clm", train_seq_len=16,
                                  multiples=(1, 4))
    assert all(p.loss is not None for p in points)  # rotary positions: no table to outgrow


def test_famlab_pretrain_toy_through_the_cli(toy, tmp_path, monkeypatch):
    """``famlab pretrain toy`` composes the toy's defaults (no preset file: none is bundled) and trains it."""
    from famlab.experiments.commands import cli
    from famlab.experiments.configuration.compose import compose

    cfg = compose([NAME, "tiny"], []).cfg
    assert cfg.model.family == Family(NAME) and cfg.model.pos.value == "rope" and cfg.objective.name == "clm"
    assert cfg.finetune.pooling.value == "last"
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"document {i}: the quick brown fox jumps over the lazy dog {i % 7}"
                                 for i in range(300)))
    run_dir = tmp_path / "run"
    args = ["pretrain", NAME, "tiny", f"data.corpus={corpus}", "data.tokenizer.vocab_size=512", "data.seq_len=32",
            "data.batch_size=4", "trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
            "trainer.log_every_n_steps=1", "trainer.progress_bar=false", "wandb.mode=disabled", f"run_dir={run_dir}"]
    assert cli.main(args) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert results["family"] == NAME and results["steps"] == 2
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["family"] == NAME


@pytest.mark.slow
def test_famlab_finetune_eval_and_compare_take_the_toy(toy, tmp_path, monkeypatch):
    """The registered toy through the other commands, as a user would run them: ``famlab compare`` with the toy as
    an arm beside GPT (its pretraining, fine-tunes, probe, zero-shot and report), then ``famlab finetune`` and
    ``famlab eval`` from the toy's pretraining run."""
    from famlab.experiments.commands import cli

    from tests.experiments.test_compare import tiny_inputs
    from tests.toy_walk import finetune_and_eval

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    inputs = tiny_inputs(tmp_path)
    assert cli.main(["compare", *inputs, f"compare.families=[gpt,{NAME}]", "compare.zero_shot_items=8",
                     "run_dir=cmp"]) == 0
    results = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert set(results["families"]) == {"gpt", NAME} and NAME in results["tables"]["gains"]
    pretrained = tmp_path / "cmp" / f"{NAME}-pretrain-s0"
    assert json.loads((pretrained / "results.json").read_text())["family"] == NAME
    assert "zero_shot" in json.loads((pretrained / "eval.json").read_text())

    tuned, scored = finetune_and_eval(pretrained, inputs, tmp_path)
    assert tuned["family"] == NAME and scored["family"] == NAME and scored["num_items"] == 6


def test_compare_takes_the_registered_family_as_a_preset(toy, capsys):
    """``famlab compare toy`` names the family as ``famlab pretrain toy`` does (its spec's preset), not as a missing
    preset file; the dry run composes the toy arm."""
    from famlab.experiments.commands.cli import main

    assert main(["compare", NAME, f"compare.families=[{NAME}]", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"presets: tiny {NAME}" in out and f"pretrain {NAME} seed 0" in out
