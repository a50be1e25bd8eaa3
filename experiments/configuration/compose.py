"""Compose a config from presets and ``key=value`` overrides, validate it, and turn errors into one line.

Merge order (docs/config.md): schema defaults <- the chosen family's defaults (``famlab.families.faithful``:
block choices, objective, pooling) <- its preset <- the other presets, left to right <- overrides. The family is
whatever ``model.family`` ends up as, so it is resolved first from the presets and overrides, then the composition
is done in that order: ``famlab pretrain t5 tiny`` and ``famlab pretrain tiny model.family=t5`` give identical
configs.

A preset file may begin from another: ``extends: tiny`` (``cpu.yaml``) puts ``tiny`` just before it wherever it is
named (:func:`expand_presets`), so a preset means the same in every command."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from famlab.experiments.configuration.checks import check_fits_memory, check_inputs
from famlab.experiments.configuration.checks import exists as _exists
from famlab.experiments.configuration.config import (
    Config,
    ConfigInputError,
    FinetuneConfig,
    ObjectiveConfig,
    with_values,
)
from famlab.experiments.configuration.lightning_check import check_lightning_settings
from famlab.experiments.libraries.internals import config_child
from famlab.families import registry
from famlab.families.config import ModelConfig
from famlab.families.faithful import family_defaults, family_model_settings
from omegaconf import Container, DictConfig, ListConfig, Node, OmegaConf
from omegaconf.errors import OmegaConfBaseException

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PRESET_DIR = Path(__file__).resolve().parent.parent / "configs"  # experiments/configs


def schema() -> DictConfig:
    """The schema with its defaults, as a structured DictConfig.

    The ``model`` section comes from the ModelConfig *class* so its derived fields stay ``None``
    (an instance would have run ``__post_init__`` and frozen e.g. ``num_decoder_layers=0`` for GPT).
    """
    cfg = OmegaConf.structured(Config)
    _writable(cfg)
    cfg.model = OmegaConf.structured(ModelConfig)
    return cfg


def _writable(node: DictConfig | ListConfig) -> None:
    """Clear the read-only flag OmegaConf gives every node of a frozen dataclass, so presets and overrides merge into
    the schema; the frozen dataclasses that :func:`to_dataclass` builds from it stay frozen."""
    OmegaConf.set_readonly(node, None)
    children = node.values() if isinstance(node, DictConfig) else list(node)
    for child in children:
        if isinstance(child, DictConfig | ListConfig):
            _writable(child)


def preset_names() -> list[str]:
    """Names of the bundled presets (the ``.yaml`` files directly in ``experiments/configs/``)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def _named_yaml(name: str, folder: Path, kind: str, listing: str) -> Path:
    """A bundled ``<folder>/<name>.yaml`` or a path to a YAML file; ConfigInputError naming ``kind`` if neither."""
    if name.endswith((".yaml", ".yml")) or "/" in name:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ConfigInputError(f"{kind} file {name} does not exist")
        return path
    path = folder / f"{name}.yaml"
    if not path.is_file():
        raise ConfigInputError(f"unknown {kind} {name!r}; {listing} or a .yaml path")
    return path


def preset_path(name: str) -> Path:
    """Resolve a preset name (``tiny``) or a path to a YAML file; raise ConfigInputError if neither."""
    return _named_yaml(name, PRESET_DIR, "preset", f"valid presets: {', '.join(preset_names())}")


def preset_node(name: str) -> DictConfig:
    """A preset as a config layer. A registered family's name (``famlab.families.registry``) is its spec's preset
    (``FamilySpec.preset``, else the bundled ``<name>.yaml`` where there is one, else nothing) naming the family;
    any other name or path is a preset file (:func:`preset_path`)."""
    if name not in registry.family_names():
        return load_yaml(preset_path(name))
    source = registry.family(name).preset or (name if (PRESET_DIR / f"{name}.yaml").is_file() else None)
    node = load_yaml(preset_path(source)) if source is not None else OmegaConf.create({})
    if _family_of(node) != name:
        node = merge_configs(node, {"model": {"family": name}})
    return node


