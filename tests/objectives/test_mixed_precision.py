"""Mixed precision trains with gradient clipping: 16-mixed takes the foreach AdamW (its grad scaler unscales before
clipping), bf16-mixed keeps the fused kernel and clips itself (Lightning's MixedPrecision refuses any fused
optimizer's clipping, scaler or not); the clipped global gradient norm is bounded by `optim.grad_clip`.

CPU stand-ins: Lightning turns `precision="16-mixed"` on a CPU into bf16-mixed, so the fp16 path is built
explicitly (`MixedPrecision("16-mixed", "cpu")`: fp16 CPU autocast and a real `GradScaler`)."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from famlab.experiments.perf.bench import BenchSettings, make_batch, model_config, token_ids
from famlab.families import build_network
from famlab.objectives import ObjectiveError, OptimSettings, PretrainModule, configure_optimizer, make_objective
from lightning.pytorch.plugins import MixedPrecision

CLIP = 0.05  # far below the tiny GPT's unclipped gradient norm (~1.4), so every step clips


class _GradNorms(pl.Callback):
    """The global gradient norm before clipping (on_before_optimizer_step) and as the optimizer steps with it."""

    def __init__(self) -> None:
        self.unclipped: list[float] = []
        self.stepped: list[float] = []
        self.fused: bool | None = None

    @staticmethod
    def _norm(module: pl.LightningModule) -> float:
        return float(torch.nn.utils.get_total_norm([p.grad for p in module.parameters() if p.grad is not None]))

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        optimizer = trainer.optimizers[0]
        self.fused = optimizer.defaults["fused"]
        optimizer.register_step_post_hook(lambda *_: self.stepped.append(self._norm(pl_module)))

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer) -> None:
        self.unclipped.append(self._norm(pl_module))


def _fit(precision: str | MixedPrecision, steps: int = 4) -> tuple[pl.Trainer, _GradNorms]:
    s = BenchSettings(dim=32, layers=2, heads=4, ffn=64, vocab=300, batch=4, seq=16, families="gpt")
    torch.manual_seed(0)
    objective = make_objective("clm", token_ids(s.vocab), seq_len=s.seq, family="gpt",
                               generator=torch.Generator().manual_seed(0))
    batches = [make_batch(objective, s, torch.Generator().manual_seed(i)) for i in range(steps)]
    module = PretrainModule(build_network(model_config("gpt", s)), objective,
                            OptimSettings(lr=1e-3, warmup_steps=0, max_steps=steps))
    norms = _GradNorms()
    plugin = {"plugins": [precision]} if isinstance(precision, MixedPrecision) else {"precision": precision}
    trainer = pl.Trainer(max_steps=steps, gradient_clip_val=CLIP, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[norms], **plugin)
    trainer.fit(module, torch.utils.data.DataLoader(batches, batch_size=None))
    return trainer, norms


@pytest.mark.parametrize(("precision", "name", "fused"), [
    (MixedPrecision("16-mixed", "cpu"), "16-mixed", False),  # fp16 autocast + GradScaler
    ("bf16-mixed", "bf16-mixed", True),  # what a CUDA run takes by default
    ("16-mixed", "bf16-mixed", True),  # `famlab ... trainer.precision=16-mixed` on a CPU (Lightning's fallback)
])
def test_mixed_precision_trains_and_clipping_bounds_the_gradient_norm(precision, name, fused):
    trainer, norms = _fit(precision)
    assert trainer.global_step == 4 and str(trainer.precision) == name and norms.fused is fused
    assert (trainer.precision_plugin.scaler is not None) == (name == "16-mixed")
    assert min(norms.unclipped) > 10 * CLIP  # every step had something to clip
    assert len(norms.stepped) == 4 and max(norms.stepped) <= CLIP * (1 + 1e-4)


def test_fused_adamw_asked_for_under_16_mixed_with_clipping_is_refused_in_one_line():
    weight = torch.nn.Parameter(torch.zeros(2, 2))
    fused = OptimSettings(fused=True)
    with pytest.raises(ObjectiveError, match=r"^optim.fused=true cannot clip gradients under "
                                             r"trainer.precision=16-mixed[^\n]*$"):
        configure_optimizer([{"params": [weight]}], fused, precision="16-mixed", clipping=True)
    for precision, clipping in (("16-mixed", False), ("bf16-mixed", True), ("32-true", True)):
        optimizer = configure_optimizer([{"params": [weight]}], fused, precision=precision, clipping=clipping)
        assert optimizer["optimizer"].defaults["fused"] is True
    auto = configure_optimizer([{"params": [weight]}], OptimSettings(), precision="16-mixed", clipping=True)
    assert auto["optimizer"].defaults["fused"] is False
