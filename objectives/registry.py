"""The objective registry: architecture -> objective name -> the class that builds it and the settings it reads.

Objectives are registered per architecture (:data:`BY_ARCH`: a masked-LM encoder, a causal decoder, an
encoder-decoder); a family trains with its architecture's (``famlab.families.registry``: a family's spec names its
``arch``), so a new family of a known architecture needs no line here. :data:`REGISTRY` is the family x objective
table this gives, a live view over the registered families. ``make_objective``, the family x objective pairs
(``OBJECTIVES``, ``check_pair``), the CLI's ``famlab presets`` listing, ``famlab compare``'s objective arms and the
config checks all read it; each family's default objective is its spec's (``famlab.families.faithful`` for the
built-in ones). Adding an objective is one module (its ``Objective`` subclass), one line per architecture below and
its tests (docs/architecture.md); code outside famlab adds one with :func:`register_objective` instead of the line.
Each architecture's objectives are one :class:`~famlab.families.registries.Registry` (:data:`OBJECTIVES_BY_ARCH`),
the built-in ones registered into it as any other is.

An objective reads the ``objective.*`` settings famlab declares (:data:`SETTINGS`) and may declare its own
(:attr:`Entry.own`: a default and a type each): ``objective.<setting>=...`` sets one when that objective is chosen,
checked like famlab's keys, and its builder gets it with the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypedDict, cast

import torch
from famlab.families.formats import Arch
from famlab.families.registries import Registry
from famlab.families.registry import family, family_names
from famlab.objectives.corruption import t5_lengths
from famlab.objectives.denoisers import UL2, GPTPrefixLM, GPTSpan, SpanMaskedLM, T5PrefixLM
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.objective import CausalLM, MaskedLM, Objective, ObjectiveRules, SpanCorruption
from famlab.objectives.tokens import TokenIds

if TYPE_CHECKING:
    from typing_extensions import Unpack


class ObjectiveSettings(TypedDict, total=False):
    """``objective.*`` settings by name (:data:`SETTINGS` holds every one, with its default)."""

    mask_rate: float
    noise_density: float
    mean_span: float
    prefix_fraction: float | None
    ul2_rates: tuple[float, ...]
    ul2_x_density: float
    ul2_x_mean_span: float
    span_p: float
    max_span: int


# Every ``objective.*`` setting and its default (experiments' ``ObjectiveConfig`` takes its defaults from here).
_DEFAULTS: ObjectiveSettings = {
    "mask_rate": 0.15,  # MLM / span-MLM masking rate
    "noise_density": 0.15,  # span corruption (also UL2's R denoiser)
    "mean_span": 3.0,
    "prefix_fraction": None,  # prefix LM split as a fraction of the sequence; None = uniform per row
    "ul2_rates": (0.4, 0.4, 0.2),  # UL2 mixing rates of the R, X and S denoisers
    "ul2_x_density": 0.5,  # UL2's X (extreme) denoiser
    "ul2_x_mean_span": 8.0,
    "span_p": 0.2,  # SpanBERT's geometric span-length parameter
    "max_span": 10,  # and its cap
}
SETTINGS: Mapping[str, Any] = MappingProxyType(_DEFAULTS)  # read-only; per-key types: ObjectiveSettings

# (the tokenizer's special ids, seq_len, generator, every objective.* setting) -> the objective
Builder = Callable[[TokenIds, int, "torch.Generator | None", ObjectiveSettings], Objective]


@dataclass(frozen=True)
class Setting:
    """A setting an objective declares for itself (:attr:`Entry.own`): ``objective.<name>=<value>`` when it is chosen.

    Attributes:
        default: its value when unset.
        type: ``bool``, ``int``, ``float`` (an int is taken as a float) or ``str``.
    """

    default: Any
    type: type

    def check(self, key: str, value: object) -> Any:
        """``value`` as the setting's type; an ObjectiveError naming ``objective.<key>`` when it is not one."""
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            raise ObjectiveError(f"objective.{key}={value!r} must be of type {self.type.__name__} "
                                 f"(got {type(value).__name__})")
        return value


