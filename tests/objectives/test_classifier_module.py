"""ClassifierModule: pooling per family (padding-invariant), head learning rate, metrics, fine-tuning."""

import lightning as L
import pytest
import torch
from famlab.families import heads
from famlab.objectives import ClassificationCollator, ClassifierModule, ObjectiveError, OptimSettings
from torch.utils.data import DataLoader

CASES = [("bert", "cls"), ("gpt", "last"), ("t5", "mean"), ("t5", "decoder"), ("bert", "mean"), ("gpt", "mean")]


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
