"""The README's picture, caption and real-output block come from one recorded run of its main command.

``docs/measured/compare-default.json`` is a real run of the README's main command (recorded by
``scripts/readme_results.py record``); the README's block is what the script renders from it, the picture carries
the numbers it plots.
"""

import json
import re
from pathlib import Path

import pytest
from PIL import Image

from tests.script_module import script_module

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    with script_module("readme_results") as module:
        yield module


@pytest.fixture(scope="module")
def source(script):
    return json.loads(script.SOURCE.read_text(encoding="utf-8"))


def test_the_source_is_a_finished_run_of_the_readmes_main_command(source):
    """The README's two commands name `famlab compare`; the recorded run is that command with nothing added, every
    job finished, and a commit and machine to name."""
    assert source["command"] == "famlab compare"
    assert source["results"]["failed"] == []
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert source["machine"]["cpu_count"] and source["machine"]["torch"]
    assert {g["arm"] for g in source["results"]["gains"]} == {"bert", "gpt", "t5"}
    assert "/tmp/" not in json.dumps(source) and "/home/" not in json.dumps(source)


def test_the_readme_block_is_what_the_script_renders(script, source):
    """Byte for byte: after a new recorded run, ``python scripts/readme_results.py`` rewrites the block."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert script.rewrite(readme, script.block(source)) == readme
    assert script.main(["--check"]) == 0
    start = readme.index(script.START)
    assert start < readme.index("## Install")  # what a reader sees first


def test_the_caption_states_every_plotted_gain(script, source):
    """Each arm's gain, interval and Holm p in the caption are the recorded ones, to the printed precision."""
    text = script.caption(source)
    for key in ("gains", "probe_gains"):
        for g in source["results"][key]:
            assert f"{g['arm']} {g['diff']:+.3f} [{g['ci_low']:+.3f}, {g['ci_high']:+.3f}], Holm p {g['p_holm']:.2g}" \
                in text
    assert source["commit"][:7] in text and source["date"] in text


def test_the_picture_plots_the_recorded_gains(script, source):
    """The committed PNG carries the numbers it was drawn from; they are the source's."""
    with Image.open(script.PICTURE) as img:
        stored = json.loads(img.text[script.PNG_KEY])
    assert stored == json.loads(json.dumps(script.plotted(source)))


def test_the_drawing_records_what_it_plots(script, source, tmp_path):
    """Drawing from changed gains changes what the picture records (the check above is not vacuous)."""
    changed = json.loads(json.dumps(source))
    for key in ("diff", "ci_low", "ci_high"):
        changed["results"]["gains"][0][key] += 0.5
    path = script.draw(changed, tmp_path / "gain.png")
    with Image.open(path) as img:
        stored = json.loads(img.text[script.PNG_KEY])
    assert stored["gains"][0][1] == pytest.approx(source["results"]["gains"][0]["diff"] + 0.5)
    assert stored != json.loads(json.dumps(script.plotted(source)))

