"""docs/sweeps.md lists every bundled sweep file with the trial count its grid expands to, and the worked ablation
it shows is the recorded runs' (``docs/measured/``): the commands it gives are the ones recorded, and the gains
tables it quotes are theirs."""

import json
import re
from pathlib import Path

import pytest
from famlab.experiments.commands.sweep import expand_grid, load_sweep

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "sweeps.md"
MEASURED = ROOT / "docs" / "measured"
SWEEPS = ROOT / "experiments" / "configs" / "sweeps"
ROW = re.compile(r"^\| `(?P<name>[a-z0-9_]+)` \| (?P<trials>\d+) \|", re.M)


def listed() -> dict[str, int]:
    return {m["name"]: int(m["trials"]) for m in ROW.finditer(DOC.read_text(encoding="utf-8"))}


def test_every_bundled_sweep_file_is_listed_with_its_trial_count():
    """A file added, removed or regridded changes the expansion; the page must follow."""
    expected = {}
    for path in sorted(SWEEPS.glob("*.yaml")):
        spec = load_sweep(path)
        assert spec["method"] == "grid", path  # a random file would list its `run_cap`, not a grid size
        expected[path.stem] = len(expand_grid(spec["parameters"]))
    assert listed() == expected


def test_the_row_pattern_reads_a_row_and_skips_prose():
    text = "| `mask_rate` | 18 | x |\nthe `mask_rate` file has | 18 |"
    assert {m["name"]: int(m["trials"]) for m in ROW.finditer(text)} == {"mask_rate": 18}


def _block_after(text: str, label: str) -> str:
    """The table lines that follow ``label`` on its own line inside a code block of the page."""
    lines = text.split(label + "\n", 1)[1].splitlines()
    return "\n".join(line for line in lines[: next(i for i, x in enumerate(lines) if not x.startswith("|"))])


@pytest.mark.parametrize(("label", "recorded"), [("runs/ffn-plain/report.md", "compare-default.json"),
                                                 ("runs/ffn-swiglu/report.md", "compare-swiglu.json")])
def test_the_worked_ablation_quotes_its_recorded_runs(label, recorded):
    """Each gains table the page shows is the recorded run's, byte for byte, and the page gives that run's command
    (the README's run is the plain arm without a run_dir, which changes no number)."""
    source = json.loads((MEASURED / recorded).read_text(encoding="utf-8"))
    text = DOC.read_text(encoding="utf-8")
    assert _block_after(text, label) == source["results"]["tables"]["gains"]
    command = source["command"] if "run_dir=" in source["command"] else source["command"] + " run_dir=runs/ffn-plain"
    assert command in text
    for g in source["results"]["probe_gains"]:
        assert f"{g['arm']} {g['diff']:+.3f} [{g['ci_low']:+.3f}, {g['ci_high']:+.3f}]" in text.split(label[:-10])[-1]
