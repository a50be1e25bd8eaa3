"""What the objective and optimiser sections stand for, built in one place: the objective a run trains (its name
and its settings as ``famlab.objectives.make_objective`` takes them, the chosen objective's own included), the
optimiser settings of ``famlab.objectives.PretrainModule`` and a fine-tune's global batch. Pretraining, a
comparison's budget plan, the length evaluation, the fine-tune, the comparison's dry run and the report all build them
here, so they cannot build them apart."""

from __future__ import annotations

from typing import Any

from famlab.experiments.configuration.config import FinetuneConfig, ObjectiveConfig, OptimConfig
from famlab.experiments.configuration.plans import ArmPlan
from famlab.objectives import Objective, OptimSettings, TokenIds, make_objective
from famlab.objectives.registry import SETTINGS


def objective_name(objective: ObjectiveConfig) -> str:
    """``objective.name``, which composing the config set to the family's default when the user left it unset
    (``famlab.experiments.configuration.compose.cross_checks``)."""
    name = objective.name
    assert name is not None, "objective.name is set when the config is composed"
    return name


def objective_settings(objective: ObjectiveConfig) -> dict[str, Any]:
    """The ``objective.*`` settings as keyword arguments of ``make_objective`` (and of the length evaluation, which
    rebuilds the objective at other lengths), the chosen objective's own settings included."""
    values = {key: getattr(objective, key) for key in SETTINGS}
    return values | {"ul2_rates": tuple(values["ul2_rates"])} | dict(objective.own)


def configured_objective(objective: ObjectiveConfig, ids: TokenIds, *, seq_len: int, family: str) -> Objective:
    """The objective ``objective.*`` names, with its settings, for ``family`` at ``seq_len`` (``data.seq_len``)."""
    return make_objective(objective_name(objective), ids, seq_len=seq_len, family=family,
                          **objective_settings(objective))


def arm_objective(cfg: ArmPlan, ids: TokenIds) -> Objective:
    """The objective a config trains: ``objective.*`` for its ``model.family`` at its ``data.seq_len`` (pretraining,
    a comparison's budget plan and its corpus check build an arm's objective here, not each from the sections)."""
    return configured_objective(cfg.objective, ids, seq_len=cfg.data.seq_len, family=cfg.model.family.value)


def optim_settings(o: OptimConfig, max_steps: int) -> OptimSettings:
    """``objectives.OptimSettings`` from ``optim.*`` (effective lr = lr * lr_scale)."""
    return OptimSettings(
        lr=o.lr * o.lr_scale,
        name=o.name,
        betas=(o.betas[0], o.betas[1]),
        eps=o.eps,
        weight_decay=o.weight_decay,
        warmup_steps=o.warmup_steps,
        max_steps=max_steps,
        min_lr_ratio=o.min_lr_ratio,
        fused=o.fused,
    )


def global_batch(ft: FinetuneConfig, data_batch_size: int) -> tuple[int, str]:
    """A fine-tune's global batch and the key that set it: ``finetune.batch_size``, else ``data.batch_size``."""
    return (ft.batch_size, "finetune.batch_size") if ft.batch_size else (data_batch_size, "data.batch_size")
