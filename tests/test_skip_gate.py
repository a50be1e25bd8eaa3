"""tests/skip_gate.py: with CI set, a skip not on the allow-list fails the run; the allow-list names real tests."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.skip_gate import ALLOWLIST, read_allowlist

ROOT = Path(__file__).resolve().parents[1]

SUITE = {
    "conftest.py": """
        from pathlib import Path
        from tests.skip_gate import register

        def pytest_configure(config):
            register(config, Path(__file__).with_name("allowed.txt"))
        """,
    "test_mod_skip.py": """
        import pytest
        pytest.importorskip("no_such_module_famlab")
        def test_hidden():
            pass
        """,
    "test_skips.py": """
        import pytest
        def test_runs():
            pass
        def test_allowed():
            pytest.skip("allowed here")
        @pytest.mark.skipif(True, reason="not on the list")
        def test_unlisted():
            pass
        @pytest.mark.xfail(reason="an expected failure is not a skip")
        def test_xfail():
            assert False
        """,
}


def _run(tmp_path: Path, ci: str | None, allowed: str) -> subprocess.CompletedProcess[str]:
    for name, text in SUITE.items():
        (tmp_path / name).write_text(textwrap.dedent(text), encoding="utf-8")
    (tmp_path / "allowed.txt").write_text(allowed, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(ROOT)}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "-c", os.devnull, str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


ALLOWED = "test_skips.py::test_allowed | skipped on purpose\n"


def test_in_ci_an_unlisted_skip_fails_the_run_and_is_named(tmp_path):
    done = _run(tmp_path, "true", ALLOWED)
    assert done.returncode == 1, done.stdout + done.stderr
    section = done.stdout.split("skips not on the allow-list (CI fails on them)", 1)[1]
    named = [line.split(": ", 1)[0] for line in section.splitlines() if line.startswith("SKIPPED ")]
    assert named == ["SKIPPED test_mod_skip.py", "SKIPPED test_skips.py::test_unlisted"], done.stdout
    assert "2 unlisted skip(s)" in section and "1 passed, 3 skipped, 1 xfailed" in done.stdout


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_skips_are_only_reported(tmp_path, ci):
    done = _run(tmp_path, ci, ALLOWED)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "allow-list" not in done.stdout


def test_in_ci_listed_skips_pass(tmp_path):
    allowed = ALLOWED + "test_skips.py::test_unl* | a pattern\ntest_mod_skip.py | the module\n"
    done = _run(tmp_path, "true", allowed)
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_entry_without_a_reason_is_refused(tmp_path):
    done = _run(tmp_path, "true", "test_skips.py::test_allowed\n")
    assert done.returncode == 4 and "allowed.txt:1: an allow-list entry is '<test id pattern> | <reason>'" in (
        done.stdout + done.stderr)


def test_every_allowlist_entry_names_existing_tests():
    """The allow-list cannot keep an entry for a test that was renamed or removed (every pattern matches a test
    function defined in its file; parameters are not checked)."""
    for pattern, reason in read_allowlist(ALLOWLIST).items():
        path, _, name = pattern.partition("::")
        assert (ROOT / path).is_file(), pattern
        assert len(reason) > 20, f"{pattern}: give the reason skipping it in CI is right"
        if name:
            defined = [line.split("(")[0].removeprefix("def ").strip()
                       for line in (ROOT / path).read_text(encoding="utf-8").splitlines() if line.startswith("def ")]
            assert any(fnmatch.fnmatchcase(d, name.split("[")[0]) for d in defined), pattern
