"""docs/blocks.md is what scripts/build_blocks_catalogue.py generates from the registries: every built-in position
scheme, norm, norm placement, FFN kind, activation, init and attention kernel, and the attention options, each with
its paper; a choice added to the code without a paper, or a paper for a choice that is gone, stops the script."""

import enum
from pathlib import Path

import pytest
from famlab.families import config as model_config
from famlab.families.config import ACTIVATIONS, FFN_KINDS, NORMS, POSITIONS

from tests.script_module import script_module

# each registered block kind's Name class and its registry (the others are enums)
REGISTERED = {model_config.PosScheme: POSITIONS, model_config.Norm: NORMS, model_config.FFNKind: FFN_KINDS,
              model_config.Activation: ACTIVATIONS}

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    with script_module("build_blocks_catalogue") as module:
        yield module


def test_docs_blocks_md_is_the_generated_catalogue(script):
    """Byte for byte: regenerate with ``python scripts/build_blocks_catalogue.py`` after changing a block choice."""
    assert (ROOT / "docs" / "blocks.md").read_text(encoding="utf-8") == script.render()
    assert script.main(["--check"]) == 0


def test_every_builtin_choice_of_every_catalogued_registry_has_its_line(script):
    """Each enum of families/config.py that names a block kind is catalogued, and each built-in member is one line
    starting with its value, its code comment and a paper."""
    catalogued = {cls for _, _, cls in script.SECTIONS}
    block_enums = {c for c in vars(model_config).values() if isinstance(c, type) and issubclass(c, enum.Enum)
                   and c.__module__ == model_config.__name__ and c.__name__ not in ("Family", "WandbMode")}
    assert block_enums <= catalogued | {model_config.Family} and set(REGISTERED) <= catalogued
    text = script.render()
    for _, key, cls in script.SECTIONS:
        comments = script.member_comments(cls)
        values = list(REGISTERED[cls].builtins()) if cls in REGISTERED else [m.value for m in cls]
        assert set(comments) >= set(values), cls
        for value in values:
            line = f"- `{value}`: {comments[value]}. Paper: {script.PAPERS[f'{key}={value}']}."
            assert line in text, line
    for name in script.ATTENTION_FIELDS:
        assert f"- `model.{name}` (default `" in text and name in script.field_comments(model_config.ModelConfig)


def test_a_choice_without_a_paper_or_a_paper_without_a_choice_stops_the_script(script, monkeypatch):
    """The registry's shape changes: the script refuses to write a catalogue that would be out of step."""
    papers = dict(script.PAPERS)
    monkeypatch.setattr(script, "PAPERS", {k: v for k, v in papers.items() if k != "pos=rope"})
    with pytest.raises(SystemExit, match="no paper for pos=rope"):
        script.render()
    monkeypatch.setattr(script, "PAPERS", {**papers, "norm=batchnorm": "Ioffe and Szegedy 2015"})
    with pytest.raises(SystemExit, match="norm=batchnorm"):
        script.render()


def test_a_position_scheme_or_norm_registered_at_run_time_is_not_catalogued(script):
    """``register_positions`` adds a ``model.pos`` value, ``NORMS.register`` a ``model.norm`` one; the catalogue lists
    the built-in choices only, so a plugin never changes docs/blocks.md."""
    from famlab.families.blocks.positions import register_positions, unregister_positions

    before = script.render()
    register_positions("catalogue_probe", lambda **_: None, length_bounded=False)
    NORMS.register("catalogue_probe", lambda dim, eps, bias: None)
    try:
        assert "catalogue_probe" in POSITIONS and "catalogue_probe" in NORMS and script.render() == before
    finally:
        unregister_positions("catalogue_probe")
        NORMS.unregister("catalogue_probe")
