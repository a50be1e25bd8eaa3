"""A comparison's or sweep's own W&B run (``job_type=report``) and the one W&B directory all its runs share.

The report run reads what the local report wrote, generically: every markdown table of ``report.md``
becomes a ``wandb.Table`` (titled by the heading above it), every image ``report.md`` links becomes a
``wandb.Image``, the scalars under ``results.json``'s ``wandb_summary`` (e.g. ``zero_shot/<task>/<arm>``) go into
the run's summary, and ``report.md`` + ``results.json`` (+ the images) are logged as one ``report`` artifact.
New tables or plots in the local report therefore reach W&B with no change here. The run declares the
pretraining checkpoints it reports on, so W&B's lineage graph ends at the report.

Every run of one invocation writes under ``<dir>/wandb/`` (``wandb.dir``): ``wandb leet <dir>/wandb``
shows them side by side and ``wandb sync <dir>/wandb`` uploads them all.
"""

from __future__ import annotations

import json
import re
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from famlab.experiments.configuration.config import WandbConfig
from famlab.experiments.configuration.run_files import CompareFiles
from famlab.experiments.tracking.wandb_artifacts import ARTIFACTS_FILE, use_run_artifacts
from famlab.experiments.tracking.wandb_guard import wandb_mode

IMAGE_LINK = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def invocation_group(name: str) -> str:
    """``<name>-<YYYYmmdd-HHMMSS>``: one W&B group per invocation, so two days' runs never average together."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def wandb_commands(out_dir: Path) -> list[str]:
    """The commands that show (``wandb leet``) and upload (``wandb sync``) every W&B run under ``out_dir``."""
    where = CompareFiles(out_dir).wandb_dir
    return [f"wandb leet {where}", f"wandb sync {where}"]


def print_wandb_commands(out_dir: Path) -> None:
    """Print :func:`wandb_commands` when ``out_dir`` holds W&B runs."""
    if CompareFiles(out_dir).wandb_dir.is_dir():
        view, upload = wandb_commands(out_dir)
        print(f"W&B runs: {view}   (upload: {upload})")


Cell = int | float | str  # a markdown table cell: a number where it reads as one


def _cell(text: str) -> Cell:
    text = text.strip().strip("`*")
    try:
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
    except ValueError:
        return text


def table_slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "table"


def markdown_tables(md: str) -> list[tuple[str, list[str], list[list[Cell]]]]:
    """Every pipe table of a markdown document as ``(title, header, rows)``.

    The title is the nearest heading above the table (numbered when a heading has several tables); cells
    that read as numbers become numbers, so W&B can sort and plot them.
    """
    out: list[tuple[str, list[str], list[list[Cell]]]] = []
    heading, lines = "report", md.splitlines()
    count: dict[str, int] = {}
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        is_table = line.startswith("|") and i + 1 < len(lines) and re.fullmatch(r"\|?[\s:|-]+\|?", lines[i + 1].strip())
        if not is_table or "-" not in lines[i + 1]:
            i += 1
            continue
        header = [c.strip() for c in line.strip("|").split("|")]
        rows, i = [], i + 2
        while i < len(lines) and lines[i].strip().startswith("|"):
            cells = [_cell(c) for c in lines[i].strip().strip("|").split("|")]
            rows.append((cells + [""] * len(header))[: len(header)])
            i += 1
        count[heading] = count.get(heading, 0) + 1
        title = heading if count[heading] == 1 else f"{heading} {count[heading]}"
        out.append((title, header, rows))
    return out


def report_images(out_dir: Path, md: str) -> list[Path]:
    """The images ``report.md`` links that exist under ``out_dir``, in order."""
    paths = [out_dir / link for link in IMAGE_LINK.findall(md)]
    return list(dict.fromkeys(p for p in paths if p.is_file()))


def report_summary(results: Path) -> dict[str, float]:
    """The scalars ``results.json`` lists under ``wandb_summary`` (empty when it has none)."""
    data = json.loads(results.read_text(encoding="utf-8")) if results.is_file() else {}
    summary = data.get("wandb_summary") if isinstance(data, dict) else None
    return dict(summary) if isinstance(summary, dict) else {}


def log_report_run(w: WandbConfig, out_dir: Path, *, group: str, name: str, sources: Sequence[Path] = ()
                   ) -> str | None:
    """Log the report in ``out_dir`` as a ``job_type=report`` run in ``group``; returns its run id or None.

    Args:
        w: the invocation's ``wandb.*`` (``project`` / ``entity`` / ``mode`` / ``tags``).
        out_dir: holds ``report.md`` and ``results.json``; the run is written under ``out_dir/wandb``.
        group: the invocation's W&B group (:func:`invocation_group`).
        name: the run's name.
        sources: run directories whose recorded artifacts the report declares as inputs (lineage).

    Never raises: W&B trouble is a warning, the local report stands on its own.
    """
    mode = wandb_mode(w)
    files = CompareFiles(out_dir)
    report = files.report_file
    if mode == "disabled" or not report.is_file():
        return None
    # wandb_mode gives online, offline or disabled; wandb.init's mode is typed as those names
    init_mode: Literal["online", "offline"] = "online" if mode == "online" else "offline"
    try:
        import wandb

        md = report.read_text(encoding="utf-8")
        settings = wandb.Settings(init_timeout=30.0, silent=True)
        try:
            run = wandb.init(project=w.project, entity=w.entity, group=group, job_type="report",
                             name=name, dir=str(out_dir), mode=init_mode, tags=[*w.tags, "report"],
                             settings=settings, reinit="create_new")
        except Exception:  # noqa: BLE001 - an unreachable server: the report goes offline like every run
            run = wandb.init(project=w.project, entity=w.entity, group=group, job_type="report",
                             name=name, dir=str(out_dir), mode="offline", tags=[*w.tags, "report"],
                             settings=settings, reinit="create_new")
        logged: dict[str, wandb.Table | wandb.Image] = {}
        for title, header, rows in markdown_tables(md):
            columns: list[str | int] = list(header)  # wandb.Table's column keys: str or int
            logged[f"tables/{table_slug(title)}"] = wandb.Table(columns=columns, data=rows, allow_mixed_types=True)
        images = report_images(out_dir, md)
        for path in images:
            logged[f"plots/{table_slug(path.stem)}"] = wandb.Image(str(path), caption=path.stem)
        run.log(logged)
        run.summary.update(report_summary(files.results_file))
        art = wandb.Artifact(f"report-{group}", type="report")
        for path in [report, files.results_file, *images]:
            if path.is_file():
                art.add_file(str(path), name=path.name)
        seen: set[str] = set()
        for source in sources:
            use_run_artifacts(run, source, seen=seen)
        run.log_artifact(art, aliases=["latest"])
        run_id = run.id
        run.finish()
        return run_id
    except Exception as e:  # noqa: BLE001 - W&B trouble never stops famlab (README, W&B)
        warnings.warn(f"W&B report run not logged ({type(e).__name__}: {e})", stacklevel=2)
        print(f"famlab: WARNING W&B report run not logged ({type(e).__name__})", file=sys.stderr)
        return None


def pretraining_dirs(out_dir: Path) -> list[Path]:
    """Run directories under ``out_dir`` that logged W&B artifacts (their checkpoints feed the report)."""
    return sorted(p.parent for p in out_dir.glob(f"*/{ARTIFACTS_FILE}"))
