"""What each ``famlab`` command reads: the ``key=value`` overrides it accepts on its command line.

Every command reads every key it accepts. An override the command would ignore (``famlab pretrain finetune.lr=...``,
``famlab finetune optim.lr=...``, where the fine-tune's body rate is ``finetune.lr``) is refused before anything
runs, naming the key, the command, what the command reads and which commands read the key. Presets are not
checked: a preset is a bundle of settings for several commands (``tiny`` sets a pretraining and a fine-tuning
budget), so its keys that a command does not read are simply unused.

What the commands that compose a config read (``pretrain``, ``finetune``, ``probe``, ``compare``, ``sweep``,
``prepare``) follows from the types their steps take: each takes a plan
(:mod:`famlab.experiments.configuration.plans`), the type checker refuses a read the plan does not name, and
:func:`plan_keys` lists the keys it names, less the few the command sets itself (:data:`ASSIGNED`). ``config`` reads
every key; the option commands' options are listed here.

:data:`READS` holds, per command, patterns of config keys (or, for commands that compose no config, their own
option names):

- ``section`` or ``section.sub``: every key below it (``model``, ``data.tokenizer``);
- ``section.key``: that key;
- ``-section.key``: not that key, although a pattern above covers it (``trainer``, ``-trainer.max_steps``);
- ``*``: every key (``famlab config`` prints them all).

The lists are also measured: ``tests/experiments/test_keys_read.py`` runs each command on a tiny setup while
recording every config field its code reads, and fails when a list and the recording differ. Keys a
command reads only in some settings (``finetune.epochs`` without ``finetune.max_steps``, the ``wandb.*`` keys
with W&B on) are listed: a key is read if some setting of the command reads it. ``famlab <command> --help`` prints
the list (:func:`describe`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Protocol, get_type_hints

import yaml
from famlab.experiments.configuration.compose import flatten, schema, to_plain
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.plans import (
    ComparePlan,
    FinetunePlan,
    PreparePlan,
    PretrainPlan,
    ProbePlan,
    SweepPlan,
)

# the commands whose step takes a plan: what they read is derived from its type (plan_keys). Every command takes
# plugins= / --plugin (the CLI imports the modules first, famlab.experiments.plumbing.plugins); a plan names the key
# where the command hands it on: a run records it in config.yaml's provenance, a sweep passes it to its trials
PLANS: dict[str, type] = {"pretrain": PretrainPlan, "finetune": FinetunePlan, "probe": ProbePlan,
                          "compare": ComparePlan, "sweep": SweepPlan, "prepare": PreparePlan}
# keys a plan names that the command sets itself before its step reads them, so an override of one would be lost:
# a probe reads the tokenizer of the run it probes (famlab.experiments.steps.init.compose_finetune sets it); a
# comparison names its runs, groups them (one W&B group per comparison) and sets every fine-tune's init, seeds
# (compare.seeds) and mode itself (famlab.experiments.steps.compare_jobs); a sweep names each trial's W&B run
ASSIGNED: dict[str, tuple[str, ...]] = {"probe": ("data.tokenizer",),
                                        "compare": ("init", "wandb.group", "finetune.mode", "finetune.seeds"),
                                        "sweep": ("wandb.name",)}


def _is_view(hint: object) -> bool:
    return isinstance(hint, type) and Protocol in hint.__bases__


def plan_keys(plan: type, prefix: str = "") -> Iterator[str]:
    """The dotted keys a plan or view names: a property typed as a config section is that whole section, one typed
    as a view the keys that view names (``PretrainPlan`` -> ``model``, ..., ``data.corpus``, ``data.tokenizer``)."""
    members: dict[str, property] = {}
    for cls in reversed(plan.__mro__):  # a view's own properties after those of the views it extends
        members.update((name, value) for name, value in vars(cls).items() if isinstance(value, property))
    for name, member in members.items():
        hint = get_type_hints(member.fget)["return"]
        if _is_view(hint):
            yield from plan_keys(hint, f"{prefix}{name}.")
        else:
            yield prefix + name


def planned_reads(command: str) -> tuple[str, ...]:
    """``READS[command]`` for a command with a plan: the plan's keys less those the command assigns, as patterns in
    schema order (:func:`_patterns`)."""
    named, assigned = tuple(plan_keys(PLANS[command])), ASSIGNED.get(command, ())

    def covered(key: str) -> bool:
        return any(_matches(key, p) for p in named) and not any(_matches(key, p) for p in assigned)

    return tuple(_patterns(schema_tree(), "", covered))


@lru_cache(maxsize=1)
def schema_tree() -> Mapping[str, object]:
    """The config schema as nested plain mappings of its defaults, built once (every plan's patterns and
    :func:`schema_keys` read it; it is not to be changed)."""
    return to_plain(schema())


def _matches(key: str, pattern: str) -> bool:
    return pattern == "*" or key == pattern or key.startswith(pattern + ".")


def _patterns(node: Mapping[str, object], prefix: str, covered: Callable[[str], bool]) -> Iterator[str]:
    """The covered keys below ``node`` as patterns: a section every key of which is covered is the section; a
    section with more keys covered than not (and no sub-section partly covered) is the section with its exceptions
    (``trainer``, ``-trainer.max_steps``); else the covered keys and sub-sections one by one."""
    state = {name: _state(value, f"{prefix}{name}", covered) for name, value in node.items()}
    full = [name for name, s in state.items() if s == "full"]
    none = [name for name, s in state.items() if s == "none"]
    if prefix and len(full) > len(none) and len(full) + len(none) == len(state):
        yield prefix.rstrip(".")
        yield from (f"-{prefix}{name}" for name in none)
        return
    for name, s in state.items():
        if s == "full":
            yield f"{prefix}{name}"
        elif s == "partial":
            value = node[name]
            assert isinstance(value, Mapping)
            yield from _patterns(value, f"{prefix}{name}.", covered)


def _state(value: object, key: str, covered: Callable[[str], bool]) -> str:
    """``full``, ``none`` or ``partial``: how much of the key or section ``key`` is covered."""
    if not isinstance(value, Mapping) or not value:
        return "full" if covered(key) else "none"
    states = {_state(v, f"{key}.{name}", covered) for name, v in value.items()}
    return states.pop() if len(states) == 1 else "partial"


READS: dict[str, tuple[str, ...]] = {
    **{command: planned_reads(command) for command in PLANS},
    "config": ("*",),
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
CONFIG_COMMANDS = (*PLANS, "config")
_PRESETS = " (a preset may set it; an override on the command line must be a key the command reads)"
HINTS = {"pretrain": _PRESETS, "finetune": _PRESETS, "probe": _PRESETS, "compare": _PRESETS,
         "sweep": " (a trial's settings go in the sweep file)"}


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
    return frozenset(flatten(schema_tree()))


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
