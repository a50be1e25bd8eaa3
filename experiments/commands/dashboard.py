"""``famlab dashboard <comparison dir> [entity=E] [project=P]``: the comparison's W&B workspace view and Report.

A comparison logged offline writes ``<dir>/wandb-dashboard.json`` (what the dashboard shows, as plain data); after
``wandb sync <dir>/wandb`` this command creates both on the server (docs/config.md, W&B). It needs the optional
extra ``famlab[dashboard]`` (``wandb-workspaces``); without it, one line says how to install it (exit 2).
"""

from __future__ import annotations

import sys
from pathlib import Path

from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.tracking import wandb_dashboard

USAGE = "usage: famlab dashboard <comparison dir> [entity=<W&B entity>] [project=<W&B project>]"


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: build the spec (or read the one written beside the runs), save the view and the Report."""
    options = dict(o.lstrip("-").split("=", 1) for o in overrides if "=" in o)
    if len(presets) != 1 or flags or set(options) - {"entity", "project"} or len(options) != len(overrides):
        raise ConfigInputError(USAGE)
    comp_dir = Path(presets[0])
    spec = wandb_dashboard.read_spec(comp_dir)
    try:
        wandb_dashboard.import_workspaces()
    except ImportError as e:
        print(f"famlab: error: {e}", file=sys.stderr)
        return 2
    workspace, report = wandb_dashboard.create_dashboard(spec, options.get("entity"), options.get("project"))
    print(f"W&B workspace view: {workspace}\nW&B report: {report}")
    return 0
