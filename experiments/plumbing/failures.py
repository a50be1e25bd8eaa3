"""A comparison's optional steps: a failure is recorded and the comparison goes on.

Pretraining, fine-tuning and the scratch baselines are *required*: without them there is no comparison, so their
failure stops it (every finished job stays on disk and the comparison resumes). Evaluation (bits per byte, length
extrapolation, zero-shot tasks), probes, plots and the W&B report run are *optional*: :func:`optional` runs one,
and when it raises, writes ``failures/<key>.json`` (a :class:`~famlab.experiments.analysis.results.StepFailure`
with a one-line reason, which the report shows in the failed cell) and appends the traceback to the comparison's
log, ``compare.log``. A stop signal (``Preempted``) or Ctrl-C is not a failure: it propagates.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from famlab.experiments.analysis.results import StepFailure
from famlab.experiments.plumbing.signals import Preempted

LOG_NAME = "compare.log"  # the comparison's log: tracebacks of every failed step
FAILURES = "failures"
T = TypeVar("T")


def one_line(e: BaseException, limit: int = 240) -> str:
    """``Type: first line of the message``, at most ``limit`` characters."""
    text = " ".join(str(e).split()) if str(e).strip() else ""
    line = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def log_traceback(comp_dir: Path, what: str, e: BaseException) -> Path:
    """Append ``what`` and ``e``'s traceback (a worker's included, as its ``__cause__``) to ``compare.log``."""
    path = comp_dir / LOG_NAME
    text = "".join(traceback.format_exception(e))
    with path.open("a", encoding="utf-8") as f:  # one write per record: workers append to the same file
        f.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: {what}\n{text}\n")
    return path


def record(comp_dir: Path, failure: StepFailure, e: BaseException) -> None:
    """Write ``failures/<key>.json`` (whole or not at all) and log the traceback."""
    import json

    folder = comp_dir / FAILURES
    folder.mkdir(exist_ok=True)
    path = folder / f"{failure.key}.json"
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(failure.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    log_traceback(comp_dir, f"{failure.where} failed", e)


def clear(comp_dir: Path, failure: StepFailure) -> None:
    """Forget an earlier failure of the step (it is being retried, by a resumed comparison)."""
    (comp_dir / FAILURES / f"{failure.key}.json").unlink(missing_ok=True)


def optional(
    comp_dir: Path, failure: StepFailure, fn: Callable[..., T], *args: object,
    say: Callable[[str], None] | None = None, **kwargs: object,
) -> T | None:
    """``fn(*args, **kwargs)``, or None after recording its failure as ``failure`` (its reason filled in) and
    saying so on one line through ``say``."""
    clear(comp_dir, failure)
    try:
        return fn(*args, **kwargs)
    except (Preempted, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - an optional step: any failure is recorded, none stops the comparison
        failure.reason = one_line(e)
        record(comp_dir, failure, e)
        if say is not None:
            say(f"{failure.where} failed ({failure.reason}); the comparison goes on, traceback in "
                f"{comp_dir / LOG_NAME}")
        return None
