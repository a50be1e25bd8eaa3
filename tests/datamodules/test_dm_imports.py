"""datamodules knows nothing about families, objectives or experiments (the layering rule of docs/architecture.md)."""

import ast
from pathlib import Path

import famlab.datamodules as datamodules

FORBIDDEN = {"families", "objectives", "experiments"}


def test_datamodules_imports_no_model_or_experiment_package():
    """No module under datamodules/ imports families, objectives or experiments."""
    root = Path(datamodules.__file__).parent
    offenders = []
    for file in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{file.name}: {n}" for n in names if n.removeprefix("famlab.").split(".")[0] in FORBIDDEN]
    assert len(list(root.rglob("*.py"))) >= 8
    assert offenders == []
