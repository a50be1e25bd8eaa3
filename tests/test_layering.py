"""Dependency rules of docs/architecture.md, enforced by reading every module's imports with `ast`.

experiments -> objectives -> families(.blocks); experiments -> datamodules; experiments -> families.
Nothing imports experiments; datamodules imports neither families nor objectives; families imports only
torch + stdlib at module level (lazy imports inside functions, e.g. transformers in families/hf.py, are fine).
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("families", "objectives", "datamodules", "experiments")
STDLIB = set(sys.stdlib_module_names) | {"__future__"}


def _modules(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "data" not in p.relative_to(ROOT / package).parts[:-1])


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """Top-level package names imported by `path` (module level only when `top_level_only`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # include imports nested in module-level if/try blocks, not in functions/classes
        stack, nodes = list(tree.body), []
        while stack:
            node = stack.pop()
            nodes.append(node)
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                continue  # annotation-only imports: nothing is imported at run time
            if isinstance(node, (ast.If, ast.Try)):
                stack.extend(ast.iter_child_nodes(node))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {_package(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(_package(node.module))
    return names


def _package(module: str) -> str:
    """The package a module belongs to: famlab's four live under the one ``famlab`` import name."""
    parts = module.split(".")
    return parts[1] if parts[0] == "famlab" and len(parts) > 1 else parts[0]


@pytest.mark.parametrize("package", PACKAGES[:3])
def test_nothing_imports_experiments(package):
    for path in _modules(package):
        assert "experiments" not in _imports(path, top_level_only=False), path


def test_datamodules_imports_neither_families_nor_objectives():
    for path in _modules("datamodules"):
        bad = _imports(path, top_level_only=False) & {"families", "objectives"}
        assert not bad, f"{path} imports {bad}"


def test_objectives_does_not_import_datamodules():
    for path in _modules("objectives"):
        assert "datamodules" not in _imports(path, top_level_only=False), path


def test_families_imports_only_torch_and_stdlib_at_module_level():
    for path in _modules("families"):
        bad = _imports(path, top_level_only=True) - STDLIB - {"torch", "families"}
        assert not bad, f"{path} imports {bad} at module level"


def test_families_blocks_import_no_assembler():
    """The block library stays below the family assemblers (bert/gpt/t5 use blocks, never the reverse); below it are
    only the config, the kernels and the generic registry shape (``families/registries.py``, which imports nothing of
    famlab)."""
    for path in _modules("families/blocks"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("famlab.families."):
                below = ("blocks", "config", "kernels", "registries")
                assert node.module.split(".")[2] in below, f"{path} imports {node.module}"


def test_the_checker_sees_imports():
    """The rules above are not vacuous: experiments' modules do import the other packages."""
    seen = set().union(*(_imports(p, top_level_only=False) for p in _modules("experiments")))
    assert {"families", "objectives", "datamodules"} <= seen


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_go_through_the_famlab_namespace(package):
    """famlab's own modules are imported as ``famlab.<package>``: the bare names are not installed."""
    for path in _modules(package):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            bare = [m for m in modules if m.split(".")[0] in PACKAGES]
            assert not bare, f"{path} imports {bare} (use famlab.{bare[0]})"
