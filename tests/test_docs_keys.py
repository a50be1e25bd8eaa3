"""What the README and docs/*.md name exists: every `famlab <command>`, every config key, every override a command
line passes (the command must read it), and every command and module docs/interfaces.md lists.

Only code is checked: fenced blocks (backslash continuations joined, `#` comments read as prose) and inline code
spans. A span quoting an error message (``famlab: error: ...``) is skipped: it shows bad input on purpose.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
from functools import cache
from pathlib import Path

import pytest
from famlab.experiments.commands.cli import COMMANDS
from famlab.experiments.configuration.reads import READS, reads, schema_keys

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SECTIONS = sorted({k.split(".", 1)[0] for k in schema_keys() if "." in k})
# file names that start like a section (model.safetensors, compare.log) are not keys
FILE_SUFFIXES = (".json", ".jsonl", ".yaml", ".log", ".py", ".md", ".png", ".safetensors", ".ckpt", ".csv", ".txt")
PLACEHOLDERS = {"key", "option"}  # `key=value`, `--option=value` in a usage line
GENERIC = {"command"}  # "one module per famlab command": any command, not one named
# pages about the Python code, where `objective.collate` is an attribute: only `key=` is read as a config key there
API_PAGES = {"architecture.md", "interfaces.md"}
COMMAND_RE = re.compile(r"(?<![\w./-])famlab\s+([a-z][a-z_-]*)(.*)")
DOTTED_RE = re.compile(rf"(?<![\w./$-])((?:{'|'.join(SECTIONS)})(?:\.(?:[a-z_][a-z0-9_]*|\*|\{{[a-z0-9_,]*\}}))+)")
OPTION_KEYS = {p for c, patterns in READS.items() if c not in ("pretrain", "finetune", "probe", "compare", "sweep",
                                                                "config") for p in patterns}


def code_of(text: str) -> list[str]:
    """The code of a markdown page: one string per fenced line (continuations joined) and per inline span."""
    code, prose, fenced, pending = [], [], False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            prose.append(line)
            continue
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        cut = re.search(r"(^|\s)#", line)
        command, comment = (line[:cut.start()], line[cut.end():]) if cut else (line, "")
        code.append(command)
        prose.append(comment)
    spans = re.findall(r"`([^`\n]+)`", "\n".join(prose))
    return code + [s for s in spans if not s.startswith("famlab: error")]


@cache
def page_code(page: Path) -> tuple[str, ...]:
    return tuple(code_of(page.read_text(encoding="utf-8")))


def known_key(key: str) -> bool:
    """A schema key, a section or sub-section of keys (``data.tokenizer``, ``wandb.*``), ``a.{b,c}``, or an option."""
    if key.endswith(".*"):
        key = key[:-2]
    brace = re.fullmatch(r"(.*)\.\{([^}]*)\}", key)
    if brace:
        return all(known_key(f"{brace.group(1)}.{name}") for name in brace.group(2).split(","))
    keys = schema_keys()
    return key in keys or any(k.startswith(key + ".") for k in keys) or key in OPTION_KEYS


def command_lines(code: str) -> list[tuple[str, list[str]]]:
    """``(command, overrides)`` of every ``famlab <command> ...`` in one line of code."""
    found = []
    for m in COMMAND_RE.finditer(code):
        rest = re.split(r"&&|;", m.group(2))[0]
        try:
            tokens = shlex.split(rest)
        except ValueError:  # an unbalanced quote in a usage line
            tokens = rest.split()
        keys = []
        for token in tokens:
            token = token.lstrip("[").lstrip("-")
            key = re.match(r"([a-z_][a-z0-9_.]*)=", token)
            if key and key.group(1) not in PLACEHOLDERS:
                keys.append(key.group(1))
        found.append((m.group(1), keys))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_named_command_exists(page):
    unknown = {c for code in page_code(page) for c, _ in command_lines(code) if c not in {*COMMANDS, *GENERIC}}
    assert not unknown, f"{page.name} names famlab commands that do not exist: {sorted(unknown)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_named_key_exists(page):
    unknown = set()
    for code in page_code(page):
        for m in DOTTED_RE.finditer(code):
            key, after = m.group(1).rstrip("."), code[m.end():]
            if page.name in API_PAGES and not after.startswith("="):
                continue
            if key.endswith(FILE_SUFFIXES) or after.startswith(FILE_SUFFIXES) or after[:1] in ("(", "."):
                continue  # a file name, a call or a longer Python path (wandb.sdk.wandb_run.Run)
            if not known_key(key):
                unknown.add(key)
    assert not unknown, f"{page.name} names config keys that do not exist: {sorted(unknown)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_override_is_read_by_its_command(page):
    wrong = set()
    for code in page_code(page):
        for command, keys in command_lines(code):
            for key in keys:
                if command in READS and not reads(command, key):
                    wrong.add(f"famlab {command} {key}=")
                elif command not in READS and "." in key and not known_key(key):
                    wrong.add(f"famlab {command} {key}=")
    assert not wrong, f"{page.name} passes overrides the command does not read: {sorted(wrong)}"


def _defines(module: str, name: str) -> bool:
    """Whether ``module`` (found without importing it) defines or imports ``name`` at top level."""
    spec = importlib.util.find_spec(module)
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):  # lazily loaded (PEP 562)
                if name in ast.literal_eval(node.value):
                    return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_interfaces_lists_every_command_and_its_function():
    text = (ROOT / "docs" / "interfaces.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z]+)` \| `([\w.]+:\w+)` \|", text, re.M))
    assert set(rows) == set(COMMANDS), f"interfaces.md lists {sorted(rows)}; cli.COMMANDS has {sorted(COMMANDS)}"
    for name, target in rows.items():
        entry = COMMANDS[name]
        assert target == (entry[0] if isinstance(entry, tuple) else entry.target), f"{name}: {target}"
        module, func = target.split(":")
        assert _module_exists(module) and _defines(module, func), f"{name}: {target} does not exist"


def test_interfaces_names_only_modules_that_exist():
    text = (ROOT / "docs" / "interfaces.md").read_text(encoding="utf-8")
    names = set(re.findall(r"`((?:famlab\.)?(?:families|objectives|datamodules|experiments)(?:\.\w+)*)", text))
    paths = set(re.findall(r"`((?:families|objectives|datamodules|experiments)/[\w/]+\.py)`", text))
    missing = sorted(p for p in paths if not (ROOT / p).is_file())
    for name in sorted(names):
        parts = (name if name.startswith("famlab.") else f"famlab.{name}").split(".")
        cut = next(i for i in range(len(parts), 0, -1) if _module_exists(".".join(parts[:i])))
        if cut < len(parts) and not _defines(".".join(parts[:cut]), parts[cut]):
            missing.append(name)
    assert not missing, f"docs/interfaces.md names what does not exist: {missing}"


def test_readme_is_a_guide():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines; move the depth into docs/ (at most 250)"
