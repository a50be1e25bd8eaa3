"""W&B artifacts and lineage: the tokenizer and checkpoints a pretraining run makes, and who uses them.

- A pretraining run declares the tokenizer it trained on (type ``tokenizer``, named by its hash, so every
  run of a comparison shares one version) and logs its final checkpoint as ``model-<W&B run id>`` (type
  ``model``; aliases ``latest``, and ``best`` on the version with the best ``val/loss``).
- ``wandb.log_model`` decides what is uploaded: ``false`` (default; a laptop should not push checkpoints)
  logs the checkpoint as a *reference* (its local path and checksum, no bytes), which keeps the lineage;
  ``final`` uploads the final (and best) checkpoint; ``all`` uploads every checkpoint as it is saved.
- Fine-tunes, probes and the comparison's report run declare the artifacts they start from, so W&B's
  lineage graph reads tokenizer -> pretraining -> model -> fine-tune / report.

What was logged is recorded in ``<run_dir>/wandb-artifacts.json``; a later run rebuilds the same artifact
from the same files (same manifest, hence the same digest) and declares its use. W&B deduplicates by
digest, so the use points at the version the pretraining run logged.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.run_files import TOKENIZER, RunFiles
from famlab.experiments.libraries.internals import log_used_artifact

if TYPE_CHECKING:
    from wandb import Artifact
    from wandb.sdk.wandb_run import Run

LOG_MODEL = ("false", "final", "all")
ARTIFACTS_FILE = "wandb-artifacts.json"


class ArtifactEntry(TypedDict):
    """One artifact a pretraining run logged (an entry of ``wandb-artifacts.json``)."""

    role: str  # tokenizer | model
    name: str
    type: str
    file: str  # relative to the run directory
    upload: bool
    digest: str
    aliases: list[str]


def log_model_mode(value: str | bool) -> str:
    """``wandb.log_model`` as one of :data:`LOG_MODEL` (``false`` also from a YAML boolean)."""
    mode = str(value).lower()
    if mode not in LOG_MODEL:
        raise ConfigInputError(f"wandb.log_model={value} is not one of: {', '.join(LOG_MODEL)}")
    return mode


def tokenizer_artifact(path: Path) -> Artifact:
    """The tokenizer as an artifact named by its sha256 (the hash famlab records; same file, same name)."""
    import wandb

    tokenizer_hash = hashlib.sha256(path.read_bytes()).hexdigest()
    art = wandb.Artifact(f"tokenizer-{tokenizer_hash[:16]}", type="tokenizer", metadata={"hash": tokenizer_hash})
    art.add_file(str(path), name=TOKENIZER, policy="immutable")
    return art


def model_artifact(run_id: str, ckpt: Path, *, upload: bool) -> Artifact:
    """``model-<run_id>`` holding ``model.ckpt``: the file itself (``upload``) or a reference to it."""
    import wandb

    art = wandb.Artifact(f"model-{run_id}", type="model", metadata={"file": ckpt.name})
    if upload:
        art.add_file(str(ckpt), name="model.ckpt", policy="immutable")  # immutable: no copy into W&B's cache
    else:
        art.add_reference(ckpt.resolve().as_uri(), name="model.ckpt")  # path + checksum, nothing uploaded
    return art


def _record(run_dir: Path, entry: ArtifactEntry) -> None:
    path = run_dir / ARTIFACTS_FILE
    entries = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    entries.append(entry)
    path.write_text(json.dumps(entries, indent=2) + "\n", encoding="utf-8")


def _best_step(ckpt_dir: Path) -> tuple[Path | None, int | None]:
    for path in sorted(ckpt_dir.glob("best-step*.ckpt")):
        match = re.fullmatch(r"best-step(\d+)\.ckpt", path.name)
        if match:
            return path, int(match.group(1))
    return None, None


def log_pretrain_artifacts(run: Run, run_dir: Path, *, mode: str, final_step: int) -> list[ArtifactEntry]:
    """Declare the tokenizer and log the final / best checkpoints of a finished pretraining run.

    Args:
        run: the started ``wandb.Run``.
        run_dir: the pretraining run directory (``tokenizer.json``, ``checkpoints/``).
        mode: ``wandb.log_model`` (:func:`log_model_mode`).
        final_step: the run's last optimizer step (the best checkpoint at that step is the final one).

    Returns:
        The entries written to ``wandb-artifacts.json``.
    """
    entries: list[ArtifactEntry] = []
    files = RunFiles(run_dir)
    tok = files.tokenizer_file
    if tok.is_file():
        art = tokenizer_artifact(tok)
        declare_use(run, art)
        entries.append({"role": "tokenizer", "name": art.name, "type": art.type, "file": TOKENIZER,
                        "upload": True, "digest": art.digest, "aliases": []})
    ckpt_dir = files.checkpoint_dir
    last = files.last_checkpoint
    best, best_step = _best_step(ckpt_dir)
    upload = mode != "false"
    # the final checkpoint is logged last: W&B gives `latest` to the version logged most recently
    versions = [(last, ["latest", "best"] if best is None or best_step == final_step else ["latest"])]
    if best is not None and best_step != final_step:
        versions.insert(0, (best, ["best"]))
    for ckpt, aliases in versions:
        if not ckpt.is_file():
            continue
        art = model_artifact(run.id, ckpt, upload=upload)
        run.log_artifact(art, aliases=aliases)
        entries.append({"role": "model", "name": art.name, "type": art.type, "file": str(ckpt.relative_to(run_dir)),
                        "upload": upload, "digest": art.digest, "aliases": aliases})
    for entry in entries:
        _record(run_dir, entry)
    return entries


def log_saved_checkpoint(run: Run, ckpt: Path) -> None:
    """``wandb.log_model=all``: upload a checkpoint as it is saved (copied: the file is rotated later)."""
    import wandb

    art = wandb.Artifact(f"model-{run.id}", type="model", metadata={"file": ckpt.name})
    art.add_file(str(ckpt), name="model.ckpt")  # mutable policy: staged copy, since last.ckpt is overwritten
    run.log_artifact(art, aliases=["latest"])


def use_run_artifacts(run: Run, source_dir: Path, ckpt: Path | None = None, seen: set[str] | None = None) -> list[str]:
    """Declare the tokenizer and the checkpoint of pretraining run ``source_dir`` as inputs of ``run``.

    Each recorded artifact is rebuilt from its file; one whose file changed since (digest differs), whose
    checkpoint is not ``ckpt`` (``None``: every checkpoint), or whose digest is in ``seen`` (declared already,
    e.g. the tokenizer every run of a comparison shares) is skipped; ``seen`` is updated. Returns the
    names declared (empty for a run logged without W&B).
    """
    seen = set() if seen is None else seen
    path = source_dir / ARTIFACTS_FILE
    if not path.is_file():
        return []
    declared = []
    for entry in json.loads(path.read_text(encoding="utf-8")):
        file = source_dir / entry["file"]
        if not file.is_file():
            continue
        if entry["role"] == "tokenizer":
            art = tokenizer_artifact(file)
        elif ckpt is None or file.resolve() == ckpt.resolve():
            art = model_artifact(entry["name"].removeprefix("model-"), file, upload=entry["upload"])
        else:
            continue
        if art.digest != entry["digest"] or art.digest in seen:
            continue
        seen.add(art.digest)
        declare_use(run, art)
        declared.append(f"{art.name} ({entry['file']})")
    return declared


def declare_use(run: Run, artifact: Artifact) -> None:
    """``run`` uses ``artifact`` (a draft built from local files), online or offline.

    Online this is W&B's public ``run.use_artifact(draft)``: it logs the draft and marks it used once
    committed. Offline, ``use_artifact`` refuses ("Cannot use artifact when in offline mode", an open TODO in
    wandb's ``wandb_run.py``), although the record it would write syncs like any other. So offline the same
    record is written through ``Run._log_artifact(..., use_after_commit=True)``, the private method
    ``use_artifact`` itself calls for a draft (``experiments/libraries/internals.py`` ``log_used_artifact``).
    ``tests/experiments/test_wandb_lineage.py`` fails if that method or its record changes.
    """
    if run.settings.mode in ("offline", "dryrun"):
        log_used_artifact(run, artifact)
    else:
        run.use_artifact(artifact)
