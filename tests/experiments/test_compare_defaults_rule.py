"""The one statement of when ``famlab compare``'s own defaults apply (compare_defaults.RULE) is true of the configs
the comparison composes, and it is what ``famlab compare --help``, the module docstring and docs/config.md say."""

import functools
import re
from pathlib import Path

import famlab.experiments
import pytest
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.configuration import compare_defaults
from famlab.experiments.configuration.compare_defaults import RULE, TINY_DEFAULTS, preset_keys
from famlab.experiments.steps.comparison import compose_all

DOCS = Path(__file__).resolve().parents[2] / "docs"
CONFIGS = Path(famlab.experiments.__file__).parent / "configs"
DEFAULTS = {d.split("=", 1)[0]: yaml.safe_load(d.split("=", 1)[1]) for d in TINY_DEFAULTS}


def words(text: str) -> str:
    """Text as a reader sees it: markup (backticks, asterisks) and line breaks gone, spaces single."""
    return " ".join(re.sub(r"[`*]", "", text).split())


def value(cfg: object, key: str) -> object:
    return functools.reduce(getattr, key.split("."), cfg)


def applied(presets: list[str]) -> set[str]:
    """The default keys whose composed value, in the comparison's config and every arm's, is the default's."""
    base, cfgs = compose_all(presets, [])
    return {key for key, default in DEFAULTS.items()
            if all(value(cfg, key) == default for cfg in [base, *cfgs.values()])}


@pytest.mark.parametrize("presets", [[], ["tiny"], ["cpu"], ["small"]])
def test_the_rule_is_what_the_comparison_composes(presets):
    """By the rule: at the tiny size (nothing named, tiny, cpu) every default applies but those whose key a named
    non-size preset sets (cpu.yaml's); at small none. Checked on the configs compose_all builds, not on the code
    that chooses the defaults; a key where the default and the preset agree would hide a default, so none may."""
    tiny_size = presets in ([], ["tiny"], ["cpu"])
    named = set().union(*(preset_keys(p) for p in presets if p not in compare_defaults.SIZES))
    expected = {key for key in DEFAULTS if key not in named} if tiny_size else set()
    assert applied(presets) == expected
    if presets == ["cpu"]:
        assert len(expected) == 7 and len(DEFAULTS) == 11  # cpu.yaml sets 4 of the 11 keys
    assert compare_defaults.comparison_presets(presets, [])[1] == [f"{k}={TINY_DEFAULTS_BY_KEY[k]}" for k in
                                                                   DEFAULTS if k in expected]


TINY_DEFAULTS_BY_KEY = dict(d.split("=", 1) for d in TINY_DEFAULTS)


def test_famlab_compare_tiny_pretrains_the_defaults_steps_not_tiny_yamls():
    """The rule's example: the numbers it names are the default's and tiny.yaml's, and the composed one is the
    default's."""
    steps = re.search(r"pretrains the defaults' ([\d,]+) steps, not tiny\.yaml's ([\d,]+)", RULE)
    assert steps is not None
    default, preset = (int(n.replace(",", "")) for n in steps.groups())
    tiny = yaml.safe_load((CONFIGS / "tiny.yaml").read_text())
    assert (default, preset) == (DEFAULTS["trainer.max_steps"], tiny["trainer"]["max_steps"])
    base, cfgs = compose_all(["tiny"], [])
    assert {c.trainer.max_steps for c in [base, *cfgs.values()]} == {default}
    over, _ = compose_all(["tiny"], ["trainer.max_steps=7"])  # an override wins
    assert over.trainer.max_steps == 7


def test_the_help_the_docstring_and_config_md_state_the_rule(capsys):
    """One statement, said the same way in every place a user or a reader of the code meets it; the README links to
    docs/config.md instead of restating it, and no page keeps the old 'no size preset' claim."""
    assert cli.main(["compare", "--help"]) == 0
    out = capsys.readouterr().out
    assert words(RULE) in words(out) and all(d in out for d in TINY_DEFAULTS)
    assert words(RULE) in words(compare_defaults.__doc__ or "")
    assert words(RULE) in words((DOCS / "config.md").read_text(encoding="utf-8"))
    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "docs/config.md#famlab-compares-defaults" in readme
    for page in [DOCS.parent / "README.md", *DOCS.glob("*.md")]:
        assert "with no size preset" not in words(page.read_text(encoding="utf-8")).lower(), page.name
