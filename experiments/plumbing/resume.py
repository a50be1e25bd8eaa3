"""Resuming a run: which checkpoint ``resume=`` means, and whether a checkpoint or a stored config fits this run."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import yaml
from famlab.experiments.configuration.compose import flatten, to_plain
from famlab.experiments.configuration.config import Config, ConfigInputError
from famlab.experiments.configuration.run_files import LAST_CKPT, RunFiles
from famlab.experiments.plumbing.checkpoints import PREV_NAME

if TYPE_CHECKING:
    from famlab.objectives.classifier import ClassifierModule
    from famlab.objectives.pretrain import PretrainModule


def _loadable(path: Path) -> str | None:
    """None if ``torch.load`` reads the checkpoint, else the reason it does not."""
    try:
        torch.load(path, map_location="cpu", weights_only=False, mmap=True)
        return None
    except Exception as e:  # noqa: BLE001 - any failure means unusable (truncated zip, bad pickle, ...)
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def resolve_resume(resume: str, checkpoint_dir: Path) -> str | None:
    """The checkpoint ``fit`` resumes from: ``resume=never`` None; ``auto`` ``last.ckpt`` (or, if it is
    unreadable, ``last-prev.ckpt`` with a warning; None if there is none); else the given path."""
    if resume == "never":
        return None
    if resume == "auto":
        last, prev = checkpoint_dir / LAST_CKPT, checkpoint_dir / PREV_NAME
        if last.is_dir():  # a sharded checkpoint (FSDP, DeepSpeed): never start over silently beside it
            raise ConfigInputError(f"resume=auto: {last} is a sharded checkpoint directory, which famlab cannot "
                                   "resume; resume it with the strategy that wrote it, or resume=never to start over")
        if not last.is_file():
            return str(prev) if prev.is_file() and _loadable(prev) is None else None
        problem = _loadable(last)
        if problem is None:
            return str(last)
        if prev.is_file() and _loadable(prev) is None:
            warnings.warn(f"{last} is unreadable ({problem}); resuming from the previous checkpoint {prev}",
                          stacklevel=2)
            print(f"famlab: WARNING {last} is unreadable ({problem}); resuming from {prev}", file=sys.stderr)
            return str(prev)
        raise ConfigInputError(f"resume=auto: {last} is unreadable ({problem}) and no readable {PREV_NAME}")
    path = Path(resume).expanduser()
    if not path.is_file():
        raise ConfigInputError(f"resume={resume}: no such checkpoint file (use never | auto | <path.ckpt>)")
    problem = _loadable(path)
    if problem is not None:
        raise ConfigInputError(f"resume={resume}: unreadable checkpoint ({problem})")
    return str(path)


def check_checkpoint_matches(path: str, module: PretrainModule | ClassifierModule, key: str = "resume") -> None:
    """Refuse a checkpoint whose parameters are not this module's (another family or size) with one line,
    instead of Lightning's wall of missing / unexpected keys from deep inside ``load_state_dict``."""
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("state_dict", {})
    ours = module.state_dict()
    missing, unexpected = sorted(set(ours) - set(state)), sorted(set(state) - set(ours))
    wrong = sorted(k for k in set(ours) & set(state) if tuple(ours[k].shape) != tuple(state[k].shape))
    if missing or unexpected or wrong:
        example = (missing or unexpected or wrong)[0]
        raise ConfigInputError(
            f"{key}={path} does not fit this model (model.family={module.net.config.family.value}): "
            f"{len(missing)} missing, {len(unexpected)} unexpected, {len(wrong)} differently shaped tensors, "
            f"e.g. {example!r}; is it a checkpoint of another family or size?"
        )


# keys a resumed run may change: where it runs and how it reports, not what it computes
RESUME_FREE_KEYS = ("resume", "run_dir", "provenance", "wandb", "trainer.progress_bar", "data.cache_dir")


def check_resumed_config(run_dir: Path, config: Mapping[str, object]) -> None:
    """Refuse to resume ``run_dir`` under a config that differs from its stored ``config.yaml``.

    ``config`` is the resolved config as ``rundir.write_config`` would write it. Only the keys of
    ``RESUME_FREE_KEYS`` may differ; any other changed key would mix results of two configurations.
    """
    path = RunFiles(run_dir).config_file
    if not path.is_file():
        return  # nothing ran yet: a fresh start
    try:
        stored = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigInputError(f"resume=auto: {path} is not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if not isinstance(stored, dict):
        raise ConfigInputError(f"resume=auto: {path} is not a famlab config")
    new = flatten(config)
    # a key added to famlab after the run started reads as its default (what the stored run used)
    old = {**{k: v for k, v in flatten(to_plain(Config())).items() if k not in flatten(stored)}, **flatten(stored)}

    def free(key: str) -> bool:
        return any(key == k or key.startswith(k + ".") for k in RESUME_FREE_KEYS)

    changed = sorted(k for k in set(old) | set(new) if not free(k) and old.get(k, "<unset>") != new.get(k, "<unset>"))
    if changed:
        shown = ", ".join(f"{k}={new.get(k, '<unset>')} (stored {old.get(k, '<unset>')})" for k in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        raise ConfigInputError(f"resume=auto: {path} was written with other settings: {shown}{more}; "
                               "resume with the original settings, or start a new run_dir")




def check_directory_resume(resume: str, run_dir: str | None, whole: str, directory: str, example: str,
                           error: type[ConfigInputError] = ConfigInputError) -> None:
    """``resume=`` of a command whose ``run_dir`` holds many runs (a sweep, a comparison): ``never`` or ``auto``
    (a checkpoint path would name one run), and ``auto`` only with ``run_dir`` naming ``directory``.

    Args:
        resume, run_dir: the command's ``resume`` and ``run_dir``.
        whole: how that command resumes (``a comparison resumes as a whole``), for a checkpoint path's message.
        directory: what ``run_dir`` names (``the comparison directory``); ``example``: its default name.
        error: the ConfigInputError subclass raised.
    """
    if resume not in ("never", "auto"):
        raise error(f"resume={resume}: {whole}; use resume=auto with run_dir=<{directory}>")
    if not run_dir and resume == "auto":
        raise error(f"resume=auto needs run_dir=<{directory}> ({example})")