SWEEP_DIR = PRESET_DIR / "sweeps"


def sweep_names() -> list[str]:
    """Names of the bundled W&B sweep files (``experiments/configs/sweeps/*.yaml``)."""
    return sorted(p.stem for p in SWEEP_DIR.glob("*.yaml"))


def sweep_path(name: str) -> Path:
    """Resolve a sweep name (``pos_x_family``) or a path to a sweep file; raise ConfigInputError if neither."""
    return _named_yaml(name, SWEEP_DIR, "sweep", f"bundled sweeps: {', '.join(sweep_names())}")


def load_yaml(path: Path) -> DictConfig:
    """Load one YAML file as a DictConfig, with a one-line error naming the file and line."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigInputError(f"{path}{where}: invalid YAML ({getattr(e, 'problem', e)})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigInputError(f"{path}: cannot read ({e})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigInputError(f"{path}: a preset must be a mapping of config sections, got {type(data).__name__}")
    return OmegaConf.create(data)


def preset_extends(name: str) -> str | None:
    """The preset ``name``'s file says it extends (``extends: tiny``), or None."""
    parent = preset_node(name).get("extends")
    if parent is not None and (not isinstance(parent, str) or not parent.strip()):
        raise ConfigInputError(f"preset {name}: extends={parent!r} must name one preset (or a .yaml path)")
    return parent


def expand_presets(presets: list[str]) -> list[str]:
    """The presets as composed: each preceded by the chain it extends (``cpu`` -> ``tiny, cpu``), each preset once,
    at its first place.

    A preset composes over what it extends in every command, not only in ``famlab compare``: a preset is one bundle
    of settings, and ``famlab pretrain gpt cpu`` must build the model ``famlab compare cpu`` pretrains.

    Raises:
        ConfigInputError: an ``extends`` chain that loops or names no preset; an extended size preset named together
            with another size preset (``small cpu``: the second would silently replace the first's model).
    """
    out: list[str] = []
    for name in presets:
        chain = [name]
        while (parent := preset_extends(chain[0])) is not None:
            if parent in chain:
                raise ConfigInputError(f"preset {name}: extends chain {' -> '.join([*reversed(chain), parent])} "
                                       "loops")
            chain.insert(0, parent)
        out += [link for link in chain if link not in out]
    sizes = {p: preset_node(p).get("size") for p in out}
    for name in presets:
        parent = preset_extends(name)
        if parent is None or not sizes.get(parent):
            continue
        other = next((p for p, size in sizes.items() if size and size != sizes[parent]), None)
        if other is not None:
            raise ConfigInputError(f"preset {name} extends {parent} (size {sizes[parent]}); it cannot be combined "
                                   f"with preset {other} (size {sizes[other]})")
    return out


def family_settings(family: str) -> dict[str, Any]:
    """The family's faithful ``model`` settings (``famlab.families.faithful``, the one place they live) as a dict.

    Tests and benchmarks build their tiny networks as ``ModelConfig(**family_settings(family), dim=..., ...)`` so
    they build what ``famlab pretrain <family>`` builds.
    """
    if family not in registry.family_names():
        raise ConfigInputError(f"model.family={family!r} is not one of: {', '.join(registry.family_names())}")
    return family_model_settings(family)


def family_node(family: str) -> DictConfig:
    """The family's defaults as a config layer (model settings, objective, pooling), merged before its preset."""
    d = family_defaults(family)
    return OmegaConf.create(
        {"model": family_settings(family), "objective": {"name": d.objective}, "finetune": {"pooling": d.pooling}}
    )


