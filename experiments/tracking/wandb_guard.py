"""Starting the W&B run so that W&B trouble never stops training, and resumed runs keep their history.

- Online start fails (server unreachable or failing, bad key): warn once, continue **offline** in the
  same run directory, and say how to upload it later (``wandb sync``).
- Resume, online: the id saved in ``<run_dir>/wandb-run.json`` continues (``resume="allow"``) at the
  next ``trainer/global_step``.
- Resume, offline: wandb cannot resume an offline run, and syncing two offline segments that share an
  id overwrites the first segment's history (wandb #4624, #3841, #5865). So the resumed segment is a
  **new** run in the same group with ``resumed_from=<previous id>`` in its config and a ``resumed``
  tag; its steps continue at the checkpoint's ``global_step``. Both segments sync without loss.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from famlab.experiments.configuration.config import WandbConfig
    from lightning.pytorch.loggers import WandbLogger
    from wandb import Settings

RUN_FILE = "wandb-run.json"  # id, mode and group of the run directory's latest W&B run
INIT_TIMEOUT_S = 30.0  # online start gives up after this (env WANDB_INIT_TIMEOUT overrides)


class RunFile(TypedDict):
    """``wandb-run.json``: the run directory's latest W&B run."""

    id: str
    mode: str  # online | offline
    group: str | None
    resumed_from: str | None  # the run an offline resumed segment continues


def previous_run(run_dir: Path) -> RunFile | None:
    """The W&B run recorded in ``run_dir`` by an earlier segment, if any."""
    try:
        return json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def start_wandb(
    logger_class: type[WandbLogger], run_dir: Path, mode: str, *, resuming: bool, kwargs: dict[str, Any]
) -> tuple[WandbLogger | None, str | None]:
    """Start a W&B logger (``logger_class(**kwargs)``); returns ``(logger or None, warning or None)``.

    ``kwargs`` are WandbLogger's (project, name, group, tags, config, save_dir, ...); ``mode`` is
    ``online`` or ``offline``. Never raises.
    """
    import wandb

    kwargs = dict(kwargs)
    prev = previous_run(run_dir) if resuming else None
    if prev is not None:
        if mode == "online" and prev.get("mode") == "online":
            kwargs.update(id=prev["id"], resume="allow")  # the same run continues at the next step
        else:
            kwargs["group"] = kwargs.get("group") or prev.get("group") or prev["id"]
            kwargs["tags"] = [*kwargs.get("tags", []), "resumed"]
            kwargs["config"] = {**kwargs.get("config", {}), "resumed_from": prev["id"]}
    timeout = float(os.environ.get("WANDB_INIT_TIMEOUT", INIT_TIMEOUT_S))
    note = None
    try:
        logger = _start(logger_class, mode, kwargs, wandb.Settings(init_timeout=timeout))
    except Exception as e:  # noqa: BLE001 - any W&B trouble must not stop training (docs/scale.md)
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if mode != "online":
            return None, f"W&B logging disabled for this run ({reason}); CSV metrics still written"
        kwargs.pop("resume", None)
        if "id" in kwargs:  # an online run cannot be continued offline: a new run that says what it resumes
            kwargs["config"] = {**kwargs.get("config", {}), "resumed_from": kwargs.pop("id")}
        try:
            logger = _start(logger_class, "offline", kwargs, wandb.Settings(init_timeout=timeout))
        except Exception as e2:  # noqa: BLE001
            reason = f"{reason}; offline too: {type(e2).__name__}"
            return None, f"W&B logging disabled for this run ({reason}); CSV metrics still written"
        mode = "offline"
        note = (f"W&B online start failed ({reason}); logging offline instead. Upload later with: "
                f"wandb sync {kwargs.get('save_dir') or run_dir}/wandb/offline-run-*")
    run = logger.experiment
    record: RunFile = {"id": run.id, "mode": mode, "group": kwargs.get("group"),
                       "resumed_from": None if prev is None else prev["id"]}
    (run_dir / RUN_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")
    return logger, note


def _start(logger_class: type[WandbLogger], mode: str, kwargs: dict[str, Any], settings: Settings) -> WandbLogger:
    logger = logger_class(mode=mode, settings=settings, **kwargs)
    _ = logger.experiment  # start the run now, so a failure surfaces here and not mid-training
    return logger


def wandb_mode(w: WandbConfig) -> str:
    """``auto`` -> online where credentials exist (``WANDB_API_KEY`` or ``~/.netrc`` for api.wandb.ai), else offline."""
    mode = w.mode.value
    if mode != "auto":
        return mode
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    netrc = Path(os.environ.get("NETRC", "~/.netrc")).expanduser()
    try:
        if "api.wandb.ai" in netrc.read_text(encoding="utf-8", errors="replace"):
            return "online"
    except OSError:
        pass
    return "offline"
