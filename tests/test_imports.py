"""The famlab package's import graph has no cycle, and no module imports another module's private name.

Every module's imports are read with `ast`, at module level and inside functions alike: a function-local import
that only hides a cycle is still a cycle. ``from famlab.x import y`` is an edge to ``famlab.x.y`` when that is a
module, else to ``famlab.x``; the implicit import of a module's parent package is not counted (every package
imports its own submodules).
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"famlab": "famlab", "families": "famlab.families", "objectives": "famlab.objectives",
            "datamodules": "famlab.datamodules", "experiments": "famlab.experiments"}


def modules() -> dict[str, Path]:
    """Module name -> file for every module of the famlab package (as pyproject maps the folders)."""
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The famlab modules ``name`` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each as one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(_cycle_through(sorted(group), edges))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def _cycle_through(group: list[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group (what to print)."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v] & members):
                if w == start:
                    return [*paths[v], start]
                if w not in paths:
                    paths[w] = [*paths[v], w]
                    nxt.append(w)
        frontier = nxt
    return group


def test_the_graph_sees_the_imports():
    """Not vacuous: known edges are there, module-level and function-level, absolute and relative."""
    edges = graph()
    assert "famlab.families.config" in edges["famlab.families.network"]
    # a function-local import
    assert "famlab.experiments.plumbing.reliability" in edges["famlab.experiments.plumbing.trainer"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_no_private_name_crosses_modules():
    """What one module shares with another is public in the module that owns it."""
    known = modules()
    crossing = []
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("famlab"):
                crossing += [f"{name} imports {node.module}.{a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.endswith("__")]
    assert not crossing, crossing


def test_training_does_not_import_the_benchmark():
    edges = graph()
    assert "famlab.experiments.perf.bench" not in edges["famlab.experiments.steps.pretrain"]
    assert "famlab.experiments.perf.bench" not in edges["famlab.experiments.plumbing.trainer"]


# experiments/ is grouped by concern; a group imports only groups below it (docs/architecture.md).
EXPERIMENT_LAYERS = {"libraries": 0, "configuration": 1, "tracking": 2, "analysis": 2, "perf": 2, "plumbing": 3,
                     "steps": 4, "commands": 5}


def test_experiments_modules_live_in_their_concern_folders():
    top = sorted(p.name for p in (ROOT / "experiments").glob("*.py") if p.name != "__init__.py")
    assert not top, f"modules at the top of experiments/, outside a concern folder: {top}"
    folders = {p.name for p in (ROOT / "experiments").iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(EXPERIMENT_LAYERS), folders


def test_experiment_groups_import_only_the_groups_below_them():
    def group(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 3 and parts[:2] == ["famlab", "experiments"] else None

    upward = [f"{a} imports {b}" for a, bs in graph().items() for b in bs
              if group(a) and group(b) and group(a) != group(b)
              and EXPERIMENT_LAYERS[group(b)] >= EXPERIMENT_LAYERS[group(a)]]
    assert not upward, upward


def test_no_command_imports_another_command():
    """What two commands share is a step (experiments/steps/); cli names the commands' modules in its table as strings
    and imports the one that runs."""
    commands = "famlab.experiments.commands."
    crossing = [f"{a} imports {b}" for a, bs in graph().items() for b in bs
                if a.startswith(commands) and b.startswith(commands)]
    assert not crossing, crossing
