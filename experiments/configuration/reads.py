"""What each ``famlab`` command reads: the ``key=value`` overrides it accepts on its command line.

Every command reads every key it accepts. An override the command would ignore (``famlab pretrain finetune.lr=...``,
``famlab finetune optim.lr=...``, where the fine-tune's body rate is ``finetune.lr``) is refused before anything
runs, naming the key, the command, what the command reads and which commands read the key. Presets are not
checked: a preset is a bundle of settings for several commands (``tiny`` sets a pretraining and a fine-tuning
budget), so its keys that a command does not read are simply unused.

:data:`READS` lists, per command, patterns of config keys (or, for commands that compose no config, their own
option names):

- ``section`` or ``section.sub``: every key below it (``model``, ``data.tokenizer``);
- ``section.key``: that key;
- ``-section.key``: not that key, although a pattern above covers it (``trainer``, ``-trainer.max_steps``);
- ``*``: every key (``famlab config`` prints them all).

The lists are what the commands read, measured: ``tests/experiments/test_keys_read.py`` runs each command on a tiny
setup while recording every config field its code reads, and fails when a list and the recording differ. Keys a
command reads only in some settings (``finetune.epochs`` without ``finetune.max_steps``, the ``wandb.*`` keys
with W&B on) are listed: a key is read if some setting of the command reads it. ``famlab <command> --help`` prints
the list (:func:`describe`).
"""

from __future__ import annotations

from functools import lru_cache

import yaml
from famlab.experiments.configuration.compose import flatten, schema, to_plain
from famlab.experiments.configuration.config import ConfigInputError

# the task file's columns and split: what datamodules.load_task reads through configuration.task
_TASK = ("data.task", "data.text_column", "data.text_pair_column", "data.label_column", "data.split_column",
         "data.val_fraction", "data.test_fraction", "data.seed")
# where a run goes and what it is called; `size` (set by size presets) names a pretraining run or a comparison when
# `name` is unset (a fine-tune or a probe is named after its task)
_RUN = ("name", "run_dir", "resume")
# make_loggers: the W&B run (every wandb.* key when W&B is on), its tags (objective.name) and the x-axis of its
# charts (compare.match: FLOPs, tokens or steps)
_LOGGED = ("wandb", "objective.name", "compare.match")
# the plugins (every command imports them first, famlab.experiments.plumbing.plugins): a run records them in its
# config.yaml's provenance, a sweep passes them to its trials. The other commands take --plugin / plugins= too; the CLI
# imports the modules and does not hand the key on (nothing of theirs records it)
_PLUGINS = ("plugins",)

READS: dict[str, tuple[str, ...]] = {
    "pretrain": (
        "model", "objective",
        "data.corpus", "data.tokenizer", "data.seq_len", "data.batch_size", "data.val_fraction", "data.seed",
        "data.shuffle", "data.num_workers", "data.val_batches", "data.cache_dir",
        "optim", "trainer", *_LOGGED, "seed", *_RUN, "size", *_PLUGINS,
    ),
    "finetune": (
        # init=scratch trains a tokenizer on data.corpus; finetune.mode=probe reads the probe's keys
        "model", *_TASK, "data.corpus", "data.tokenizer", "data.batch_size", "data.num_workers", "data.max_len",
        "data.cache_dir",
        "optim.betas", "optim.eps", "optim.grad_clip",  # the body's rate and schedule are finetune.*
        "trainer", "-trainer.max_steps", "-trainer.max_epochs", "-trainer.val_check_interval",
        "-trainer.limit_val_batches", "-trainer.validate_first", "-trainer.compile",
        "finetune", *_LOGGED, "init", "seed", *_RUN, *_PLUGINS,
    ),
    "probe": (
        # no training: features of the frozen body on trainer.accelerator's device, logistic regression on the CPU;
        # the tokenizer is the run's
        "model", *_TASK, "data.max_len", "data.cache_dir", "trainer.accelerator",
        "finetune.pooling", "finetune.probe_seeds", "finetune.probe_c_grid", *_LOGGED, "init", *_RUN, *_PLUGINS,
    ),
    "compare": (
        # the comparison names its runs, groups them (one W&B group per comparison) and sets every fine-tune's
        # init, seeds (compare.seeds) and mode itself; `name` names the comparison's directory
        "model", "objective", "data", "optim", "trainer", "wandb", "-wandb.group", "finetune", "-finetune.mode",
        "-finetune.seeds", "compare", "seed", *_RUN, "size", *_PLUGINS,
    ),
    "sweep": (
        # wandb.* settings reach every trial (with the sweep's own report run); one wandb.name for every trial
        # would name them all alike, so it is left to the sweep file
        "sweep", "wandb", "-wandb.name", "run_dir", "resume", *_PLUGINS,
    ),
    "config": ("*",),
    # the corpus, its tokenizer and split, into a prepared directory (run_dir, else the cache)
    "prepare": ("data.corpus", "data.tokenizer", "data.val_fraction", "data.seed", "data.cache_dir", "run_dir"),
    # commands with their own options rather than a config
    "eval": ("data.eval", "rule", "limit", "headline", "bigram", "wandb.mode", "wandb.project"),
    "generate": ("prompt", "max_new_tokens", "temperature", "top_k", "top_p", "seed"),
    "fill": ("text", "max_new_tokens", "temperature", "top_k", "top_p", "seed"),
    "export": ("seed",),
    "report": ("out",),
    "dashboard": ("entity", "project"),
    "presets": (),
}
# their keys are config keys
CONFIG_COMMANDS = ("pretrain", "finetune", "probe", "compare", "sweep", "prepare", "config")
_PRESETS = " (a preset may set it; an override on the command line must be a key the command reads)"
HINTS = {"pretrain": _PRESETS, "finetune": _PRESETS, "probe": _PRESETS, "compare": _PRESETS,
         "sweep": " (a trial's settings go in the sweep file)"}


