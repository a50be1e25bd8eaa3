"""The ``famlab`` command line: ``famlab <command> [preset | file.yaml]... [key=value | --key=value]...``.

Commands live in :data:`COMMANDS` as ``name -> Command(target, summary, ...)``: the ``"module:function"`` that
runs it (taking ``(presets, overrides, flags)`` and returning an exit status), a one-line summary, and what
``famlab <command> --help`` prints (positionals, accepted ``--flags``, details).
Another module adds a command by adding an entry - nothing else here changes; a plain
``("module:function", "summary")`` tuple works too. Modules are imported only when their command runs,
so ``--help``, ``famlab config`` and ``famlab presets`` stay fast and have no side effects.

The ``key=value`` overrides a command accepts are the keys it reads, declared in
:data:`famlab.experiments.configuration.reads.READS` and measured against the code by the tests: :func:`main`
refuses any other before the command runs, and ``--help`` prints them (a command without an entry checks its own).

``--plugin <module>`` (any command, repeatable; the same as appending to the config key ``plugins``) imports the
user's module before anything else - before the config is composed, so the families, objectives, position schemes
and presets it registers are known to validation (docs/architecture.md, Plugins). The commands that record it
(their ``reads`` list ``plugins``) get it as one ``plugins=[...]`` override; for the others the CLI only imports it.
A module that fails to import is one line naming it (exit 2).

Config and input errors (``ValueError`` subclasses, OmegaConf errors) exit 2 with one line
``famlab: error: ...`` and no traceback; so do an ``--flag`` the command does not declare and a ``key=value``
override it does not read.
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any, NamedTuple

from famlab.experiments.configuration.compare_defaults import RULE, TINY_DEFAULTS
from famlab.experiments.configuration.compose import (
    compose,
    format_omegaconf_error,
    preset_description,
    preset_names,
    preset_path,
    split_args,
    sweep_names,
    sweep_path,
    to_yaml,
)
from famlab.experiments.configuration.reads import CONFIG_COMMANDS, READS, check_overrides, describe, reads
from famlab.experiments.configuration.run_files import LAST_CKPT, LOG, RESULTS
from famlab.experiments.plumbing import plugins
from omegaconf.errors import OmegaConfBaseException

USAGE = "usage: famlab <command> [preset | file.yaml]... [key=value | --key=value]... [--flag]..."
PRESET_ARGS = "[preset | file.yaml]... [key=value]..."


class Command(NamedTuple):
    """One ``famlab`` command: what runs it and what its ``--help`` says."""

    # "module:function"; the function takes (presets, overrides, flags) and returns an exit status
    target: str
    summary: str  # one line, shown by `famlab --help`
    args: str = PRESET_ARGS  # what follows the command name
    # config keys the command reads, for --help; a command in reads.CONFIG_COMMANDS gets reads.describe's
    sections: tuple[str, ...] = ()
    flags: tuple[str, ...] | None = ()  # accepted bare --flags; None = the command checks its own options
    details: str = ""  # further help text


COMMANDS: dict[str, Command | tuple[str, str]] = {  # a plain entry: ("module:function", "summary")
    "pretrain": Command(
        "famlab.experiments.commands.pretrain:main", "pretrain one family on a corpus",
        details="Trains the tokenizer (cached), tokenizes the corpus (cached), pretrains, writes a run directory."),
    "finetune": Command(
        "famlab.experiments.commands.finetune:main",
        "fine-tune a run / checkpoint / hf: model / scratch on a task (or suite)",
        args=f"{PRESET_ARGS} init=<run_dir | file.ckpt | hf:name | scratch>",
        details="The model and tokenizer come from init=; presets and overrides set the task and the budget."),
    "probe": Command(
        "famlab.experiments.commands.probe:main", "linear probe of a run's frozen body against random-init bodies",
        args=f"<run_dir | file.ckpt | hf:name> {PRESET_ARGS}",
        details="Frozen pooled features + logistic regression (finetune.probe_c_grid chosen on validation); the same "
                f"for finetune.probe_seeds random-init bodies of the same shape. Writes {RESULTS}."),
    "compare": Command(
        "famlab.experiments.commands.compare:main", "pretrain + fine-tune every family under a matched budget, report",
        args=f"[--dry-run] {PRESET_ARGS}", flags=("--dry-run",),
        details=textwrap.fill(f"famlab compare adds defaults of its own, which famlab config does not show: {RULE}",
                              116) + "\nTINY_DEFAULTS:\n" + "\n".join(f"  {' '.join(TINY_DEFAULTS[i:i + 4])}" for i in
                                                      range(0, len(TINY_DEFAULTS), 4))
                + "\ncompare.workers is one per visible GPU on a machine with several, each worker on its own GPU."
                "\n--dry-run prints the composed config, the budget plan per arm and the jobs, and runs nothing."),
    "sweep": Command(
        "famlab.experiments.commands.sweep:main", "run a W&B sweep file locally (--dry-run lists the trials)",
        args="<sweep name | file.yaml> [sweep.*=...] [wandb.*=...] [run_dir=<dir> [resume=auto]]",
        flags=("--dry-run", "--wandb"),
        details="Sweep names are the files in experiments/configs/sweeps/ (listed by `famlab presets`). "
                "--wandb registers the sweep with a W&B server instead of running it. wandb.* settings reach "
                "every trial. run_dir=<dir> names the sweep's directory; run_dir=<dir> resume=auto resumes an "
                f"interrupted sweep there: finished trials ({RESULTS}) are skipped, an interrupted one "
                f"continues from its {LAST_CKPT}, and settings that differ from the stored sweep are refused."),
    "report": Command(
        "famlab.experiments.analysis.report:main", "rebuild the comparison report from run directories",
        args="<comparison or run dir>... [out=<dir>]"),
    "dashboard": Command(
        "famlab.experiments.commands.dashboard:main", "create a comparison's W&B workspace view and Report",
        args="<comparison dir> [entity=<W&B entity>] [project=<W&B project>]",
        details=f"Reads <dir>/wandb-dashboard.json (written by the comparison) or builds it from {RESULTS}; run it "
                "after `wandb sync <dir>/wandb`. Needs the extra famlab[dashboard] (wandb-workspaces)."),
    "bench": Command(
        "famlab.experiments.perf.bench:main", "throughput / MFU benchmarks against Hugging Face",
        args="[--option=value]... [--profile]", flags=None,
        details="Options are the fields of experiments.bench.BenchSettings (an unknown one is refused)."),
    "generate": Command(
        "famlab.experiments.commands.generate:generate_main", "generate text from a pretraining run",
        args='<run_dir> prompt="..." [max_new_tokens=N] [temperature=T] [top_k=K] [top_p=P] [seed=S]'),
    "fill": Command(
        "famlab.experiments.commands.generate:fill_main", "fill masked spans / sentinels with a pretraining run",
        args='<run_dir> text="... [MASK] ..." [seed=S]'),
    "prepare": Command(
        "famlab.experiments.commands.prepare:main",
        "prepare a corpus once into token shards (famlab prepare data.corpus=...)",
        details="Streams the corpus, trains the tokenizer on a bounded seeded sample (data.tokenizer.sample_bytes) and "
                "writes token shards, document offsets, the split and a manifest to run_dir (else the cache); "
                "every command then takes data.corpus=<that directory>. See docs/data.md."),
    "eval": Command(
        "famlab.experiments.commands.evaluate:main",
        "zero-shot multiple choice (cloze, minimal pairs) for every family",
        args="<run_dir>... data.eval=<wordnet | wordnet-reverse-dictionary | wordnet-minimal-pairs | file.jsonl> "
             "[rule=full|span] [limit=N] [headline=raw|per_token|per_byte] [bigram=true|false] [wandb.mode=...] "
             "[wandb.project=...]",
        details="Each family scores every candidate with its own likelihood; accuracy raw, per token and per byte with "
                f"bootstrap 95 % CIs, chance and an add-k bigram baseline. Writes <run_dir>/eval/<task>/{RESULTS}."),
    "export": Command(
        "famlab.experiments.commands.export:main",
        "write a run as a Hugging Face model folder (model, tokenizer, card)",
        args="<run_dir> <out_dir> [seed=<s>]",
        details="The folder loads offline in transformers; a classifier no HF class pools as famlab did (the default "
                "mean pooling included) is written as its body with classifier_head.safetensors and a model card "
                "that applies the head; model settings HF cannot express are refused."),
    "config": Command(
        "famlab.experiments.commands.cli:config_command", "print the resolved config (or the validation error)",
        details="Composes and validates exactly as the training commands do, Lightning settings included."),
    "presets": Command(
        "famlab.experiments.commands.cli:presets_command", "list presets, sweep files and the family x objective table",
        args=""),
}


class UsageError(ValueError):
    """Bad command line (unknown command or flag, stray word)."""


def command(name: str) -> Command:
    """The table entry of ``name`` as a :class:`Command` (a plain tuple entry gets the defaults), its ``sections``
    the keys it reads (:func:`famlab.experiments.configuration.reads.describe`) when it declares them."""
    entry = COMMANDS[name]
    c = entry if isinstance(entry, Command) else Command(*entry)
    return c._replace(sections=describe(name)) if name in CONFIG_COMMANDS else c


def config_command(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """``famlab config``: print the resolved config as YAML (composed and checked as every command does)."""
    print(to_yaml(compose(presets, overrides).cfg), end="")
    return 0


def presets_command(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """``famlab presets``: presets and sweep files with their one-line descriptions, then family x objective."""
    from famlab.objectives.registry import objectives_table

    if presets or overrides:
        raise UsageError(f"famlab presets takes no arguments (got {(presets + overrides)[0]!r})")
    for title, names, path_of in (("presets (experiments/configs/)", preset_names(), preset_path),
                                  ("sweeps (experiments/configs/sweeps/; famlab sweep <name>)", sweep_names(),
                                   sweep_path)):
        width = max(len(n) for n in names)
        print(f"{title}:")
        for name in names:
            print(f"  {name:<{width}}  {preset_description(path_of(name))}")
        print()
    print("family x objective (the first is the family's default):")
    for family, objectives in objectives_table().items():  # registered families and objectives included
        print(f"  {family:<5} {', '.join(objectives)}")
    print()
    print("registered choices (+ name: added since famlab's own, by the module named):")
    for key, listing in registered_choices():
        print(f"  {key:<16} {listing}")
    return 0


def registered_choices() -> list[tuple[str, str]]:
    """``(config key, its names)`` for every registry of choices (families/registries.py): the built-in names, then
    each added one as ``+ name (module)``; objectives per architecture."""
    from famlab.families.blocks.feedforward import ACTIVATIONS, FFN_KINDS
    from famlab.families.blocks.norms import NORMS
    from famlab.families.config import FAMILIES, POSITIONS
    from famlab.families.registries import Registry
    from famlab.objectives.registry import OBJECTIVES_BY_ARCH

    def names(registry: Registry[Any]) -> str:
        added = [f"+ {name}" + (f" ({registry.origin(name)})" if registry.origin(name) else "")
                 for name in registry.added()]
        return ", ".join([*registry.builtins(), *added])

    objectives = "; ".join(f"{arch.value}: {names(registry)}" for arch, registry in OBJECTIVES_BY_ARCH.items())
    rows: list[tuple[str, str]] = [(r.key, names(r)) for r in (FAMILIES, POSITIONS)]
    return [*rows, ("objective.name", objectives), *((r.key, names(r)) for r in (NORMS, ACTIVATIONS, FFN_KINDS))]


def _resolve(name: str) -> Callable[[list[str], list[str], list[str]], int]:
    module_name, func = command(name).target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            raise UsageError(f"command {name!r} is not available yet (module {module_name} is missing)") from None
        raise
    return getattr(module, func)


def _help() -> str:
    lines = [USAGE, "", "commands:"]
    lines += [f"  {name:<9} {command(name).summary}" for name in COMMANDS]
    lines += ["", "presets: " + " ".join(preset_names()) + "   (famlab presets describes them)",
              "famlab <command> --help describes one command; famlab --version prints the version",
              "--plugin <module> (any command, repeatable, or plugins=[...]): import the module first; it may register "
              "families, objectives and position schemes (every process famlab starts imports it too)",
              "--verbose (any command, or FAMLAB_VERBOSE=1): the libraries' own console output too (W&B banners, "
              f"Lightning tips, their warnings); by default they go to the run directory's {LOG}"]
    return "\n".join(lines)


def command_help(name: str) -> str:
    """What ``famlab <name> --help`` prints: summary, arguments, config sections read, flags, details."""
    c = command(name)
    lines = [f"usage: famlab {name} {c.args}".rstrip(), "", c.summary[:1].upper() + c.summary[1:] + "."]
    if c.details:
        lines.append(c.details)
    if PRESET_ARGS in c.args:
        lines += ["", "presets: " + " ".join(preset_names()) + " (or a path to a YAML file)"]
    if c.sections:
        lines.append("reads config: " + ", ".join(c.sections) + "   (famlab config shows every key)")
    elif READS.get(name):
        lines.append("options: " + ", ".join(describe(name)))
    if READS.get(name) and name != "config":
        lines.append("key=value overrides of anything else are refused" + (
            "; presets may set any key (those it does not read are unused)" if PRESET_ARGS in c.args else ""))
    if c.flags:
        lines.append("flags: " + " ".join(c.flags))
    return "\n".join(lines)


def _check_flags(name: str, flags: list[str]) -> None:
    allowed = command(name).flags
    if allowed is None:
        return
    for flag in flags:
        if flag not in allowed:
            valid = ", ".join(allowed) if allowed else "none"
            raise UsageError(f"famlab {name}: unknown flag {flag} (valid flags: {valid}; see famlab {name} --help)")


def version() -> str:
    from famlab import __version__

    return f"famlab {__version__}"


BROKEN_PIPE_EXIT = 141  # what a shell reports for a command that SIGPIPE ended (128 + 13)
INTERRUPTED_EXIT = 130  # what a shell reports for a command that Ctrl-C ended (128 + SIGINT); training exits 3


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``famlab`` console script; returns the exit status.

    A reader that goes away (``famlab config | head``) ends the command with :data:`BROKEN_PIPE_EXIT` and no
    traceback, as a shell tool ends; nothing more is written to the closed pipe.
    """
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # Python flushes stdout at exit and would fail again
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE_EXIT


