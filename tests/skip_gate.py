"""No silent skips in CI: a skipped test that the allow-list does not name fails the run.

A skip is how a test says "this machine cannot check me"; in CI that is almost always a broken set-up (a package
not installed, an import that moved) hiding a check that should run. With the ``CI`` environment variable set (as
``.ci/run`` and hosted CI runners do), every skip, at collection (a module-level ``importorskip``) or in a test, is
compared with the allow-list ``tests/skips_allowed.txt``; one not on it fails the run (exit status 1) and the
terminal summary names it. Outside CI skips are reported as usual (``-ra``) and nothing else happens.

The allow-list has one entry a line, ``<test id pattern> | <reason>``: the pattern is an ``fnmatch`` pattern over
pytest's node id (``tests/x.py::test_y[param]``), the reason why skipping it in CI is right. ``#`` starts a comment.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ALLOWLIST = Path(__file__).with_name("skips_allowed.txt")


def in_ci() -> bool:
    """``CI`` set to anything but empty, ``0`` or ``false``."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def read_allowlist(path: Path) -> dict[str, str]:
    """``pattern -> reason``; an entry without a reason is an error (the list is reviewed entry by entry)."""
    entries: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        pattern, _, reason = (part.strip() for part in line.partition("|"))
        if not pattern or not reason:
            raise pytest.UsageError(f"{path}:{number}: an allow-list entry is '<test id pattern> | <reason>'")
        entries[pattern] = reason
    return entries


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@dataclass(eq=False)  # a plugin object must hash by identity
class SkipGate:
    """The pytest plugin: collects skips, and in CI fails the session on one the allow-list does not name."""

    allowlist: Path = ALLOWLIST
    unlisted: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.allowed = read_allowlist(self.allowlist)

    def _note(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            if not any(fnmatch.fnmatchcase(report.nodeid, p) for p in self.allowed):
                self.unlisted.append((report.nodeid, _reason(report)))

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._note(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._note(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.unlisted and in_ci() and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not (self.unlisted and in_ci()):
            return
        terminalreporter.section("skips not on the allow-list (CI fails on them)", sep="=", red=True, bold=True)
        for nodeid, reason in self.unlisted:
            terminalreporter.line(f"SKIPPED {nodeid}: {reason}")
        terminalreporter.line(f"{len(self.unlisted)} unlisted skip(s): make them run in CI, or add each to "
                              f"{self.allowlist.name} with the reason skipping it in CI is right")


def register(config: pytest.Config, allowlist: Path = ALLOWLIST) -> None:
    """What a conftest's ``pytest_configure`` calls."""
    config.pluginmanager.register(SkipGate(allowlist), "famlab-skip-gate")