def _matches(key: str, pattern: str) -> bool:
    return pattern == "*" or key == pattern or key.startswith(pattern + ".")


def reads(command: str, key: str) -> bool:
    """Whether ``famlab <command>`` reads ``key`` (a dotted config key or option name)."""
    patterns = READS[command]
    if any(_matches(key, p[1:]) for p in patterns if p.startswith("-")):
        return False
    return any(_matches(key, p) for p in patterns if not p.startswith("-"))


def readers(key: str) -> list[str]:
    """The commands (other than ``config``, which reads everything) that read ``key``."""
    return [c for c in READS if c != "config" and reads(c, key)]


@lru_cache(maxsize=1)
def schema_keys() -> frozenset[str]:
    """Every dotted key of the config schema (``model.dim``, ``data.tokenizer.kind``, ``seed``)."""
    return frozenset(flatten(to_plain(schema())))


def read_keys(command: str) -> set[str]:
    """The schema keys ``famlab <command>`` reads (for a config command; options are not schema keys)."""
    return {k for k in schema_keys() if reads(command, k)}


def override_keys(token: str) -> list[str]:
    """The dotted keys one ``key=value`` token sets: its key, or each key of a ``section={a: 1, b: 2}`` mapping."""
    key, _, value = token.removeprefix("--").partition("=")
    if value.strip().startswith("{"):
        try:
            mapping = yaml.safe_load(value)
        except yaml.YAMLError:
            mapping = None  # malformed: the command's own parser names the token
        if isinstance(mapping, dict) and mapping:
            return [f"{key}.{k}" for k in flatten(mapping)]
    return [key]


def check_overrides(command: str, overrides: list[str]) -> None:
    """Refuse an override ``famlab <command>`` does not read, with one line naming the key and the command.

    A misspelled key inside a section the command reads (``model.dimm``) is left to the command's composition,
    whose message suggests the nearest key; one the command would not read even if spelled right is refused here.

    Raises:
        ConfigInputError: the first override the command does not read.
    """
    if command not in READS:
        return  # a command without an entry checks its own options
    for token in overrides:
        for key in override_keys(token):
            if reads(command, key) or (command in CONFIG_COMMANDS and _misspelled(command, key)):
                continue
            others = readers(key) if command not in CONFIG_COMMANDS or key in schema_keys() else []
            read_by = f"; it is read by famlab {', '.join(others)}" if others else ""
            accepted = ", ".join(describe(command)) or "no key=value settings"
            raise ConfigInputError(f"famlab {command} does not read {key}{read_by}{HINTS.get(command, '')}; "
                                   f"famlab {command} reads: {accepted}")


def _misspelled(command: str, key: str) -> bool:
    """Not a schema key, and left to the command's composition, whose message suggests the nearest key: a name
    unknown at the top (``trainr.max_steps``) or one inside a section the command reads some of (``model.dimm``).
    A misspelled key in a section the command reads none of (``sweep.paralel`` for pretrain) is refused here."""
    keys = schema_keys()
    if key in keys:
        return False
    parts = key.split(".")
    for n in range(len(parts) - 1, 0, -1):  # the deepest section of the schema the key lies in
        section = ".".join(parts[:n]) + "."
        below = [k for k in keys if k.startswith(section)]
        if below:
            return any(reads(command, k) for k in below)
    return True


def describe(command: str) -> tuple[str, ...]:
    """``READS[command]`` for ``--help``: one entry per section, partial sections as ``data.{corpus,seq_len}``,
    exclusions as ``trainer (not max_steps, compile)``."""
    if READS.get(command) == ("*",):
        return ("every key",)
    entries: dict[str, list[str]] = {}  # first part of a pattern -> its patterns, in declaration order
    for p in READS.get(command, ()):
        entries.setdefault(p.lstrip("-").split(".")[0], []).append(p)
    out = []
    for head, patterns in entries.items():
        whole = head in patterns
        excluded = [p.lstrip("-")[len(head) + 1:] for p in patterns if p.startswith("-")]
        keys = [p[len(head) + 1:] for p in patterns if not p.startswith("-") and p != head]
        if whole:
            out.append(f"{head} (not {', '.join(excluded)})" if excluded else head)
        else:
            out.append(f"{head}.{{{','.join(keys)}}}" if len(keys) > 1 else f"{head}.{keys[0]}")
    return tuple(out)
