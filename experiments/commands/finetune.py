"""``famlab finetune``: a pretrained run / checkpoint / Hugging Face model / scratch network on a task or a suite.

``init`` decides where the model, weights and tokenizer come from (:mod:`famlab.experiments.steps.init`); the
fine-tune itself, its learning-rate grid, seeds, selection and resume are :mod:`famlab.experiments.steps.finetune`;
a ``data.task`` that names a suite runs every task in turn (:mod:`famlab.experiments.steps.suite`), and
``finetune.mode=probe`` runs the linear probe of one task instead (:mod:`famlab.experiments.steps.probe`).
"""

from __future__ import annotations

from famlab.experiments.analysis.results import FinetuneResult
from famlab.experiments.configuration.plans import FinetunePlan
from famlab.experiments.plumbing.prepare_once import env_rank
from famlab.experiments.plumbing.reliability import NonFiniteError, Preempted, stop_exit_code
from famlab.experiments.steps.finetune import finetune
from famlab.experiments.steps.init import compose_finetune
from famlab.experiments.steps.probe import print_probe, probe
from famlab.experiments.steps.suite import finetune_suite, read_suite


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab finetune [presets...] init=<...> [key=value...]``: a suite when ``data.task`` names one,
    else a single fine-tune (or, with ``finetune.mode=probe``, the probe of one task)."""
    composed, init = compose_finetune(presets, overrides)
    cfg: FinetunePlan = composed  # what the fine-tune reads (configuration/plans.py)
    specs = read_suite(cfg.data.task)
    if specs is None and cfg.finetune.mode.value == "probe":
        print_probe(probe(cfg, init))
        return 0
    try:
        if specs is None:
            one = finetune(cfg, init)
        else:
            suite = finetune_suite(cfg, init, specs)
    except (Preempted, NonFiniteError) as e:
        return stop_exit_code(e, "finetune")
    if env_rank() != 0:
        return 0
    if specs is None:
        print(done_line(cfg.model.family.value, one))
    else:
        print(suite["table"], end="")
        print(f"done: suite of {len(specs)} tasks: {suite['suite']['mean']:.3f}  {suite['wall_s']} s")
    return 0


def done_line(family: str, r: FinetuneResult) -> str:
    m, s, b = r.mean, r.std, r.majority
    return (f"done: {family} on {r.task}: test/acc {m['test/acc']:.3f} +- {s['test/acc']:.3f}  "
            f"f1 {m['test/f1']:.3f}  mcc {m['test/mcc']:.3f}  (majority acc {b['test/acc']:.3f})  {r.wall_s} s")
