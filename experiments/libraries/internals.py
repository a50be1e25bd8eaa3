"""Every use ``experiments/`` makes of a private or undocumented part of a library (Lightning, W&B, OmegaConf, torch,
transformers), in one place.

Each function names the library attribute it relies on, and each ``(library, attribute)`` pair below is checked by
``tests/experiments/test_internals.py``: the attribute still exists with the shape used here and the behaviour famlab
relies on still holds, or the test fails naming the library and attribute. docs/architecture.md ("Library internals
we rely on") lists them. ``families`` imports only torch and keeps its own: torch's ``nn.Module._compiled_call_impl``
in ``families/compile.py``.
"""

from __future__ import annotations

import typing
from typing import TYPE_CHECKING

# the base class of a dispatch mode: torch has no public path for it (used by experiments/perf/breakdown.py)
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["TorchDispatchMode"]

if TYPE_CHECKING:
    from lightning.fabric.loggers.csv_logs import _ExperimentWriter
    from omegaconf import Node

    # the aten op a dispatch mode's ``__torch_dispatch__`` is handed: no public path either (a type, for
    # experiments/perf/breakdown.py)
    from torch._ops import OpOverload as OpOverload
    from transformers import PretrainedConfig
    from wandb import Artifact
    from wandb.sdk.wandb_run import Run

# (library, attribute) pairs used below, for the tripwire tests and the docs
CSV_WRITER_KEYS = ("lightning", "lightning.fabric.loggers.csv_logs._ExperimentWriter.metrics_keys")
WANDB_CONSOLE_STOP = ("wandb", "wandb.sdk.wandb_run.Run._console_stop")
WANDB_LOG_ARTIFACT = ("wandb", "wandb.sdk.wandb_run.Run._log_artifact")
LIGHTNING_PRECISIONS = ("lightning", "lightning.fabric.connector._PRECISION_INPUT_STR (and _PRECISION_INPUT_STR_ALIAS)")
OMEGACONF_NODES = ("omegaconf", "omegaconf.DictConfig._is_none / DictConfig._get_node")
TORCH_DISPATCH_MODE = ("torch", "torch.utils._python_dispatch.TorchDispatchMode")
HF_ATTN_IMPLEMENTATION = ("transformers", "transformers.PretrainedConfig._attn_implementation")


def continue_csv_header(writer: _ExperimentWriter, header: list[str]) -> None:
    """Make a just-created ``CSVLogger`` writer append under ``header`` (the columns of the file it continues).

    Lightning's writer keeps the file's columns in its ``metrics_keys`` list (sorted) and starts it empty, as for a
    new file: its first save would then re-read the kept rows under only the new rows' columns. Setting it to the
    kept header makes the first save append, or rewrite with the union of columns when new ones appear.
    """
    writer.metrics_keys = sorted(header)


def stop_console_copy(run: Run) -> None:
    """Stop a W&B run from copying stdout / stderr into its console log (``Run._console_stop``, what
    ``finish`` calls; calling it twice is harmless); wandb has no public call for it. Skipped if it is gone."""
    stop = getattr(run, "_console_stop", None)
    if callable(stop):
        stop()


def log_used_artifact(run: Run, artifact: Artifact) -> None:
    """Record that an offline W&B ``run`` uses the draft ``artifact``: ``Run._log_artifact(...,
    use_after_commit=True)``, the private method ``Run.use_artifact`` itself calls for a draft (and refuses
    offline, although the record it writes syncs like any other)."""
    run._log_artifact(artifact, aliases=[], is_user_created=True, use_after_commit=True)


def lightning_precisions() -> tuple[str, ...]:
    """The precision strings ``Trainer(precision=...)`` accepts: the ``Literal`` types Lightning's connector checks
    against (``lightning.fabric.connector._PRECISION_INPUT_STR`` and ``_PRECISION_INPUT_STR_ALIAS``)."""
    from lightning.fabric import connector

    return typing.get_args(connector._PRECISION_INPUT_STR) + typing.get_args(connector._PRECISION_INPUT_STR_ALIAS)


def config_child(node: object, key: str) -> Node | None:
    """The OmegaConf node under ``key`` of section ``node`` as stored (not resolved: ``DictConfig._get_node``), or
    None when ``node`` is not a section, is a None section (``DictConfig._is_none``) or has no ``key``."""
    from omegaconf import DictConfig

    if not isinstance(node, DictConfig) or node._is_none() or key not in node:
        return None
    return node._get_node(key)


def hf_attention_implementation(config: PretrainedConfig) -> str | None:
    """The attention implementation a Hugging Face model runs (``PretrainedConfig._attn_implementation``:
    ``eager``, ``sdpa``, ...); ``"?"`` when the config has none."""
    return getattr(config, "_attn_implementation", "?")


SUBMITIT_LOCAL_PROCESS = ("submitit", "LocalJob._process")


def submitit_local_controller(job: object) -> int | None:
    """The pid of the controller process submitit's local executor starts for ``job`` (``LocalJob._process``), or
    None. A SIGTERM to it is passed to the job's task, which checkpoints; ``LocalJob.cancel`` sends SIGINT, which
    makes the controller kill its task before the checkpoint is written."""
    process = getattr(job, "_process", None)
    return process.pid if process is not None else None
