"""ClassifierModule: pooling per family (padding-invariant), head learning rate, metrics, fine-tuning."""

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from famlab.families import heads, registry
from famlab.objectives import ClassificationCollator, ClassifierModule, ObjectiveError, OptimSettings
from famlab.objectives.classifier import pooled_features
from torch.utils.data import DataLoader

CASES = [("bert", "cls"), ("gpt", "last"), ("t5", "mean"), ("t5", "decoder"), ("bert", "mean"), ("gpt", "mean")]
EVERY_POOLING = [(f, p) for f in ("bert", "gpt", "t5") for p in registry.family(f).input_format.poolings]


def _items(n: int, seed: int = 0, classes: int = 3) -> list[dict]:
    """Texts of different lengths whose label is decided by their first token (learnable)."""
    g = torch.Generator().manual_seed(seed)
    items = []
    for _ in range(n):
        label = int(torch.randint(classes, (1,), generator=g))
        length = int(torch.randint(2, 9, (1,), generator=g))
        text = [100 + label] + torch.randint(200, 900, (length,), generator=g).tolist()
        items.append({"input_ids": text, "pair_ids": None, "label": label})
    return items


@pytest.mark.parametrize(
    "family,pooling,pad_side",
    [(f, p, "right") for f, p in CASES] + [(f, p, "left") for f, p in CASES if f != "bert"],  # BERT: [CLS] first
)
def test_pooling_ignores_padding(ids, tiny_net, family, pooling, pad_side):
    """A padded row pools to the same vector as the row alone (so `last` finds the last real token)."""
    module = ClassifierModule(tiny_net(family), 3, OptimSettings(), pooling=pooling).eval()
    collate = ClassificationCollator(family, ids, max_len=16, pad_side=pad_side)
    items = [
        {"input_ids": [11, 12, 13, 14, 15, 16], "pair_ids": None, "label": 0},
        {"input_ids": [21, 22], "pair_ids": None, "label": 1},
    ]
    with torch.no_grad():
        together = module.pooled(collate(items))  # (2, C), row 1 padded
        alone = module.pooled(collate(items[1:]))  # (1, C), no padding
    assert torch.isfinite(together).all()
    torch.testing.assert_close(together[1], alone[0], rtol=1e-4, atol=1e-5)


def test_last_pooling_picks_the_last_real_token(tiny_net, ids):
    """GPT's `last` pooling equals the network's hidden state at the last non-pad position, either padding."""
    module = ClassifierModule(tiny_net("gpt"), 3, OptimSettings(), pooling="last").eval()
    item = {"input_ids": [31, 32, 33], "pair_ids": None, "label": 0}
    longer = {"input_ids": list(range(40, 50)), "pair_ids": None, "label": 0}
    with torch.no_grad():
        reference = module.net(torch.tensor([[31, 32, 33, ids.eos]]), compute_logits=False).hidden[0, -1]
        for side in ("right", "left"):
            pooled = module.pooled(ClassificationCollator("gpt", ids, max_len=16, pad_side=side)([item, longer]))
            torch.testing.assert_close(pooled[0], reference, rtol=1e-4, atol=1e-5)


def test_pooler_state_and_head_learning_rate(tiny_net):
    """A given pooler state is loaded into BERT's pooler; head parameters get head_lr, the network optim.lr."""
    pooler = heads.Pooler(32)
    module = ClassifierModule(
        tiny_net("bert"),
        4,
        OptimSettings(lr=1e-4, warmup_steps=0),
        pooling="cls",
        head_lr=1e-2,
        pooler_state=pooler.state_dict(),
    )
    torch.testing.assert_close(module.head.pooler.dense.weight, pooler.dense.weight)
    optimizer = module.configure_optimizers()["optimizer"]
    head_ids = {id(p) for p in module.head.parameters()}
    for group in optimizer.param_groups:
        in_head = {id(p) in head_ids for p in group["params"]}
        assert len(in_head) == 1
        assert group["lr"] == pytest.approx(1e-2 if in_head.pop() else 1e-4)