@dataclass(frozen=True)
class Entry:
    """One family x objective pair: its class, the ``objective.*`` settings it reads, how it is built and the
    settings it declares for itself (``own``: name -> :class:`Setting`; its builder gets them with the others)."""

    cls: type[Objective]
    settings: tuple[str, ...]
    build: Builder
    own: Mapping[str, Setting] = field(default_factory=dict)

    def defaults(self) -> dict[str, Any]:
        """The settings this pair reads, with their defaults (its own settings' too)."""
        return {key: SETTINGS[key] for key in self.settings} | {key: s.default for key, s in self.own.items()}

    def own_values(self, given: Mapping[str, object]) -> dict[str, Any]:
        """Its own settings: ``given``'s values checked (an ObjectiveError naming an unknown key or a wrong type), the
        defaults for the rest."""
        unknown = sorted(set(given) - set(self.own))
        if unknown:
            known = ", ".join(self.own) or "none"
            raise ObjectiveError(f"objective.{unknown[0]} is not a setting of objective.name={self.cls.name} "
                                 f"(its own settings: {known})")
        return {key: s.check(key, given[key]) if key in given else s.default for key, s in self.own.items()}


def _ul2(decoder_only: bool) -> Builder:
    def build(ids: TokenIds, seq_len: int, generator: torch.Generator | None, s: ObjectiveSettings) -> Objective:
        t5_lengths(seq_len, s["noise_density"], s["mean_span"])
        if not 0.0 < s["ul2_x_density"] <= 0.5 or s["ul2_x_mean_span"] < 1:
            raise ObjectiveError(
                f"objective.ul2_x_density={s['ul2_x_density']} must be in (0, 0.5] and "
                f"objective.ul2_x_mean_span={s['ul2_x_mean_span']} >= 1"
            )
        return UL2(ids, seq_len, decoder_only=decoder_only, rates=s["ul2_rates"],
                   r=(s["noise_density"], s["mean_span"]), x=(s["ul2_x_density"], s["ul2_x_mean_span"]),
                   prefix_fraction=s["prefix_fraction"], generator=generator)

    return build


def _gpt_span(ids: TokenIds, seq_len: int, generator: torch.Generator | None, s: ObjectiveSettings) -> Objective:
    t5_lengths(seq_len, s["noise_density"], s["mean_span"])  # same setting checks as T5's
    return GPTSpan(ids, seq_len, s["noise_density"], s["mean_span"], generator)


_UL2 = ("noise_density", "mean_span", "prefix_fraction", "ul2_rates", "ul2_x_density", "ul2_x_mean_span")

# The registry: one Registry per architecture. Order within an architecture is the listing order (`famlab presets`); a
# family's default comes first in OBJECTIVES whatever its place here. The pairs beyond each family's own objective:
# objectives/denoisers.py. :func:`register_objective` adds one from outside famlab; BY_ARCH is a read-only view.
OBJECTIVES_BY_ARCH: Mapping[Arch, Registry[Entry]] = MappingProxyType(
    {arch: Registry("objective.name", ObjectiveError) for arch in Arch})
_BUILTIN: dict[Arch, dict[str, Entry]] = {
    Arch.ENCODER: {
        "mlm": Entry(MaskedLM, ("mask_rate",), lambda ids, n, g, s: MaskedLM(ids, n, s["mask_rate"], g)),
        "span_mlm": Entry(SpanMaskedLM, ("mask_rate", "span_p", "max_span"),
                          lambda ids, n, g, s: SpanMaskedLM(ids, n, s["mask_rate"], s["span_p"], s["max_span"], g)),
    },
    Arch.DECODER: {
        "clm": Entry(CausalLM, (), lambda ids, n, g, s: CausalLM(ids, n, g)),
        "prefix_lm": Entry(GPTPrefixLM, ("prefix_fraction",),
                           lambda ids, n, g, s: GPTPrefixLM(ids, n, s["prefix_fraction"], g)),
        "span": Entry(GPTSpan, ("noise_density", "mean_span"), _gpt_span),
        "ul2": Entry(UL2, _UL2, _ul2(decoder_only=True)),
    },
    Arch.ENCODER_DECODER: {
        "span": Entry(SpanCorruption, ("noise_density", "mean_span"),
                      lambda ids, n, g, s: SpanCorruption(ids, n, s["noise_density"], s["mean_span"], g)),
        "prefix_lm": Entry(T5PrefixLM, ("prefix_fraction",),
                           lambda ids, n, g, s: T5PrefixLM(ids, n, s["prefix_fraction"], g)),
        "ul2": Entry(UL2, _UL2, _ul2(decoder_only=False)),
    },
}
for _arch, _entries in _BUILTIN.items():
    for _name, _entry in _entries.items():
        OBJECTIVES_BY_ARCH[_arch].register(_name, _entry)
    OBJECTIVES_BY_ARCH[_arch].seal()