def preset_description(path: Path) -> str:
    """The first comment line of a preset file (its one-line description)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


def parse_overrides(tokens: list[str]) -> DictConfig:
    """Parse ``key=value`` tokens (bare or ``--key=value``; a literal ``None`` means null).

    W&B's agent renders a Python ``None`` as the string ``None``; mapping it to null here
    lets ``Optional`` fields accept it. Each token is parsed on its own, so a malformed value (an unclosed
    list, a control character) or a key nested the wrong way fails with one line naming that token.
    """
    parsed, keys = [], schema()
    for token in tokens:
        token = token[2:] if token.startswith("--") else token
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise ConfigInputError(f"cannot parse override {token!r}; expected key=value")
        bad = next((c for c in token if unicodedata.category(c) in ("Cc", "Cs") and c != "\t"), None)
        if bad is not None:
            raise ConfigInputError(f"override {token!r} contains control character U+{ord(bad):04X}")
        _check_nesting(keys, token, key, value)
        if value.strip() == "None":
            value = "null"
        try:
            parsed.append(OmegaConf.from_dotlist([f"{key}={value}"]))
        except (OmegaConfBaseException, yaml.YAMLError) as e:
            problem = getattr(e, "problem", None) or _first_line(e)
            raise ConfigInputError(f"cannot parse override {token!r}: {problem}") from None
    return merge_configs(*parsed) if parsed else OmegaConf.create({})


def _check_nesting(keys: DictConfig, token: str, key: str, value: str) -> None:
    """A key below a plain value (``model.dim.x=1``) or a plain value for a section (``model=3``) names the token.

    Unknown keys are left to OmegaConf's own message, which suggests the nearest key.
    """
    node: Node | None = keys
    parts = key.split(".")
    for i, part in enumerate(parts):
        node = config_child(node, part)
        if node is None:
            return
        where = ".".join(parts[: i + 1])
        if i < len(parts) - 1 and not isinstance(node, DictConfig) and OmegaConf.get_type(node) is not dict:
            raise ConfigInputError(f"override {token!r}: {where} is a value, not a section")
    if isinstance(node, DictConfig) and not value.strip().startswith("{") and value.strip() not in ("None", "null"):
        raise ConfigInputError(f"override {token!r}: {key} is a section; set one of its keys, e.g. {key}.<key>=...")


@dataclass
class Composed:
    """A validated config plus what it was composed from."""

    cfg: Config  # real dataclasses (ModelConfig.__post_init__ has run)
    raw: DictConfig  # the merged structured DictConfig (before derived fields are filled)
    presets: list[str]  # preset names / paths in the order given
    explicit_model: dict[str, Any]  # model.* keys set by non-family presets and overrides (finetune checks)


def _family_of(node: DictConfig) -> str | None:
    value = OmegaConf.select(node, "model.family", default=None)
    if value is None:
        return None
    return value.value if isinstance(value, Enum) else str(value)


def compose(presets: list[str], overrides: list[str] | DictConfig, *, family: str | None = None,
            others_own: bool = False) -> Composed:
    """Compose and validate a config.

    Args:
        presets: preset names or YAML paths, in command-line order.
        overrides: ``key=value`` tokens (or an already parsed DictConfig).
        family: the family when no preset or override names one (finetune from a run passes the run's).
        others_own: an objective's own setting that the chosen objective does not declare is left out instead of
            refused (a comparison's arm: the setting is another arm's; ``raw`` keeps it, so the comparison can
            refuse one that no arm declares).

    Raises:
        ConfigInputError: (a ValueError) with one line naming the key, preset or file.
    """
    over = overrides if isinstance(overrides, DictConfig) else parse_overrides(overrides)
    loaded = [(name, preset_node(name)) for name in expand_presets(presets)]
    for _, node in loaded:
        node.pop("extends", None)  # composition order, not a config key
    resolved = family
    for _, node in loaded:
        resolved = _family_of(node) or resolved
    resolved = _family_of(over) or resolved
    resolved = resolved or ModelConfig.family.value
    if resolved not in registry.family_names():
        raise ConfigInputError(f"model.family={resolved!r} is not one of: {', '.join(registry.family_names())}")
    named = [n for n, _ in loaded if n in registry.family_names() and n != resolved]
    if named:
        raise ConfigInputError(f"preset {named[0]} contradicts model.family={resolved}; name one family only")

    own_preset = preset_node(resolved)
    others = []
    for name, node in loaded:
        if name == resolved:
            continue
        # `by_family.<family>`: a size preset's adjustment for one family, merged right after that preset
        by_family = node.pop("by_family", None) if isinstance(node, DictConfig) else None
        others.append(node)
        if by_family is not None and resolved in by_family:
            others.append(by_family[resolved])
    for layer in (own_preset, *others, over):
        lift_own_settings(layer)
    try:
        merged = merge_configs(schema(), family_node(resolved), own_preset, *others, over)
        explicit = merge_configs(*others, over) if others or over else OmegaConf.create({})
    except OmegaConfBaseException as e:
        raise ConfigInputError(format_omegaconf_error(e)) from None
    except TypeError as e:  # OmegaConf merging a mapping into a list field (or back) raises a plain TypeError
        raise ConfigInputError(f"{e} (a key=value override gives a mapping where the key holds a list, or the other "
                               f"way round: {' '.join(overrides)})") from None
    model_explicit = section_dict(explicit.get("model", OmegaConf.create({})))
    cfg = cross_checks(to_dataclass(merged), others_own=others_own)
    check_lightning_settings(cfg.trainer)  # before any work: a bad strategy must not cost a tokenizer and a W&B run
    check_inputs(cfg.data, cfg.model.vocab_size)
    check_fits_memory(cfg.model, cfg.data.tokenizer.vocab_size, cfg.trainer.accelerator)
    return Composed(cfg=cfg, raw=merged, presets=list(presets), explicit_model=model_explicit)


def lift_own_settings(layer: DictConfig) -> None:
    """Move each ``objective.<key>`` that famlab's objective section lacks and a registered objective declares as its
    own (``Entry.own``, objectives/registry.py) under ``objective.own``, where :func:`cross_checks` checks it against
    the chosen objective. Any other unknown key stays for OmegaConf to refuse, naming it."""
    from famlab.objectives.registry import own_setting_names  # lazy: keeps `famlab config` / `presets` light

    section = layer.get("objective") if isinstance(layer, DictConfig) else None
    if not isinstance(section, DictConfig):
        return
    known = {f.name for f in fields(ObjectiveConfig)}
    declared = own_setting_names()
    for key in [str(k) for k in section if str(k) not in known and str(k) in declared]:
        value = section.pop(key)
        OmegaConf.update(layer, f"objective.own.{key}", value, force_add=True)


def merge_configs(*layers: DictConfig | Mapping[str, Any]) -> DictConfig:
    """``OmegaConf.merge`` of mapping layers, the first a DictConfig: the DictConfig it returns, typed as one."""
    merged = OmegaConf.merge(*layers)
    assert isinstance(merged, DictConfig), "OmegaConf.merge gives the type of its first layer"
    return merged


def section_dict(node: DictConfig) -> dict[str, Any]:
    """``OmegaConf.to_container`` (unresolved) of a mapping node: a plain dict, its keys the node's (str) keys."""
    data = OmegaConf.to_container(node, resolve=False)
    assert isinstance(data, dict), "OmegaConf.to_container gives a dict for a DictConfig"
    return {str(key): value for key, value in data.items()}


def to_dataclass(merged: Container) -> Any:
    """``OmegaConf.to_object`` with errors turned into one line (runs ModelConfig's own checks)."""
    try:
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        raise ConfigInputError(format_omegaconf_error(e)) from None


def cross_checks(cfg: Config, *, others_own: bool = False) -> Config:
    """Checks that involve more than one key; each message names every key involved.

    Returns the config with the objective resolved: its name (the family's default when unset) and its own settings
    (the objective's defaults under the ones given; ``others_own``: those it does not declare left out).
    """
    family = cfg.model.family.value
    cfg = with_values(cfg, {"objective": _resolve_objective(cfg.objective, family, others_own)})
    if cfg.data.seq_len < 4:  # every objective needs room for a target (objectives.make_objective)
        raise ConfigInputError(f"data.seq_len={cfg.data.seq_len} must be >= 4")
    if cfg.data.seq_len > cfg.model.max_seq_len:
        raise ConfigInputError(
            f"data.seq_len={cfg.data.seq_len} exceeds model.max_seq_len={cfg.model.max_seq_len}; "
            "raise model.max_seq_len or lower data.seq_len"
        )
    if cfg.data.max_len > cfg.model.max_seq_len:
        raise ConfigInputError(
            f"data.max_len={cfg.data.max_len} exceeds model.max_seq_len={cfg.model.max_seq_len}; "
            "lower data.max_len or raise model.max_seq_len"
        )
    pooling = cfg.finetune.pooling.value if cfg.finetune.pooling is not None else None
    if pooling is not None and pooling not in registry.family(family).input_format.poolings:
        owners = " or ".join(n for n in registry.family_names() if pooling in registry.family(n).input_format.poolings)
        raise ConfigInputError(f"finetune.pooling={pooling} needs model.family={owners} (got model.family={family})")
    positive = ("data.batch_size", "trainer.max_steps", "trainer.val_check_interval", "trainer.accumulate_grad_batches")
    for key in positive:
        section, name = key.split(".")
        if getattr(getattr(cfg, section), name) < 1:
            raise ConfigInputError(f"{key}={getattr(getattr(cfg, section), name)} must be >= 1")
    for key in ("data.val_fraction", "data.test_fraction"):
        value = getattr(cfg.data, key.split(".")[1])
        if value is not None and not 0.0 < value < 1.0:
            raise ConfigInputError(f"{key}={value} must be in (0, 1)")
    if cfg.optim.lr <= 0 or cfg.finetune.lr <= 0:
        raise ConfigInputError(f"optim.lr={cfg.optim.lr} and finetune.lr={cfg.finetune.lr} must be > 0")
    if not 0.0 <= cfg.optim.min_lr_ratio <= 1.0:
        raise ConfigInputError(f"optim.min_lr_ratio={cfg.optim.min_lr_ratio} must be in [0, 1]")
    rates = cfg.objective.ul2_rates
    if len(rates) != 3 or not sum(rates) > 0:
        raise ConfigInputError(f"objective.ul2_rates={list(rates)} must be three rates (R, X, S) with a positive sum")
    if len(cfg.optim.betas) != 2:
        raise ConfigInputError(f"optim.betas={list(cfg.optim.betas)} must have two values")
    if not cfg.finetune.seeds:
        raise ConfigInputError("finetune.seeds=[] must name at least one seed")
    _check_finetune_grid(cfg.finetune)
    ft = cfg.finetune
    if ft.max_steps and ft.val_every and ft.val_every > ft.max_steps:  # no validation: nothing to select on
        raise ConfigInputError(f"finetune.val_every={ft.val_every} exceeds finetune.max_steps={ft.max_steps}: "
                               "no validation would run to choose a checkpoint; lower finetune.val_every")
    monitors = ("val/acc", "val/f1", "val/mcc", "val/loss")
    if cfg.finetune.monitor not in monitors:
        raise ConfigInputError(f"finetune.monitor={cfg.finetune.monitor} is not one of: {', '.join(monitors)}")
    if cfg.resume not in ("never", "auto") and not _exists(cfg.resume):
        raise ConfigInputError(f"resume={cfg.resume} is not never, auto or an existing checkpoint")
    return cfg


def _resolve_objective(objective: ObjectiveConfig, family: str, others_own: bool) -> ObjectiveConfig:
    """The objective section of ``family`` with ``objective.name`` (the family's default when unset) and its own
    settings checked (an unknown key or a wrong type is one line naming ``objective.<key>``) over their defaults."""
    from famlab.objectives.registry import check_pair, entry  # lazy: keeps `famlab config` / `presets` light

    name = objective.name or family_defaults(family).objective
    check_pair(family, name)
    chosen = entry(name, family)
    given = {k: v for k, v in objective.own.items() if not others_own or k in chosen.own}
    return with_values(objective, {"name": name, "own": chosen.own_values(given)})


def _check_finetune_grid(ft: FinetuneConfig) -> None:
    """The fine-tuning grid and probe settings: finite positive rates, at least one probe seed and strength."""
    import math

    for key in ("lr_grid", "head_lr_grid", "probe_c_grid"):
        if getattr(ft, key) is None:
            continue
        values = list(getattr(ft, key))
        if not values:
            unset = "" if key == "probe_c_grid" else f", or leave it unset (null) to use finetune.{key[:-5]}"
            raise ConfigInputError(f"finetune.{key}=[] is an empty grid: give at least one value{unset}")
        bad = [v for v in values if not (math.isfinite(v) and v > 0)]
        if bad:
            raise ConfigInputError(f"finetune.{key}={values}: every value must be finite and > 0 (got {bad[0]})")
    if ft.head_lr is not None and not (math.isfinite(ft.head_lr) and ft.head_lr > 0):
        raise ConfigInputError(f"finetune.head_lr={ft.head_lr} must be finite and > 0")
    if not ft.probe_seeds:
        raise ConfigInputError("finetune.probe_seeds=[] must name at least one random-init seed")
    if ft.batch_size is not None and ft.batch_size < 1:
        raise ConfigInputError(f"finetune.batch_size={ft.batch_size} must be >= 1")


def _first_line(e: BaseException) -> str:
    msg = getattr(e, "msg", None) or str(e)
    return str(msg).strip().splitlines()[0] if str(msg).strip() else type(e).__name__


def format_omegaconf_error(e: OmegaConfBaseException) -> str:
    """One line naming the key: OmegaConf's first line, with enum names turned into their values."""
    key = getattr(e, "full_key", None)
    msg = _first_line(e)
    match = re.match(r"Invalid value '(.*)', expected one of \[(.*)\]", msg)
    if match:
        valid = ", ".join(v.strip().lower() for v in match.group(2).split(","))
        return f"{key}={match.group(1)!r} is not one of: {valid}"
    if key and key not in msg:
        return f"{key}: {msg}"
    return msg


def to_plain(cfg: DataclassInstance | DictConfig) -> dict[str, Any]:
    """A plain nested dict (enums as their values) for YAML, JSON and W&B, of a config or one of its sections."""
    node = cfg if isinstance(cfg, DictConfig) else OmegaConf.structured(cfg)
    return _plain(OmegaConf.to_container(node, resolve=True))


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_yaml(cfg: DataclassInstance | DictConfig) -> str:
    """The config as YAML with enum values (``family: t5``, not ``T5``), keys in schema order."""
    return yaml.safe_dump(to_plain(cfg), sort_keys=False)


def flatten(data: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """Nested dict -> dotted keys (``{"model.dim": 64}``); W&B logs the config once, flat (wandb #5477)."""
    out: dict[str, object] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):  # an empty mapping has no keys (objective.own when no setting is the objective's)
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def split_args(args: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Split tokens into presets, ``key=value`` overrides (bare or ``--key=value``) and ``--flags``."""
    presets, overrides, flags = [], [], []
    for token in args:
        if "=" in token and not token.startswith("=") and "/" not in token.split("=", 1)[0]:
            overrides.append(token)
        elif token.startswith("--"):
            flags.append(token)
        else:
            presets.append(token)
    return presets, overrides, flags
