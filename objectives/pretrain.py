"""`PretrainModule`: the LightningModule that pretrains any family with its objective.

It receives the network and the objective (it never builds them) and logs
`train/loss`, `train/lr`, `val/loss`, `val/ppl`, `val/mlm_acc` (MLM, span MLM), `val/unigram_loss`,
`budget/tokens`, `perf/tokens_per_sec`, and `budget/flops` / `perf/mfu` when given a FLOP count.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch
from famlab.families.compile import Guarded, compile_fn
from famlab.families.network import Network
from famlab.objectives.corruption import IGNORE
from famlab.objectives.objective import Batch, Objective
from famlab.objectives.optim import (
    ClipsUnscaled,
    OptimSettings,
    attached_trainer,
    configure_optimizer,
    decay_groups,
    trainer_precision,
)
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from torchmetrics import SumMetric


class PretrainModule(ClipsUnscaled):
    """Pretrain `net` with `objective`.

    Args:
        net: a `families` network (BERT / GPT / T5).
        objective: from `make_objective`; its `loss(net, batch)` gives the mean loss over label tokens.
        optim: AdamW and schedule settings.
        unigram_log_probs: `(V,)` log-probabilities of the training split's unigram model; when given,
            `val/unigram_loss` is that model's cross-entropy on the same validation label tokens (the floor
            a network that learned only word frequencies would reach).
        flops_per_step: FLOPs of one training step (forward + backward) of one rank's batch; enables
            `budget/flops` (all ranks) and, with `peak_flops`, `perf/mfu`.
        peak_flops: peak FLOP/s of one device.
    """

    def __init__(
        self,
        net: Network,
        objective: Objective,
        optim: OptimSettings,
        *,
        unigram_log_probs: torch.Tensor | None = None,
        flops_per_step: int | None = None,
        peak_flops: float | None = None,
    ) -> None:
        super().__init__()
        # Plain values only: the network and objective are never pickled into the checkpoint's hparams.
        self.save_hyperparameters(
            {
                "objective": objective.name,
                "optim": asdict(optim),
                "flops_per_step": flops_per_step,
                "peak_flops": peak_flops,
            }
        )
        self.net = net
        self.objective = objective
        self.optim = optim
        self.flops_per_step = flops_per_step
        self.peak_flops = peak_flops
        # Not persistent: experiments recomputes it from the data; a checkpoint stays loadable without it.
        self.unigram_log_probs: torch.Tensor | None
        self.register_buffer("unigram_log_probs", unigram_log_probs, persistent=False)
        # Sum metrics sync across ranks in compute(): ppl = exp(total NLL / total label tokens) over the
        # whole validation set, not a mean of per-batch means.
        self.val_nll = SumMetric()
        self.val_tokens = SumMetric()
        self.val_correct = SumMetric()
        self.val_unigram_nll = SumMetric()
        self.tokens_seen = 0  # cumulative over all ranks; saved in the checkpoint
        self.flops_seen = 0
        self._last_step_time: float | None = None
        # batch -> mean training loss; `compile_step` swaps in a compiled one (network and loss in one graph)
        self.step_loss: Callable[[Batch], torch.Tensor] = self.eager_step_loss

    # -- training ---------------------------------------------------------------------------------------------

    def eager_step_loss(self, batch: Batch) -> torch.Tensor:
        """The objective's mean loss of the network on ``batch``: what a training step backpropagates."""
        return self.objective.loss(self.net, batch).loss

    def compile_step(self, backend: str = "inductor", **options: Any) -> Guarded[torch.Tensor]:
        """``torch.compile`` the training loss whole (network forward, LM head, cross-entropy; their backward
        through AOTAutograd), eager from the first call that fails (``famlab.families.compile``). Validation stays
        eager: it runs without autograd at other batch counts, which would be a second set of graphs."""
        self.step_loss = compile_fn(self.eager_step_loss, "the training loss", backend=backend, **options)
        return self.step_loss

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss = self.step_loss(batch)
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True)
        self._log_budget(batch)
        return loss

    def _world_size(self) -> int:
        trainer = attached_trainer(self)
        return trainer.world_size if trainer is not None else 1

    def _log_budget(self, batch: Batch) -> None:
        """Tokens, FLOPs, throughput and learning rate. Every rank reads an equal batch (packed blocks, no
        padding), so the global count is the local count times the world size; no collective is needed."""
        world = self._world_size()
        tokens = self.objective.tokens_in(batch) * world
        self.tokens_seen += tokens
        self.log("budget/tokens", float(self.tokens_seen), on_step=True, on_epoch=False)
        if self.flops_per_step is not None:
            self.flops_seen += self.flops_per_step * world
            self.log("budget/flops", float(self.flops_seen), on_step=True, on_epoch=False)
        # Wall time from the start of the previous step to the start of this one (forward, backward, update).
        now = time.perf_counter()
        if self._last_step_time is not None:
            elapsed = now - self._last_step_time
            self.log("perf/tokens_per_sec", tokens / elapsed, on_step=True, on_epoch=False)
            if self.flops_per_step is not None and self.peak_flops:
                self.log("perf/mfu", self.flops_per_step / elapsed / self.peak_flops, on_step=True)
        self._last_step_time = now
        trainer = attached_trainer(self)
        if trainer is not None and trainer.optimizers:
            self.log("train/lr", trainer.optimizers[0].param_groups[0]["lr"], on_step=True, on_epoch=False)

    def on_train_epoch_start(self) -> None:
        self._last_step_time = None  # do not count the time spent outside training steps

    def on_validation_start(self) -> None:
        self._last_step_time = None

    # -- validation -------------------------------------------------------------------------------------------

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        out = self.objective.loss(self.net, batch)
        self.val_nll.update(out.loss.detach().float() * out.num_label_tokens)
        self.val_tokens.update(out.num_label_tokens)
        valid = out.labels != IGNORE
        if self.objective.token_accuracy and out.logits is not None:
            self.val_correct.update(((out.logits.argmax(-1) == out.labels) & valid).sum())
        if self.unigram_log_probs is not None:
            self.val_unigram_nll.update(-self.unigram_log_probs[out.labels[valid]].double().sum())

    def on_validation_epoch_end(self) -> None:
        count = self.val_tokens.compute()
        if count > 0:
            loss = self.val_nll.compute() / count
            self.log("val/loss", loss, prog_bar=True)
            self.log("val/ppl", torch.exp(loss))
            if self.objective.token_accuracy:
                self.log("val/mlm_acc", self.val_correct.compute() / count)
            if self.unigram_log_probs is not None:
                self.log("val/unigram_loss", self.val_unigram_nll.compute() / count)
            # the budget spent so far, in the validation row too: charts of val/* against budget/flops or
            # budget/tokens then need no join with the training rows
            self.log("budget/tokens", float(self.tokens_seen))
            if self.flops_per_step is not None:
                self.log("budget/flops", float(self.flops_seen))
        for metric in (self.val_nll, self.val_tokens, self.val_correct, self.val_unigram_nll):
            metric.reset()

    # -- optimiser and checkpoint -----------------------------------------------------------------------------

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        precision, clipping = trainer_precision(self)
        return configure_optimizer(decay_groups(self.net, self.optim.weight_decay), self.optim,
                                   precision=precision, clipping=clipping)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["famlab_budget"] = {"tokens": self.tokens_seen, "flops": self.flops_seen}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        budget = checkpoint.get("famlab_budget", {})
        self.tokens_seen = int(budget.get("tokens", 0))
        self.flops_seen = int(budget.get("flops", 0))
