"""Provenance recorded in each run's ``config.yaml``: git commit, package versions, Python, hardware, command, and
the plugins the run imported (where each module was loaded from, its version if it declares one)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

PACKAGES = ("torch", "lightning", "tokenizers", "wandb", "omegaconf", "torchmetrics", "numpy", "transformers")


def _git_commit() -> dict[str, str | bool | None]:
    root = Path(__file__).resolve().parents[2]  # the repository (experiments/plumbing/provenance.py)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        return {"commit": commit, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def provenance(**hashes: str | None) -> dict[str, object]:
    """Git commit, package versions, Python, hardware, plus the given hashes (tokenizer, data)."""
    import torch

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    cuda = torch.cuda.is_available()
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    return {
        "git": _git_commit(),
        "versions": versions,
        "python": sys.version.split()[0],
        "hardware": {
            "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "gpus": gpus,
        },
        "command": " ".join(["famlab", *sys.argv[1:]]) if sys.argv else None,
        **hashes,
    }



def plugin_provenance(names: Sequence[str]) -> dict[str, dict[str, str | None]]:
    """Each plugin module (imported already, :mod:`famlab.experiments.plumbing.plugins`): the file it was loaded from
    and its ``__version__`` (None where it declares none)."""
    out: dict[str, dict[str, str | None]] = {}
    for name in names:
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        out[name] = {"file": getattr(module, "__file__", None), "version": str(version) if version else None}
    return out
