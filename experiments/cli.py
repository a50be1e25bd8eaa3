"""The ``famlab`` command line: ``famlab <command> [preset | file.yaml]... [key=value | --key=value]...``.

Commands live in :data:`COMMANDS` as ``name -> "module:function"``; each function takes
``(presets, overrides, flags)`` and returns an exit status. Another module adds a command by adding an
entry (e.g. ``"compare": "famlab.experiments.compare:main"``) - nothing else here changes. Modules are imported
only when their command runs, so ``famlab config`` stays fast.

Config and input errors (``ValueError`` subclasses, OmegaConf errors) exit 2 with one line
``famlab: error: ...`` and no traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from famlab.experiments.allocator import keep_freed_memory
from famlab.experiments.compose import compose, format_omegaconf_error, preset_description, preset_names, preset_path
from omegaconf.errors import OmegaConfBaseException

USAGE = "usage: famlab <command> [preset | file.yaml]... [key=value | --key=value]... [--flag]..."

# name -> ("module:function", one-line help). Extend by adding entries; see the module docstring.
COMMANDS: dict[str, tuple[str, str]] = {
    "pretrain": ("famlab.experiments.pretrain:main", "pretrain one family on a corpus"),
    "finetune": ("famlab.experiments.finetune:main", "fine-tune a run / checkpoint / hf: model / scratch on a task"),
    "compare": ("famlab.experiments.compare:main", "pretrain + fine-tune every family under a matched budget, report"),
    "sweep": ("famlab.experiments.sweep:main", "run a W&B sweep file locally (--dry-run lists the trials)"),
    "report": ("famlab.experiments.report:main", "rebuild the comparison report from run directories"),
    "bench": ("famlab.experiments.bench:main", "throughput / MFU benchmarks against Hugging Face"),
    "generate": ("famlab.experiments.generate:generate_main", "generate text from a pretraining run"),
    "fill": ("famlab.experiments.generate:fill_main", "fill masked spans / sentinels with a pretraining run"),
    "eval": ("famlab.experiments.evaluate:main", "zero-shot multiple choice (cloze, minimal pairs) for every family"),
    "config": ("famlab.experiments.cli:config_command", "print the resolved config (or the validation error)"),
    "presets": ("famlab.experiments.cli:presets_command", "list presets and the family x objective table"),
}


class UsageError(ValueError):
    """Bad command line (unknown command, malformed token)."""


def split_args(args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Split tokens into presets, ``key=value`` overrides (bare or ``--key=value``) and ``--flags``."""
    presets, overrides, flags = [], [], []
    for token in args:
        if "=" in token and not token.startswith("=") and "/" not in token.split("=", 1)[0]:
            overrides.append(token)
        elif token.startswith("--"):
            flags.append(token)
        else:
            presets.append(token)
    return presets, overrides, flags


def config_command(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """``famlab config``: print the resolved config as YAML."""
    from famlab.experiments.compose import to_yaml

    print(to_yaml(compose(presets, overrides).cfg), end="")
    return 0


def presets_command(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """``famlab presets``: each preset with its one-line description, then the family x objective table."""
    from famlab.objectives import OBJECTIVES

    names = preset_names()
    width = max(len(n) for n in names)
    print("presets (experiments/configs/):")
    for name in names:
        print(f"  {name:<{width}}  {preset_description(preset_path(name))}")
    print("\nfamily x objective (the first is the family's default):")
    for family, objectives in OBJECTIVES.items():
        print(f"  {family:<5} {', '.join(objectives)}")
    return 0


def _resolve(name: str) -> Callable[[list[str], list[str], list[str]], int]:
    module_name, func = COMMANDS[name][0].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            raise UsageError(f"command {name!r} is not available yet (module {module_name} is missing)") from None
        raise
    return getattr(module, func)


def _help() -> str:
    lines = [USAGE, "", "commands:"]
    lines += [f"  {name:<9} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "presets: " + " ".join(preset_names()) + "   (famlab presets describes them)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``famlab`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_help())
        return 0
    command, rest = args[0], args[1:]
    try:
        if command not in COMMANDS:
            raise UsageError(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")
        presets, overrides, flags = split_args(rest)
        keep_freed_memory()  # training steps stop re-faulting their activations (see experiments.allocator)
        return int(_resolve(command)(presets, overrides, flags) or 0)
    except OmegaConfBaseException as e:
        print(f"famlab: error: {format_omegaconf_error(e)}", file=sys.stderr)
    except ValueError as e:
        message = " ".join(str(e).split()) or type(e).__name__  # one line, whatever the source
        print(f"famlab: error: {message}", file=sys.stderr)
    from famlab.experiments.run import remove_empty_run_dirs

    remove_empty_run_dirs()  # a run refused on bad input leaves no empty directory behind
    return 2


if __name__ == "__main__":
    sys.exit(main())
