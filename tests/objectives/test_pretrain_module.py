"""PretrainModule on real tiny networks with a real Lightning Trainer: overfitting and logged metrics."""

import math

import lightning as L
import pytest
import torch
from famlab.objectives import OptimSettings, PretrainModule, default_objective, make_objective
from torch.utils.data import DataLoader

PAIRS = [(family, default_objective(family)) for family in ("bert", "gpt", "t5")]
# the other pairs: padded T5 batches, prefix masks and SpanBERT spans through the same LightningModule
NEW_PAIRS = [
    ("bert", "span_mlm"),
    ("gpt", "prefix_lm"),
    ("gpt", "span"),
    ("gpt", "ul2"),
    ("t5", "prefix_lm"),
    ("t5", "ul2"),
]


def _trainer(max_steps: int) -> L.Trainer:
    return L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )


def _batches(objective, n: int, rows: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the collators draw their masks from torch's global generator
    return [
        objective.collate(list(torch.randint(10, 900, (rows, objective.raw_block_len), generator=g))) for _ in range(n)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("family,name", PAIRS)
def test_each_family_overfits_a_fixed_batch(ids, tiny_net, family, name):
    """30 AdamW steps on one fixed batch cut each family's loss below a quarter of its start."""
    net = tiny_net(family, dim=64)
    objective = make_objective(name, ids, seq_len=32)
    (batch,) = _batches(objective, 1, 4, seed=0)
    start = objective.loss(net, batch).loss.item()
    optim = OptimSettings(lr=1e-2, warmup_steps=0, max_steps=30, weight_decay=0.0, min_lr_ratio=1.0)
    module = PretrainModule(net, objective, optim)
    _trainer(30).fit(module, DataLoader([batch] * 30, batch_size=None))
    end = objective.loss(net, batch).loss.item()
    assert end < 0.25 * start, (start, end)


@pytest.mark.parametrize("family,name", PAIRS + NEW_PAIRS)
def test_logged_metrics_are_token_weighted_over_the_val_set(ids, tiny_net, family, name):
    """val/loss is summed NLL / label tokens over all val batches; ppl, mlm_acc, unigram loss, budget follow."""
    net = tiny_net(family)
    objective = make_objective(name, ids, seq_len=16, family=family)
    train = _batches(objective, 3, 2, seed=1)
    val = _batches(objective, 2, 3, seed=2)
    if name not in ("mlm", "span_mlm"):  # unequal label counts per batch: a mean of batch means would differ
        val[0]["labels"] = val[0]["labels"].clone()
        val[0]["labels"][:, 3:] = -100
    counts = torch.randint(1, 50, (ids.vocab_size,), generator=torch.Generator().manual_seed(0)).double()
    unigram = (counts / counts.sum()).log()
    optim = OptimSettings(lr=1e-3, warmup_steps=1, max_steps=3)
    module = PretrainModule(net, objective, optim, unigram_log_probs=unigram, flops_per_step=1000, peak_flops=1e6)
    trainer = _trainer(3)
    trainer.fit(module, DataLoader(train, batch_size=None), DataLoader(val, batch_size=None))
    logged = trainer.callback_metrics

    net.eval()
    with torch.no_grad():
        outs = [objective.loss(net, b) for b in val]
    nll = sum(o.loss.double() * o.num_label_tokens for o in outs)
    count = sum(int(o.num_label_tokens) for o in outs)
    torch.testing.assert_close(logged["val/loss"].double(), nll / count, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logged["val/ppl"], torch.exp(logged["val/loss"]))
    labels = torch.cat([o.labels[o.labels != -100] for o in outs])
    torch.testing.assert_close(logged["val/unigram_loss"].double(), -unigram[labels].mean(), rtol=1e-5, atol=1e-6)
    if name in ("mlm", "span_mlm"):
        correct = sum(int((o.logits.argmax(-1) == o.labels).sum()) for o in outs)
        torch.testing.assert_close(logged["val/mlm_acc"].double(), torch.tensor(correct / count, dtype=torch.double))
    else:
        assert "val/mlm_acc" not in logged
    assert logged["budget/tokens"] == sum(objective.tokens_in(b) for b in train)
    assert logged["budget/flops"] == 3 * 1000
    assert logged["perf/tokens_per_sec"] > 0 and 0 < logged["perf/mfu"]
    assert logged["train/lr"] == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5))))


def test_hparams_hold_no_network_and_budget_survives_checkpoint(ids, tiny_net, tmp_path):
    """save_hyperparameters keeps plain values only; budget/tokens continues from a checkpoint."""
    objective = make_objective("clm", ids, seq_len=16)
    module = PretrainModule(tiny_net("gpt"), objective, OptimSettings(max_steps=2, warmup_steps=0))
    assert set(module.hparams) == {"objective", "optim", "flops_per_step", "peak_flops"}
    trainer = _trainer(2)
    trainer.fit(module, DataLoader(_batches(objective, 2, 2, seed=0), batch_size=None))
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    fresh = PretrainModule(tiny_net("gpt", seed=1), objective, OptimSettings(max_steps=4, warmup_steps=0))
    fresh.on_load_checkpoint(torch.load(path, weights_only=True))
    assert fresh.tokens_seen == module.tokens_seen == 2 * 2 * 16
