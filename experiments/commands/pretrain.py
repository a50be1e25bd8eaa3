"""``famlab pretrain``: corpus -> tokenizer -> network + objective -> Lightning fit -> run directory
(:func:`famlab.experiments.steps.pretrain.pretrain`)."""

from __future__ import annotations

from famlab.experiments.configuration.compose import compose
from famlab.experiments.plumbing.prepare_once import env_rank
from famlab.experiments.plumbing.reliability import NonFiniteError, Preempted, stop_exit_code
from famlab.experiments.steps.pretrain import pretrain


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab pretrain [presets...] [key=value...]``."""
    cfg = compose(presets, overrides).cfg
    try:
        results = pretrain(cfg)
    except (Preempted, NonFiniteError) as e:
        return stop_exit_code(e, "pretrain")
    if env_rank() != 0:
        return 0  # rank 0 reports
    first, final = results.first.get("val/loss"), results.final.get("val/loss")
    print(
        f"done: {results.run_dir}  steps={results.steps}  val/loss {first} -> {final}  "
        f"(val/unigram_loss {results.final.get('val/unigram_loss')})  {results.wall_s} s"
    )
    return 0