BY_ARCH: Mapping[Arch, Mapping[str, Entry]] = MappingProxyType(
    {arch: registry.view() for arch, registry in OBJECTIVES_BY_ARCH.items()})


def register_objective(arch: Arch, name: str, entry: Entry) -> Entry:
    """Add objective ``name`` for every family of architecture ``arch`` (``objective.name``, ``compare.objectives``);
    returns ``entry``. The objective class's ``name`` must be ``name``, the settings it reads must be ``objective.*``
    settings (:data:`SETTINGS`), and the ones it declares for itself (``entry.own``) must not be.

    Raises:
        ValueError: ``name`` is registered already for ``arch``, or ``entry`` does not fit it.
    """
    if name in OBJECTIVES_BY_ARCH[arch]:
        raise ValueError(f"objective {name} is registered already for the {arch.value} architecture")
    if entry.cls.name != name:
        raise ValueError(f"objective {name}: its class {entry.cls.__name__} is named {entry.cls.name!r}")
    unknown = sorted(set(entry.settings) - set(SETTINGS))
    if unknown:
        raise ValueError(f"objective {name} reads {unknown}, not objective settings (known: {', '.join(SETTINGS)})")
    taken = sorted(set(entry.own) & {*SETTINGS, "name", "own"})
    if taken:
        raise ValueError(f"objective {name} declares objective.{taken[0]} as its own, which famlab's objective "
                         f"section has already")
    return OBJECTIVES_BY_ARCH[arch].register(name, entry)


def unregister_objective(arch: Arch, name: str) -> None:
    """Remove an objective :func:`register_objective` added (a built-in one or an unknown one is refused)."""
    registry = OBJECTIVES_BY_ARCH[arch]
    if name in registry.builtins():
        raise ValueError(f"objective {name} is built in; only a registered objective can be removed")
    if name not in registry:
        raise ValueError(f"objective {name} is not registered for the {arch.value} architecture")
    registry.unregister(name)


def own_setting_names() -> set[str]:
    """Every setting a registered objective declares for itself (``objective.<name>`` keys beyond famlab's)."""
    return {key for registry in OBJECTIVES_BY_ARCH.values() for name in registry for key in registry.get(name).own}


class FamilyTable(Mapping[str, Mapping[str, Entry]]):
    """``{family: {objective: Entry}}`` over the registered families, in registration order: each family's entries are
    its architecture's (:data:`BY_ARCH`). Live: a family registered later is in it."""

    def __getitem__(self, name: str) -> Mapping[str, Entry]:
        if name not in family_names():
            raise KeyError(name)
        return BY_ARCH[family(name).arch]

    def __iter__(self) -> Iterator[str]:
        return iter(family_names())

    def __len__(self) -> int:
        return len(family_names())


REGISTRY: Mapping[str, Mapping[str, Entry]] = FamilyTable()


def default_objective(family_name: str) -> str:
    """The objective that trains ``family_name`` when ``objective.name`` is unset (its spec's defaults)."""
    return family(family_name).defaults.objective


def objectives_of(family: str) -> list[str]:
    """The objectives that can train ``family``, its default first."""
    default = default_objective(family)
    return [default] + [name for name in REGISTRY[family] if name != default]


def families_of(name: str) -> list[str]:
    """The families objective ``name`` can train, in registry order."""
    return [family for family, entries in REGISTRY.items() if name in entries]


def valid_pairs() -> str:
    """The valid family x objective pairs as one readable string, e.g. `bert x mlm, gpt x clm, t5 x span`."""
    return ", ".join(f"{family} x {objective}" for family in REGISTRY for objective in objectives_of(family))


