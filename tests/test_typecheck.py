"""The type check `.ci/run` runs (`.ci/typecheck`: mypy over all of famlab, `famlab.*` imports resolved).

It passes on the real tree; a module laid out as if in experiments/ that calls a `famlab.families`
function with a wrong argument type fails it, at the module's real path, and the function's type is the
real one, not `Any` (so cross-package imports resolve). The tree is checked with the repository's mypy
cache: after `.ci/typecheck` (as in CI) this takes seconds; from a cold cache, a minute or two.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "typecheck"
PACKAGES = ("families", "objectives", "datamodules", "experiments")

needs_mypy = pytest.mark.skipif(
    importlib.util.find_spec("mypy") is None, reason="mypy is not installed (it comes with pip install -e '.[test]')"
)

PROBE = '''"""Not famlab code: tests/test_typecheck.py's deliberate cross-package type error."""

from famlab.families.build import build_network

reveal_type(build_network)
build_network("bert")
'''


def _typecheck(root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # CI runs `.ci/typecheck` in ROOT (cache: ROOT/.mypy_cache); another root shares that cache.
    cmd = [sys.executable, str(SCRIPT), "--root", str(root), "--cache-dir", str(ROOT / ".mypy_cache")]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


def _tree_with_probe(tmp: Path, probe: str = PROBE) -> Path:
    """A copy of the repository's layout (symlinks) whose experiments/ also holds typecheck_probe.py."""
    (tmp / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp / "famlab").symlink_to(ROOT / "famlab", target_is_directory=True)
    for package in PACKAGES[:3]:
        (tmp / package).symlink_to(ROOT / package, target_is_directory=True)
    experiments = tmp / "experiments"
    experiments.mkdir()
    for entry in (ROOT / "experiments").iterdir():
        if entry.name != "__pycache__":
            (experiments / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    (experiments / "typecheck_probe.py").write_text(probe, encoding="utf-8")
    return tmp


@pytest.mark.slow
@needs_mypy
def test_the_tree_passes():
    result = _typecheck()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


@pytest.mark.slow
@needs_mypy
def test_a_cross_package_type_error_fails_at_its_real_path(tmp_path):
    result = _typecheck(_tree_with_probe(tmp_path))
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    probe = [line for line in out.splitlines() if line.startswith("experiments/typecheck_probe.py:")]
    assert any(
        line.startswith("experiments/typecheck_probe.py:6: error:")
        and 'Argument 1 to "build_network" has incompatible type "str"; expected "ModelConfig"' in line
        for line in probe
    ), out
    revealed = [line for line in probe if "Revealed type is" in line]
    assert revealed and "famlab.families.config.ModelConfig" in revealed[0], out  # resolved, not Any
    assert "build/typecheck" not in out, out  # paths are the repository's, not the symlink tree's


# A step that reads a key its plan does not name, or hands a section to a function that wants more of it, is refused:
# what a command reads follows from the plan its step takes (experiments/configuration/plans.py, reads.py).
PLAN_PROBE = '''"""Not famlab code: tests/test_typecheck.py's deliberate reads outside a plan."""

from pathlib import Path

from famlab.experiments.configuration.plans import FinetunePlan, PretrainPlan
from famlab.experiments.plumbing.trainer import maybe_compile
from famlab.experiments.steps.finetune import finetune_bundle
from famlab.experiments.steps.init import Init
from famlab.objectives import PretrainModule


def pretrain_reads_a_task(cfg: PretrainPlan) -> str:
    return cfg.data.task


def finetune_reads_the_pretraining_budget(cfg: FinetunePlan) -> int:
    return cfg.trainer.max_steps


def pretrain_hands_its_data_to_the_finetune(cfg: PretrainPlan, init: Init, run_dir: Path) -> object:
    return finetune_bundle(cfg.data, init, run_dir)


def finetune_compiles(cfg: FinetunePlan, module: PretrainModule) -> object:
    return maybe_compile(cfg.trainer, module)
'''


def _line(text: str) -> int:
    return next(i for i, line in enumerate(PLAN_PROBE.splitlines(), 1) if text in line)


@pytest.mark.slow
@needs_mypy
def test_a_read_outside_the_plan_fails_the_type_check(tmp_path):
    out = _typecheck(_tree_with_probe(tmp_path, PLAN_PROBE)).stdout
    errors = [line for line in out.splitlines() if line.startswith("experiments/typecheck_probe.py:")]
    expected = {
        "cfg.data.task": '"PretrainData" has no attribute "task"',
        "cfg.trainer.max_steps": '"TrainerSetup" has no attribute "max_steps"',
        "finetune_bundle(cfg.data": 'incompatible type "PretrainData"; expected "FinetuneData"',
        "maybe_compile(cfg.trainer": 'incompatible type "TrainerSetup"; expected "TrainerConfig"',
    }
    for statement, message in expected.items():
        at = f"experiments/typecheck_probe.py:{_line(statement)}: error: "
        assert any(line.startswith(at) and message in line for line in errors), (statement, out)
    assert len(errors) == len(expected), out  # nothing else in the probe is wrong


def test_skipped_modules_exist():
    """pyproject's list of modules mypy skips names only modules that exist (it can only shrink)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: tomli, the same parser (pytest depends on it there)
        import tomli as tomllib
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]["overrides"]
    for override in overrides:
        for module in override["module"]:
            if module.startswith("famlab."):
                package, *rest = module.split(".")[1:]
                path = ROOT.joinpath(package, *rest)
                assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), module
                assert re.fullmatch(r"[\w.]+", module), module
