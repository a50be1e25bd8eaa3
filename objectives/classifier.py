"""`ClassifierModule`: fine-tune any family on a classification task with its own pooling head.

Pooling (`finetune.pooling`): `cls` (BERT: `[CLS]` through BERT's dense + tanh pooler), `last` (GPT: the last
non-pad token, found from the attention mask so left and right padding both work), `mean` (T5 default:
mean of the encoder states over the mask) and `decoder` (T5: the decoder state at the first step, fed the
decoder start token). Metrics: one torchmetrics collection per split (`val/acc`, `val/f1` macro,
`val/mcc`, `test/...`) plus `train/loss` and `val/loss`.

Legend: B batch, T sequence length, C model dim, K classes.
"""

from __future__ import annotations

from dataclasses import asdict

import torch
import torch.nn.functional as F
from famlab.families import heads, registry
from famlab.families.network import Network
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.objective import Batch
from famlab.objectives.optim import (
    ClipsUnscaled,
    OptimSettings,
    attached_trainer,
    configure_optimizer,
    decay_groups,
    trainer_precision,
)
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassMatthewsCorrCoef

POOLINGS = ("cls", "last", "mean", "decoder")


def pooled_features(net: Network, family: str, batch: Batch, pooling: str) -> torch.Tensor:
    """`(B, C)` pooled hidden states of `net` for a classification batch (`ClassificationCollator` output).

    The fine-tuned classifier and the linear probe read the body through this one function, so both see the
    same features; how the body reads the batch is the family's input format's
    (`famlab.families.formats.InputFormat.pooled`). `cls` is the first position's raw state here (BERT's dense +
    tanh pooler belongs to the classification head).
    """
    return registry.family(family).input_format.pooled(net, batch, pooling)


def _metrics(num_classes: int, prefix: str) -> MetricCollection:
    return MetricCollection(
        {
            "acc": MulticlassAccuracy(num_classes, average="micro"),
            "f1": MulticlassF1Score(num_classes, average="macro"),
            "mcc": MulticlassMatthewsCorrCoef(num_classes),
        },
        prefix=prefix,
    )


class ClassifierModule(ClipsUnscaled):
    """Fine-tune `net` (BERT / GPT / T5) on a `num_classes`-way classification task.

    Args:
        net: a `families` network (any registered family); the module keeps only the body its pooling reads
            (`famlab.families.formats.InputFormat.body`: the LM head, and T5's decoder unless it pools, are removed
            from `net` in place), so its checkpoints hold only that body.
        num_classes: K.
        optim: AdamW and schedule settings for the network.
        pooling: `cls` | `last` | `mean` | `decoder` (one of the family's input format's `poolings`: `decoder` needs
            an encoder-decoder).
        head_dropout: dropout before the classifier.
        head_lr: learning rate of the head (pooler + classifier); `None` = `optim.lr`.
        standardize: standardise the pooled features over the batch before the classifier
            (`famlab.families.heads.ClassificationHead`).
        pooler_state: state dict for BERT's pooler (`famlab.families.hf.hf_pooler_state`), when the checkpoint has one;
            used with `cls` pooling, ignored otherwise.
    """

    def __init__(
        self,
        net: Network,
        num_classes: int,
        optim: OptimSettings,
        *,
        pooling: str,
        head_dropout: float = 0.1,
        head_lr: float | None = None,
        standardize: bool = False,
        pooler_state: dict[str, torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        family = str(getattr(net, "family", ""))
        if pooling not in POOLINGS:
            raise ObjectiveError(f"finetune.pooling={pooling} is not one of {list(POOLINGS)}")
        if pooling not in registry.family_of(net).input_format.poolings:
            owners = " or ".join(n for n in registry.family_names()
                                 if pooling in registry.family(n).input_format.poolings)
            raise ObjectiveError(f"finetune.pooling={pooling} needs an encoder-decoder ({owners}), not "
                                 f"model.family={family}")
        if num_classes < 2:
            raise ObjectiveError(f"num_classes={num_classes}: a classification task needs at least 2 labels")
        self.save_hyperparameters(
            {
                "num_classes": num_classes,
                "pooling": pooling,
                "head_dropout": head_dropout,
                "head_lr": head_lr,
                "standardize": standardize,
                "optim": asdict(optim),
            }
        )
        # the body its pooling reads, nothing else (no LM head; no decoder where the encoder pools): DDP needs every
        # parameter to get a gradient, and finding the unused ones each step would cost a graph traversal
        self.net = registry.family_of(net).input_format.body(net, pooling)
        self.family = family
        self.pooling = pooling
        self.optim = optim
        self.head_lr = head_lr
        dim = net.config.dim
        self.head = heads.ClassificationHead(
            dim, num_classes, head_dropout, pooler=pooling == "cls", standardize=standardize
        )
        # Only `cls` pooling has BERT's pooler; with other poolings a checkpoint's pooler weights go unused.
        if pooler_state is not None and self.head.pooler is not None:
            self.head.pooler.load_state_dict(pooler_state)
        self.val_loss = MeanMetric()
        self.val_metrics = _metrics(num_classes, "val/")
        self.test_metrics = _metrics(num_classes, "test/")

    def pooled(self, batch: Batch) -> torch.Tensor:
        """`(B, C)` pooled representation of the batch."""
        return pooled_features(self.net, self.family, batch, self.pooling)

    def forward(self, batch: Batch) -> torch.Tensor:
        """`(B, K)` class logits."""
        return self.head(self.pooled(batch))

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self(batch).float(), batch["labels"])
        self.log("train/loss", loss, on_step=True, on_epoch=False, prog_bar=True)
        trainer = attached_trainer(self)
        if trainer is not None and trainer.optimizers:
            self.log("train/lr", trainer.optimizers[0].param_groups[0]["lr"], on_step=True, on_epoch=False)
        return loss

    def _evaluate(self, batch: Batch, metrics: MetricCollection) -> torch.Tensor:
        logits = self(batch).float()
        loss = F.cross_entropy(logits, batch["labels"])
        metrics.update(logits, batch["labels"])
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        loss = self._evaluate(batch, self.val_metrics)
        self.val_loss.update(loss, weight=batch["labels"].numel())
        self.log("val/loss", self.val_loss, on_step=False, on_epoch=True, prog_bar=True)
        self.log_dict(self.val_metrics, on_step=False, on_epoch=True)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._evaluate(batch, self.test_metrics)
        self.log_dict(self.test_metrics, on_step=False, on_epoch=True)

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        groups = decay_groups(self.net, self.optim.weight_decay)
        groups += decay_groups(self.head, self.optim.weight_decay, lr=self.head_lr)
        precision, clipping = trainer_precision(self)
        return configure_optimizer(groups, self.optim, precision=precision, clipping=clipping)