def check_pair(family: str, objective: str) -> None:
    """Raise `ObjectiveError` (one line, listing the valid pairs) unless `objective` can train `family`."""
    if family not in family_names():
        raise ObjectiveError(f"model.family={family} is not one of {sorted(REGISTRY)}; valid pairs: {valid_pairs()}")
    if objective not in REGISTRY[family]:
        raise ObjectiveError(
            f"objective.name={objective} cannot train model.family={family}; valid pairs: {valid_pairs()}"
        )


def entry(name: str, family: str | None) -> Entry:
    """The registry entry of ``name`` for ``family``; without a family, the one family that registers ``name``
    or the family whose default it is (``span`` is T5's)."""
    families = families_of(name)
    if not families:
        known = sorted({n for entries in REGISTRY.values() for n in entries})
        raise ObjectiveError(f"objective.name={name} is not one of {known}")
    if family is None:
        owners = [f for f in families if default_objective(f) == name] if len(families) > 1 else families
        if len(owners) != 1:
            raise ObjectiveError(f"objective.name={name} needs model.family {' or '.join(families)}, got {family}")
        family = owners[0]
    if family not in families:
        raise ObjectiveError(f"objective.name={name} needs model.family {' or '.join(families)}, got {family}")
    return REGISTRY[family][name]


def arch_rules(arch: Arch, name: str) -> ObjectiveRules:
    """The rules objective ``name`` declares on a network of ``arch`` (``Objective.rules_on``): how scoring,
    generation and the report read a network it trained.

    Raises:
        ObjectiveError: ``name`` is not registered for ``arch``.
    """
    found = BY_ARCH[arch].get(name)
    if found is None:
        raise ObjectiveError(f"objective.name={name} is not one of the {arch.value} objectives {sorted(BY_ARCH[arch])}")
    return found.cls.rules_on(arch)


def rules_of(family_name: str, name: str | None = None) -> ObjectiveRules:
    """The rules of objective ``name`` (None: the family's default) on ``family_name``'s network, looked up through
    the family x objective table (:func:`entry`)."""
    name = name or default_objective(family_name)
    return entry(name, family_name).cls.rules_on(family(family_name).arch)


def make_objective(
    name: str,
    ids: TokenIds,
    *,
    seq_len: int,
    generator: torch.Generator | None = None,
    family: str | None = None,
    **settings: Unpack[ObjectiveSettings],
) -> Objective:
    """Build the objective `name` for `family` and sequences of `seq_len` tokens.

    `span`, `prefix_lm` and `ul2` differ by family (decoder-only vs encoder-decoder), so pass `family`;
    without it `span` means T5's and the others need it. See `famlab.objectives.denoisers` for the new pairs.

    Args:
        name: objective name (`objective.name`), one of the registry's.
        ids: the tokenizer's special ids.
        seq_len: tokens the network reads per sequence (encoder side for T5).
        generator: randomness for the corruption; `None` uses torch's global generator.
        family: a registered family (`bert` | `gpt` | `t5` built in).
        settings: `objective.*` settings (:data:`SETTINGS` names them with their defaults; ``Entry.own`` the ones an
            objective declares for itself, checked against their types); each pair reads its own.
    """
    extra = set(settings) - set(SETTINGS)
    own = entry(name, family).own if extra else {}
    unknown = sorted(extra - set(own))
    if unknown:
        known = ", ".join([*SETTINGS, *own])
        raise ObjectiveError(f"objective.{unknown[0]} is not an objective setting (known: {known})")
    if seq_len < 4:
        raise ObjectiveError(f"sequence length {seq_len} is too short to train on (need at least 4)")
    found = entry(name, family)
    given: dict[str, Any] = dict(settings)
    own_values = found.own_values({key: given.pop(key) for key in extra})
    values = cast(ObjectiveSettings, {**_DEFAULTS, **given, **own_values})
    if values["prefix_fraction"] is not None and not 0.0 < values["prefix_fraction"] < 1.0:
        raise ObjectiveError(f"objective.prefix_fraction={values['prefix_fraction']} must be in (0, 1) or None")
    return found.build(ids, seq_len, generator, values)


def objectives_table() -> dict[str, list[str]]:
    """``{family: [objective, ...]}``, each family's default first (``OBJECTIVES``)."""
    return {family: objectives_of(family) for family in REGISTRY}

