"""What reaches the console: famlab's own lines; the libraries' chatter goes to the run directory's log.

A comparison runs dozens of Lightning fits and W&B runs; each prints banners ("wandb: Tracking run ..."), tips
("GPU available: False ...", "💡 Tip: ...") and third-party warnings, which buried famlab's own progress lines.
:func:`quiet_libraries` sends Lightning's and W&B's loggers and every warning raised outside famlab to
``<run_dir>/famlab.log`` (the comparison's own ``compare.log``), and silences W&B's console banners
(``WANDB_SILENT``); warnings raised by famlab itself stay on stderr. ``FAMLAB_VERBOSE=1`` (or ``--verbose``)
leaves everything on the console.

``heartbeat.Heartbeat`` prints one line a minute while a fit runs with no progress bar (a log file, CI, a
comparison's workers): step, loss, rate and time left.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from famlab.experiments.configuration.run_files import LOG
from famlab.experiments.plumbing.launch_env import restore_env, set_env

VERBOSE_ENV = "FAMLAB_VERBOSE"
LOG_NAME = LOG  # a run's log file
LIBRARY_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning", "wandb", "torch",
                   "transformers", "datasets", "urllib3", "filelock")
_FAMLAB_ROOTS = tuple(str(Path(__file__).resolve().parents[2] / d) for d in
                      ("experiments", "objectives", "families", "datamodules"))
_HANDLER_NAME = "famlab-library-log"
_CONSOLE_SHOW = warnings.showwarning  # how warnings reach stderr before famlab routes them
_LOG: list[Path] = []  # the log quiet_libraries routes to now, in this process
_SAVED: dict[str, tuple[list[logging.Handler], bool]] = {}  # each logger's console handlers and propagate flag
_SILENT_BEFORE: list[dict[str, str | None]] = []  # WANDB_SILENT as the user had it


def verbose() -> bool:
    """Whether the user asked for the libraries' own console output (``FAMLAB_VERBOSE=1``)."""
    return os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def quiet_libraries(log_path: Path) -> None:
    """Route the libraries' logging and non-famlab warnings to ``log_path`` (appended) from now on, in this process.

    Called again with another path (the next run of a comparison's worker), it moves the output there; called when
    the user asks for verbose output, it undoes an earlier routing in this process (a notebook, a test session).
    """
    if verbose():
        _restore_console()
        return
    saved = set_env({"WANDB_SILENT": "true"})  # read by wandb.init: no banners, no sync hints on the console
    if not _SILENT_BEFORE:
        _SILENT_BEFORE.append(saved)
    handler = _RunLogHandler(log_path, encoding="utf-8", delay=True)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if name not in _SAVED:
            _SAVED[name] = ([h for h in logger.handlers if type(h) is logging.StreamHandler], logger.propagate)
        for old in list(logger.handlers):  # Lightning adds a console handler of its own at import
            if old.get_name() == _HANDLER_NAME or type(old) is logging.StreamHandler:
                logger.removeHandler(old)
                if old.get_name() == _HANDLER_NAME:
                    old.close()
        logger.addHandler(handler)
        logger.propagate = False
    warnings.showwarning = _warning_router(log_path)
    _LOG[:] = [log_path]


def _restore_console() -> None:
    """Put back what :func:`quiet_libraries` changed: the loggers' own console handlers, warnings, W&B's banners."""
    for name, (handlers, propagate) in _SAVED.items():
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            if old.get_name() == _HANDLER_NAME:
                logger.removeHandler(old)
                old.close()
        for h in handlers:
            if h not in logger.handlers:
                logger.addHandler(h)
        logger.propagate = propagate
    _SAVED.clear()
    if _SILENT_BEFORE:
        restore_env(_SILENT_BEFORE.pop())
    warnings.showwarning = _CONSOLE_SHOW
    _LOG.clear()


@contextlib.contextmanager
def library_output() -> Iterator[None]:
    """While a library writes to the console directly (``wandb.init`` prints its banner and settings warnings with
    ``print``, not logging): its stdout and stderr go to the current log too. A no-op when verbose or unrouted."""
    if verbose() or not _LOG:
        yield
        return
    try:
        f = _LOG[0].open("a", encoding="utf-8")
    except OSError:  # the run directory is gone: leave the console as it is
        yield
        return
    with f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        yield


class _RunLogHandler(logging.FileHandler):
    """A run's log file that never raises into the code that logs: a run directory removed while the process goes
    on (a notebook, a test session) makes the line go to stderr instead."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            super().emit(record)
        except OSError:  # FileHandler opens a delayed file outside logging's own error handling
            sys.stderr.write(self.format(record) + "\n")


def _warning_router(log_path: Path) -> Callable[..., None]:
    console = _CONSOLE_SHOW

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
             line: str | None = None) -> None:
        if str(Path(filename).resolve()).startswith(_FAMLAB_ROOTS):  # famlab's own warnings concern the user's run
            console(message, category, filename, lineno, file, line)
            return
        try:
            with log_path.open("a", encoding="utf-8") as f:
                f.write(warnings.formatwarning(message, category, filename, lineno, line))
        except OSError:  # the run directory is gone: show it as Python would
            console(message, category, filename, lineno, file, line)

    return show


def say(message: str) -> None:
    """One famlab line on stdout, timestamped, flushed (a worker process shares the parent's stdout)."""
    print(f"[famlab {time.strftime('%H:%M:%S')}] {message}", flush=True)


def progress_bar(wanted: bool) -> bool:
    """Whether a fit draws a progress bar: ``trainer.progress_bar`` (``wanted``) and stdout a terminal. Off a terminal
    (a log file, CI, a pipe) a bar's redraws and box characters only clutter the log; the heartbeat's line a minute
    replaces it (``heartbeat.Heartbeat``)."""
    return bool(wanted) and sys.stdout.isatty()


def heartbeat_seconds() -> float:
    """``FAMLAB_HEARTBEAT_S`` (a test's short interval), else 60."""
    try:
        return float(os.environ.get("FAMLAB_HEARTBEAT_S", "60"))
    except ValueError:
        print("famlab: WARNING FAMLAB_HEARTBEAT_S is not a number; using 60", file=sys.stderr)
        return 60.0
