"""Plugins: the user's modules that register families, objectives or position schemes, imported in every process
famlab starts (docs/architecture.md, Plugins).

A plugin is an importable module named by ``--plugin <module>`` (any command) or the config key ``plugins``;
importing it is what registers its additions (``register_family``, ``register_objective``, ``register_positions``).
The command line's plugins are imported before anything else looks up a family, objective or preset
(:func:`take`, then :func:`load`). Every process famlab starts then imports the same modules before it reads any
object that may name a plugin's choice (``Family('toy')``, ``PosScheme('clock')``):

- a Lightning DDP rank re-executes the command line, which carries the flag or key;
- a comparison's worker gets its shared context as :class:`Carried`, whose unpickling imports the plugins first
  (a spawned process unpickles its initializer's arguments before the initializer runs);
- a job's process group and a sweep's trials get the list this process imported (:func:`loaded`), in the spec and
  as ``plugins=[...]`` on the trial's command line.

A module is looked up as Python would from the working directory (``python -m`` puts it first on ``sys.path``; the
``famlab`` script does not, so :func:`load` does).
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import sys
from collections.abc import Sequence
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Generic, TypeVar

import yaml
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.run_files import CONFIG

T = TypeVar("T")

FLAG = "--plugin"
KEY = "plugins"

_LOADED: list[str] = []  # the plugins this process imported, in order


class PluginError(ConfigInputError):
    """A plugin that cannot be imported, or a ``--plugin`` without a module."""


def load(names: Sequence[str]) -> None:
    """Import each plugin module (once per process), in order.

    Raises:
        PluginError: one line naming the module and what its import raised.
    """
    for name in names:
        if name in _LOADED:
            continue
        if not isinstance(name, str) or not name.strip():
            raise PluginError(f"plugins: {name!r} is not a module name")
        if os.getcwd() not in sys.path and "" not in sys.path:  # as `python -m famlab` would find it
            sys.path.insert(0, os.getcwd())
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - whatever the plugin raises, one line naming it
            detail = " ".join(str(e).split()) or "no message"
            raise PluginError(f"plugin {name} cannot be imported: {type(e).__name__}: {detail}") from None
        _LOADED.append(name)


def loaded() -> list[str]:
    """The plugins this process imported, in order."""
    return list(_LOADED)


def take(args: list[str]) -> tuple[list[str], list[str]]:
    """The plugins a command line names, and the line without them: ``--plugin <module>`` / ``--plugin=<module>``
    (each appended, in order) after those of a ``plugins=[...]`` override (the last one wins, as for any key).

    Raises:
        PluginError: a ``--plugin`` with no module after it; a ``plugins=`` value that is not a list of names.
    """
    given: list[str] = []
    flagged: list[str] = []
    rest: list[str] = []
    tokens = iter(args)
    for token in tokens:
        if token == FLAG:
            module = next(tokens, None)
            if module is None or module.startswith("-") or "=" in module:
                raise PluginError(f"{FLAG} needs a module name (famlab <command> {FLAG} my_package.my_plugin)")
            flagged.append(module)
        elif token.startswith(FLAG + "="):
            flagged.append(token.split("=", 1)[1])
        elif token.removeprefix("--").startswith(KEY + "="):
            given = _parse_list(token)
        else:
            rest.append(token)
    return list(dict.fromkeys(given + flagged)), rest


def _parse_list(token: str) -> list[str]:
    value = token.split("=", 1)[1]
    try:
        parsed = yaml.safe_load(value) if value.strip() not in ("", "None") else []
    except yaml.YAMLError:
        parsed = None
    if parsed is None:
        parsed = []
    if isinstance(parsed, str):
        parsed = [parsed]
    if not isinstance(parsed, list) or not all(isinstance(p, str) and p.strip() for p in parsed):
        raise PluginError(f"cannot parse override {token!r}: {KEY} is a list of module names, e.g. {KEY}=[my.plugin]")
    return parsed


def in_presets(tokens: Sequence[str]) -> list[str]:
    """The plugins the preset files among ``tokens`` list (their ``plugins`` key, and that of the presets they
    extend), read before composing; a token that names no preset file (a run directory, ``hf:<name>``, a family
    registered by a plugin) is skipped, and composing reports a bad one."""
    from famlab.experiments.configuration.compose import PRESET_DIR

    found: list[str] = []
    todo, seen = list(tokens), set()
    while todo:
        token = todo.pop(0)
        path = Path(token).expanduser() if token.endswith((".yaml", ".yml")) else PRESET_DIR / f"{token}.yaml"
        if token in seen or "=" in token or not path.is_file():
            continue
        seen.add(token)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, OSError, UnicodeDecodeError):
            continue  # composing names the file and the line
        if isinstance(data, dict):
            value = data.get(KEY)
            found += _parse_list(f"{KEY}={json.dumps(value)}") if value is not None else []
            todo += [data["extends"]] if isinstance(data.get("extends"), str) else []
    return found


def override(names: Sequence[str]) -> str:
    """The ``plugins=[...]`` token naming ``names`` (a composed config records them; a trial's command passes them)."""
    return f"{KEY}={json.dumps(list(names), separators=(',', ':'))}"


class Carried(Generic[T]):
    """``value`` handed to another process so that its unpickling imports ``plugins`` first.

    Pickled, it is the plugin list and ``value`` pickled on its own; unpickled, the plugins are imported, then
    ``value`` is read. The inner pickling uses multiprocessing's pickler, in the same call as the outer one, so what a
    spawned process may inherit (a shared ``Value``) is handed on as when pickled directly.
    """

    def __init__(self, value: T, plugins: Sequence[str]) -> None:
        self.value = value
        self.plugins = tuple(plugins)

    def __reduce__(self) -> tuple[object, tuple[tuple[str, ...], bytes]]:
        return _unpickle, (self.plugins, bytes(ForkingPickler.dumps(self.value)))


def _unpickle(plugins: tuple[str, ...], data: bytes) -> Carried[object]:
    load(plugins)
    return Carried(pickle.loads(data), plugins)


def stored(run_dir: Path) -> tuple[Path, list[str]] | None:
    """The plugins a run, comparison or sweep directory was written with: ``config.yaml``'s ``plugins``, the arms'
    in ``comparison.yaml``, or ``sweep_config.yaml``'s; None when it holds none of them (or they cannot be read)."""
    for name in (CONFIG, "comparison.yaml", "sweep_config.yaml"):
        path = run_dir / name
        if not path.is_file():
            continue
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, OSError, UnicodeDecodeError):
            return None  # the resume's own check names the file
        if not isinstance(data, dict):
            return None
        if name == "comparison.yaml":
            arms = data.get("arms")
            names = [p for arm in (arms.values() if isinstance(arms, dict) else ()) if isinstance(arm, dict)
                     for p in arm.get(KEY) or []]
        else:
            names = data.get(KEY) or []
        return path, list(dict.fromkeys(str(n) for n in names))
    return None


def check_resume(overrides: Sequence[str], names: Sequence[str]) -> None:
    """Refuse ``resume=auto`` of a directory written with a plugin this command line does not name, in one line
    naming it (before composing: without it, the run's own settings would not even validate).

    Raises:
        PluginError: a plugin the stored run imported is missing here.
    """
    given = dict(token.removeprefix("--").split("=", 1) for token in overrides if "=" in token)
    run_dir, resume = given.get("run_dir"), given.get("resume")
    if resume != "auto" or not run_dir:
        return
    found = stored(Path(run_dir).expanduser())
    if found is None:
        return
    path, before = found
    missing = [p for p in before if p not in names]
    if missing:
        flags = " ".join(f"{FLAG} {p}" for p in missing)
        raise PluginError(f"resume=auto: {path} was written with {KEY}={before}; this command does not import "
                          f"{', '.join(missing)}: resume with {flags}")
