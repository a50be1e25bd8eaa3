"""The comparison's live view: every job with its state, step, loss and rate, the elapsed time and an ETA.

Each job, in whichever process runs it, keeps a small JSON status file (:func:`job_status`): ``running`` when it
starts, the step / loss / rate of its current fit while it trains (written by ``heartbeat.Heartbeat`` through
``FAMLAB_PROGRESS_FILE``), then ``done`` with its result or ``failed`` with its reason. The comparison's own
process reads those files into a :class:`Board` and draws it with rich's ``Live`` when stdout is a terminal; on a
log file or CI the job lines and the fits' heartbeat lines (one a minute) say the same in plain text.

The ETA comes from the planned FLOPs: pretraining jobs carry their planned FLOPs, and the time per FLOP measured on
finished ones (or on the running ones' steps) prices the rest; the other jobs are priced by the mean time of the
finished ones of their kind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from famlab.experiments.plumbing.console import say, verbose
from famlab.experiments.plumbing.launch_env import restore_env, set_env

if TYPE_CHECKING:
    from famlab.experiments.analysis.results import JsonDict
    from rich.table import Table

PROGRESS_ENV = "FAMLAB_PROGRESS_FILE"  # the status file the current job's fits write their progress to
LIVE_ENV = "FAMLAB_LIVE"  # "1": draw the live view even off a terminal; "0": never; set to "1" for the workers
BOARD_ENV = "FAMLAB_BOARD"  # "1" while a board reports the jobs' progress: fits print no heartbeat lines of their own
STATES = ("queued", "running", "done", "failed")


def write_status(path: Path, **fields: object) -> None:
    """Replace ``path`` with ``fields`` (and the time) atomically: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps({**fields, "t": time.time()}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:  # a status file is a view; a full disk or a removed directory must not stop the job
        pass


def read_status(path: Path) -> JsonDict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@contextlib.contextmanager
def job_status(path: Path) -> Iterator[dict[str, object]]:
    """While a job runs: its status file says ``running`` and its fits report progress into it; afterwards ``done``
    with the ``result`` the job put in the yielded dict, or ``failed`` with the exception's first line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    write_status(path, state="running", started=started)
    saved = set_env({PROGRESS_ENV: str(path)})
    outcome: dict[str, object] = {}
    try:
        yield outcome
    except BaseException as e:
        write_status(path, state="failed", started=started, ended=time.time(),
                     result=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160])
        raise
    finally:
        restore_env(saved)
    write_status(path, state="done", started=started, ended=time.time(), result=outcome.get("result", ""))


def report_progress(**fields: object) -> None:
    """A fit's progress into the current job's status file (nothing outside a job)."""
    target = os.environ.get(PROGRESS_ENV)
    if target:
        old = read_status(Path(target))
        write_status(Path(target), **{**old, **fields, "state": "running"})


def live_wanted() -> bool:
    """A live view on a terminal, unless ``FAMLAB_LIVE=0`` or the libraries' output is shown (``FAMLAB_VERBOSE``);
    ``FAMLAB_LIVE=1`` draws it anywhere."""
    forced = os.environ.get(LIVE_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return sys.stdout.isatty() and not verbose()


@dataclasses.dataclass
class Entry:
    """One job of the board: its name, kind (``pretrain``, ``transfer``, ``scratch``), planned FLOPs if known."""

    name: str
    kind: str
    flops: float | None = None


class Board:
    """The comparison's jobs read from their status files in ``folder`` (``<name>.json``)."""

    def __init__(self, folder: Path, entries: list[Entry], started: float | None = None) -> None:
        self.folder, self.entries = folder, entries
        self.started = time.time() if started is None else started

    def status(self, entry: Entry) -> JsonDict:
        s = read_status(self.folder / f"{entry.name}.json")
        return s if s.get("state") in STATES else {"state": "queued"}

    def rows(self) -> list[tuple[str, str, str]]:
        """``(job, state, detail)`` per job, in the order given."""
        return [(e.name, s["state"], detail(s)) for e in self.entries for s in [self.status(e)]]

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left: pretraining at the time per FLOP measured so far, other kinds at their finished mean."""
        now = time.time() if now is None else now
        statuses = [(e, self.status(e)) for e in self.entries]
        per_flop = _seconds_per_flop(statuses, now)
        left = 0.0
        for e, s in statuses:
            if s["state"] in ("done", "failed"):
                continue
            if e.flops and per_flop is not None:
                left += e.flops * per_flop * (1.0 - _fraction(s))
                continue
            mean = _mean_time([s2 for e2, s2 in statuses if e2.kind == e.kind and s2["state"] == "done"])
            if mean is None:
                return None
            left += max(mean - (now - s["started"]), 0.0) if s["state"] == "running" else mean
        return left

    def headline(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        counts = {state: 0 for state in STATES}
        for _, state, _ in self.rows():
            counts[state] += 1
        eta = self.eta(now)
        failed = f", {counts['failed']} failed" if counts["failed"] else ""
        left = f", about {duration(eta)} left" if eta is not None else ""
        return (f"{counts['done']}/{len(self.entries)} jobs done, {counts['running']} running, {counts['queued']} "
                f"queued{failed}; elapsed {duration(now - self.started)}{left}")

    def line(self) -> str:
        """One plain line: the running jobs' progress, then the headline ("" when nothing runs)."""
        running = [f"{e.name} {short(s)}" for e in self.entries for s in [self.status(e)] if s["state"] == "running"]
        return f"{'; '.join(running)} | {self.headline()}" if running else ""

    def __rich__(self) -> Table:
        from rich.table import Table

        table = Table(title=self.headline(), title_justify="left", expand=False, show_edge=False)
        table.add_column("job")
        table.add_column("state")
        table.add_column("progress / result", overflow="fold")
        style = {"queued": "dim", "running": "bold cyan", "done": "green", "failed": "bold red"}
        for name, state, text in self.rows():
            table.add_row(name, f"[{style[state]}]{state}[/]", text)
        return table


def detail(s: JsonDict) -> str:
    """A job's progress (running: its fit, step, loss, rate) or result (done, failed)."""
    if s["state"] in ("done", "failed"):
        took = f" ({duration(s['ended'] - s['started'])})" if "ended" in s and "started" in s else ""
        return f"{s.get('result', '')}{took}".strip()
    if s["state"] != "running" or "step" not in s:
        return "starting" if s["state"] == "running" else ""
    return f"{s.get('fit', '')} {short(s)}, {s.get('rate', 0.0):.1f} steps/s"


def short(s: JsonDict) -> str:
    """A running job's progress in a few characters: ``step 281/4500, loss 4.7077``."""
    if "step" not in s:
        return "starting"
    total = f"/{s['max_steps']}" if s.get("max_steps") else ""
    loss = f", loss {s['loss']:.4f}" if isinstance(s.get("loss"), float) else ""
    return f"step {s['step']}{total}{loss}"


def _fraction(s: JsonDict) -> float:
    if s["state"] != "running" or not s.get("max_steps"):
        return 0.0
    return min(s.get("step", 0) / s["max_steps"], 1.0)


def _seconds_per_flop(statuses: list[tuple[Entry, JsonDict]], now: float) -> float | None:
    """Wall seconds per planned FLOP over the pretraining jobs finished or under way (None before any step)."""
    flops = seconds = 0.0
    for e, s in statuses:
        if not e.flops or "started" not in s:
            continue
        if s["state"] == "done" and "ended" in s:
            flops, seconds = flops + e.flops, seconds + s["ended"] - s["started"]
        elif s["state"] == "running" and _fraction(s) > 0:
            flops, seconds = flops + e.flops * _fraction(s), seconds + now - s["started"]
    return seconds / flops if flops else None


def _mean_time(done: list[JsonDict]) -> float | None:
    times = [s["ended"] - s["started"] for s in done if "ended" in s and "started" in s]
    return sum(times) / len(times) if times else None


def duration(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@contextlib.contextmanager
def live_view(board: Board, *, live: bool, every_s: float = 60.0) -> Iterator[None]:
    """Show ``board`` while the block runs: with ``live``, drawn by rich's ``Live`` (famlab's own lines print above
    it; workers are told through ``FAMLAB_LIVE=1`` to keep their lines to the log); else one plain line every
    ``every_s`` seconds (:meth:`Board.line`) from a thread of this process, which also runs while a job trains in
    it. Either way the fits print no heartbeat of their own (``FAMLAB_BOARD=1``)."""
    saved = set_env({BOARD_ENV: "1", **({LIVE_ENV: "1"} if live else {})})
    try:
        if live:
            from rich.console import Console
            from rich.live import Live

            with Live(board, console=Console(), refresh_per_second=1, transient=False, redirect_stdout=True,
                      redirect_stderr=True):
                yield
        else:
            with _every(every_s, board.line):
                yield
    finally:
        restore_env(saved)


@contextlib.contextmanager
def _every(seconds: float, make_line: Callable[[], str]) -> Iterator[None]:
    """Print ``make_line()`` (when it is not empty) every ``seconds`` from a daemon thread while the block runs."""
    import threading

    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            line = make_line()
            if line:
                say(line)

    thread = threading.Thread(target=loop, name="famlab-board", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def clear_unfinished(folder: Path) -> None:
    """Before a (resumed) comparison runs its jobs: a status left ``running`` or ``failed`` by a stopped one goes
    back to queued (the job runs again); ``done`` stays."""
    for path in folder.glob("*.json") if folder.is_dir() else []:
        if read_status(path).get("state") != "done":
            path.unlink(missing_ok=True)


def worker_console(log_path: Path) -> None:
    """In a worker process under a live view: its own prints go to the comparison's log, so they never tear the
    view the comparison's process draws (the job's status file carries what the view shows)."""
    if os.environ.get(LIVE_ENV) != "1":
        return
    try:
        f = log_path.open("a", encoding="utf-8", buffering=1)
    except OSError:
        return
    sys.stdout = sys.stderr = f
