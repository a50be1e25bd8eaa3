"""``famlab probe <run_dir>``: a linear probe of a run's frozen body against random-init bodies of the same shape
(:mod:`famlab.experiments.steps.probe`)."""

from __future__ import annotations

from pathlib import Path

from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.steps.init import compose_finetune
from famlab.experiments.steps.probe import print_probe, probe


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab probe <run_dir | checkpoint | hf:name> [presets...] [key=value...]``."""
    if flags:
        raise ConfigInputError(f"famlab probe takes no flags (got {' '.join(flags)})")
    runs = [p for p in presets if Path(p).is_dir() or p.endswith(".ckpt") or p.startswith("hf:")]
    if len(runs) > 1:
        raise ConfigInputError(f"famlab probe takes one run directory (got {', '.join(runs)})")
    if runs and any(o.lstrip("-").startswith("init=") for o in overrides):
        raise ConfigInputError(f"famlab probe: give the run as {runs[0]} or as init=..., not both")
    extra = [f"init={runs[0]}"] if runs else []
    cfg, init = compose_finetune([p for p in presets if p not in runs], [*overrides, *extra])
    print_probe(probe(cfg, init))
    return 0