def _main(args: list[str]) -> int:
    if not args or args[0] in ("-h", "--help", "help"):
        print(_help())
        return 0
    if args[0] in ("-V", "--version", "version"):
        print(version())
        return 0
    name, rest = args[0], [a for a in args[1:] if a != "--verbose"]
    if len(rest) < len(args) - 1:  # any command: the libraries' own console output (banners, tips, warnings)
        os.environ["FAMLAB_VERBOSE"] = "1"
    status = 2  # bad settings or data, unless Ctrl-C below
    try:
        if name not in COMMANDS:
            raise UsageError(f"unknown command {name!r}; commands: {', '.join(COMMANDS)}")
        # the plugins first: a preset, family, objective or position scheme named below may be one of theirs
        names, rest = plugins.take(rest)
        plugins.load(names)
        if "--help" in rest or "-h" in rest:
            print(command_help(name))
            return 0
        presets, overrides, flags = split_args(rest)
        names = list(dict.fromkeys([*plugins.in_presets(presets), *names]))  # a preset file's plugins too
        plugins.load(names)
        if name in READS and reads(name, plugins.KEY):  # its config records them (and passes them on)
            overrides += [plugins.override(names)] if names else []
        _check_flags(name, flags)
        check_overrides(name, overrides)  # before anything runs: an unread key would be silently ignored
        plugins.check_resume(overrides, names)
        return int(_resolve(name)(presets, overrides, flags) or 0)
    except BrokenPipeError:
        raise  # the reader went away: main ends quietly
    except KeyboardInterrupt:  # outside a fit (which checkpoints and exits 3): preparing, scoring, probing
        print("famlab: interrupted", file=sys.stderr)
        status = INTERRUPTED_EXIT
    except OmegaConfBaseException as e:
        print(f"famlab: error: {format_omegaconf_error(e)}", file=sys.stderr)
    except ValueError as e:
        message = " ".join(str(e).split()) or type(e).__name__  # one line, whatever the source
        print(f"famlab: error: {message}", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - several ranks: one line from the rank that failed (one process: re-raised)
        from famlab.experiments.plumbing.rank_failure import report_rank_failure

        return report_rank_failure(e, name, rest)
    from famlab.experiments.plumbing.rundir import remove_empty_run_dirs

    remove_empty_run_dirs()  # a run refused on bad input (or stopped before its first step) leaves no empty directory
    return status


if __name__ == "__main__":
    sys.exit(main())
