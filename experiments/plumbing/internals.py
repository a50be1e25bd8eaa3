"""Every use famlab makes of a private or undocumented part of Lightning or W&B, in one place.

Each function names the library attribute it relies on; ``tests/experiments/test_internals.py`` checks, for each,
that the attribute still exists with the shape used here and that the behaviour famlab relies on still holds, and
fails naming the library and attribute when an upgrade changes it. docs/architecture.md ("Library internals we rely
on") lists them. torch's ``nn.Module._compiled_call_impl`` is the one in ``families/compile.py`` (``families`` imports
only torch), with its own check in ``tests/experiments/test_compile.py``.
"""

from __future__ import annotations

from typing import Any

# (library, attribute) pairs used below, for the tripwire test and the docs
CSV_WRITER_KEYS = ("lightning", "lightning.fabric.loggers.csv_logs._ExperimentWriter.metrics_keys")
WANDB_CONSOLE_STOP = ("wandb", "wandb.sdk.wandb_run.Run._console_stop")


def continue_csv_header(writer: Any, header: list[str]) -> None:
    """Make a just-created ``CSVLogger`` writer append under ``header`` (the columns of the file it continues).

    Lightning's writer keeps the file's columns in its ``metrics_keys`` list (sorted) and starts it empty, as for a
    new file: its first save would then re-read the kept rows under only the new rows' columns. Setting it to the
    kept header makes the first save append, or rewrite with the union of columns when new ones appear.
    """
    writer.metrics_keys = sorted(header)


def stop_console_copy(run: Any) -> None:
    """Stop a W&B run from copying stdout / stderr into its console log (``Run._console_stop``, what
    ``finish`` calls; calling it twice is harmless); wandb has no public call for it. Skipped if it is gone."""
    stop = getattr(run, "_console_stop", None)
    if callable(stop):
        stop()