def _pair_batch(family: str, ids) -> dict[str, torch.Tensor]:
    """Text pairs of different lengths (token types 0 and 1 both occur where the family reads them)."""
    items = [dict(item, pair_ids=[300 + i, 301 + i]) for i, item in enumerate(_items(6))]
    return ClassificationCollator(family, ids, max_len=16)(items)


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("family,pooling", EVERY_POOLING)
def test_every_parameter_the_module_holds_gets_a_gradient(ids, tiny_net, family, pooling, tied):
    """DDP without unused-parameter detection needs every parameter of the module to get a gradient from the
    training loss; and the module keeps every parameter the pooled features use (the body is not cut short).

    Reference: the same network, whole, pooled through `pooled_features` (as the probe reads it): the parameters
    that get a gradient there are exactly the classifier's network parameters (a tied head's embedding stays)."""
    whole = tiny_net(family, tie_embeddings=tied)
    batch = _pair_batch(family, ids)
    pooled_features(whole, family, batch, pooling).square().sum().backward()
    used = sorted(n for n, p in whole.named_parameters() if p.grad is not None)
    module = ClassifierModule(tiny_net(family, tie_embeddings=tied), 3, OptimSettings(), pooling=pooling)
    F.cross_entropy(module(batch), batch["labels"]).backward()  # the training step's loss
    no_grad = [n for n, p in module.named_parameters() if p.grad is None]
    assert not no_grad, f"{family} {pooling}: {len(no_grad)} parameters get no gradient, e.g. {no_grad[:3]}"
    assert sorted(n for n, _ in module.net.named_parameters()) == used
    assert module.net.embed.weight.grad is not None


def test_a_classifiers_body_loads_into_the_whole_network(ids, tiny_net):
    """`InputFormat.load_body`: a T5 classifier pooling its encoder saves no decoder and no head; its weights load
    into a whole network (as `famlab export` does) with the same features; a missing body tensor is refused."""
    module = ClassifierModule(tiny_net("t5", tie_embeddings=False), 3, OptimSettings(), pooling="mean").eval()
    state = module.net.state_dict()
    assert not [k for k in state if k.startswith(("decoder.", "head."))]
    fmt = registry.family("t5").input_format
    whole = tiny_net("t5", tie_embeddings=False, seed=1).eval()
    fmt.load_body(whole, state, "mean")
    batch = _pair_batch("t5", ids)
    with torch.no_grad():
        torch.testing.assert_close(pooled_features(whole, "t5", batch, "mean"), module.pooled(batch))
    state.pop(next(k for k in state if k.startswith("encoder.")))
    with pytest.raises(ValueError, match="missing"):
        fmt.load_body(whole, state, "mean")


def test_bad_pooling_choices(tiny_net):
    with pytest.raises(ObjectiveError, match="finetune.pooling=decoder"):
        ClassifierModule(tiny_net("gpt"), 3, OptimSettings(), pooling="decoder")
    with pytest.raises(ObjectiveError, match="finetune.pooling=max"):
        ClassifierModule(tiny_net("gpt"), 3, OptimSettings(), pooling="max")


@pytest.mark.slow
@pytest.mark.parametrize("family,pooling", CASES[:4])
def test_each_family_fine_tunes_with_a_real_trainer(ids, tiny_net, family, pooling):
    """A learnable toy task: val/acc rises well above chance and test metrics are logged per split."""
    collate = ClassificationCollator(family, ids, max_len=16)
    train = DataLoader(_items(64, seed=0), batch_size=16, shuffle=True, collate_fn=collate)
    val = DataLoader(_items(48, seed=1), batch_size=16, collate_fn=collate)
    optim = OptimSettings(lr=3e-3, warmup_steps=0, max_steps=40, weight_decay=0.0)
    module = ClassifierModule(tiny_net(family), 3, optim, pooling=pooling, head_dropout=0.0)
    trainer = L.Trainer(
        max_steps=40,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=10,
    )  # 40 steps = 10 epochs: validate once, at the end
    trainer.fit(module, train, val)
    logged = trainer.callback_metrics
    assert {"val/acc", "val/f1", "val/mcc", "val/loss", "train/loss"} <= set(logged)
    assert logged["val/acc"] > 0.6, dict(logged)  # chance is 1/3
    (results,) = trainer.test(module, val, verbose=False)
    assert set(results) == {"test/acc", "test/f1", "test/mcc"}
    torch.testing.assert_close(torch.tensor(results["test/acc"]), logged["val/acc"].cpu())
