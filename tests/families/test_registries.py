"""One registry shape for every table of named choices (families/registries.py): the same rules for families,
position schemes, objectives, norms, activations and FFN kinds, and no writes into ``enum``'s member tables."""

import enum
import pickle

import pytest
from famlab.families import config as model_config
from famlab.families.blocks.feedforward import ACTIVATIONS, FFN_KINDS
from famlab.families.blocks.norms import NORMS
from famlab.families.blocks.positions import register_positions, unregister_positions
from famlab.families.config import FAMILIES, POSITIONS, Activation, ConfigError, Family, FFNKind, Norm, PosScheme
from famlab.families.formats import Arch
from famlab.families.registries import Name, Registry
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.registry import OBJECTIVES_BY_ARCH

ALL = {"model.family": FAMILIES, "model.pos": POSITIONS, "model.norm": NORMS, "model.activation": ACTIVATIONS,
       "model.ffn": FFN_KINDS, **{f"objective.name ({arch.value})": OBJECTIVES_BY_ARCH[arch] for arch in Arch}}


def test_a_registry_registers_looks_up_and_unregisters_by_one_rule():
    registry: Registry[int] = Registry("model.thing", ConfigError)
    registry.register("one", 1)
    registry.seal()
    assert registry.register("two", 2) == 2 and registry.get("two") == 2 and "two" in registry
    assert (registry.names(), registry.builtins(), registry.added()) == (("one", "two"), ("one",), ("two",))
    assert registry.origin("two") == __name__ and registry.origin("one") is None  # who registered it
    with pytest.raises(ConfigError) as err:
        registry.get("three")
    assert str(err.value) == "model.thing='three' is not one of: one, two"
    with pytest.raises(ConfigError, match="model.thing=two is registered already"):
        registry.register("two", 3)
    with pytest.raises(ConfigError, match="lower-case identifier"):
        registry.register("Two words", 3)
    registry.unregister("two")
    assert registry.names() == ("one",) and registry.added() == ()


@pytest.mark.parametrize("key", list(ALL))
def test_every_registry_refuses_to_unregister_a_builtin_or_an_unknown_name(key):
    registry = ALL[key]
    builtin = registry.builtins()[0]
    with pytest.raises(ValueError, match=f"{builtin} is built in"):
        registry.unregister(builtin)
    with pytest.raises(ValueError, match="nope is not registered"):
        registry.unregister("nope")
    with pytest.raises(ValueError, match=r"='nope' is not one of: " + ", ".join(registry.names())):
        registry.get("nope")
    assert registry.added() == () and builtin in registry


def test_norms_activations_and_ffn_kinds_are_registered_names_with_their_builtin_constants():
    """norm, activation and FFN kind are names checked against their registry (as family and pos): each built-in
    constant of its ``Name`` class is one registered built-in name, in order, and nothing else is built in."""
    for cls, registry in ((Norm, NORMS), (Activation, ACTIVATIONS), (FFNKind, FFN_KINDS)):
        assert not issubclass(cls, enum.Enum) and issubclass(cls, Name), cls
        constants = [v for k, v in vars(cls).items() if k.isupper() and isinstance(v, cls)]
        assert registry.builtins() == tuple(constants) and registry.added() == (), cls
    assert [FFN_KINDS.get(k).gated for k in ("plain", "gated")] == [False, True]
    assert [FFNKind.PLAIN.gated, FFNKind.GATED.gated] == [False, True]


def test_builtin_position_schemes_are_registry_entries_with_their_length_bound():
    assert POSITIONS.builtins() == ("learned", "sinusoidal", "rope", "alibi", "t5_bias", "none")
    assert [s for s in POSITIONS.builtins() if PosScheme(s).length_bounded] == ["learned", "sinusoidal"]
    assert FAMILIES.builtins() == ("bert", "gpt", "t5") and POSITIONS.added() == FAMILIES.added() == ()


def members() -> dict[str, list[str]]:
    return {name: [m.value for m in cls] for name, cls in vars(model_config).items()
            if isinstance(cls, type) and issubclass(cls, enum.Enum) and cls.__module__ == model_config.__name__}


def test_registering_a_scheme_writes_no_enum_and_its_name_is_a_plain_string():
    """The extensible kinds are names checked against a registry, not Enums grown at run time: registering changes
    no enum of families/config.py, and the name pickles as a str subclass that any process can read back."""
    assert not any(issubclass(cls, enum.Enum) for cls in (Family, PosScheme, Norm, Activation, FFNKind))
    before = members()
    scheme = register_positions("probe_scheme", lambda **_: None, length_bounded=True)
    try:
        assert members() == before
        assert isinstance(scheme, Name) and scheme == "probe_scheme" and scheme.value == "probe_scheme"
        assert scheme.length_bounded and POSITIONS.added() == ("probe_scheme",)
        assert pickle.loads(pickle.dumps(scheme)) == scheme and f"{scheme}" == "probe_scheme"
    finally:
        unregister_positions("probe_scheme")
    assert "probe_scheme" not in POSITIONS and members() == before
    with pytest.raises(ConfigError, match="model.pos='probe_scheme' is not one of"):
        _ = PosScheme("probe_scheme").length_bounded


def test_objective_registries_raise_the_objective_error():
    with pytest.raises(ObjectiveError, match="objective.name='nope' is not one of: mlm, span_mlm"):
        OBJECTIVES_BY_ARCH[Arch.ENCODER].get("nope")


def test_famlab_presets_lists_each_registry_marking_what_was_added_and_by_whom(capsys):
    """``famlab presets``: one row per registry, the built-in names, then ``+ name (module)`` for each one added."""
    from famlab.experiments.commands import cli

    def rows() -> dict[str, str]:
        assert cli.main(["presets"]) == 0
        out = capsys.readouterr().out.split("registered choices", 1)[1].splitlines()[1:]
        return {line.split()[0]: line.split(None, 1)[1] for line in out if line.startswith("  ")}

    before = rows()
    assert before["model.pos"] == "learned, sinusoidal, rope, alibi, t5_bias, none"
    assert set(before) == {"model.family", "model.pos", "objective.name", "model.norm", "model.activation", "model.ffn"}
    register_positions("probe_scheme", lambda **_: None, length_bounded=False)
    try:
        after = rows()
    finally:
        unregister_positions("probe_scheme")
    assert after == {**before, "model.pos": f"{before['model.pos']}, + probe_scheme ({__name__})"}
