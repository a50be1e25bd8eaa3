"""Where a fine-tune's network, weights and tokenizer come from (``init=``): a run directory or checkpoint, a
Hugging Face model (``hf:``) or a scratch network; the composed config checked against what it loads."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from famlab.datamodules.tasks import Task
from famlab.datamodules.tokenizer import TokenizerBundle
from famlab.experiments.configuration.compose import PRESET_DIR, compose, cross_checks, parse_overrides, to_dataclass
from famlab.experiments.configuration.config import Config, ConfigInputError, TokenizerKind, with_values
from famlab.experiments.configuration.plans import TaskData
from famlab.experiments.configuration.run_files import CHECKPOINTS, CONFIG, LAST_CKPT
from famlab.experiments.configuration.task import load_configured_task
from famlab.experiments.plumbing.rundir import RunDir
from famlab.families import Network, build_network, from_hf, registry
from famlab.families.config import ModelConfig
from famlab.families.faithful import family_defaults
from famlab.families.hf import hf_pooler_state
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger("famlab")


@dataclasses.dataclass
class Init:
    """Where the fine-tuned network starts from."""

    kind: str  # run | hf | scratch
    run_dir: Path | None = None
    checkpoint: Path | None = None
    hf: str | None = None


def parse_init(init: str | None) -> Init:
    """``init=`` -> :class:`Init`; a path that holds no run fails naming the key."""
    if not init:
        raise ConfigInputError("init= is required: <run_dir> | <checkpoint.ckpt> | hf:<name or dir> | scratch")
    if init == "scratch":
        return Init("scratch")
    if init.startswith("hf:"):
        return Init("hf", hf=init[3:])
    path = Path(init).expanduser()
    if path.is_file() and path.suffix == ".ckpt":
        run_dir = path.parent.parent if path.parent.name == CHECKPOINTS else path.parent
        ckpt = path
    elif path.is_dir():
        run_dir, ckpt = path, RunDir(path).last_checkpoint
        if not ckpt.is_file():
            raise ConfigInputError(f"init={init}: no {CHECKPOINTS}/{LAST_CKPT} in this run directory")
    else:
        raise ConfigInputError(f"init={init} is not a run directory, a .ckpt file, hf:<name> or scratch")
    for file in (RunDir(run_dir).config_file, RunDir(run_dir).tokenizer_file):
        if not file.is_file():
            raise ConfigInputError(f"init={init}: {file} is missing (not a famlab run directory)")
    return Init("run", run_dir=run_dir, checkpoint=ckpt)


def _check_contradictions(explicit: Mapping[str, object], loaded: ModelConfig, source: str) -> None:
    plain = {f.name: getattr(loaded, f.name) for f in dataclasses.fields(loaded)}
    bad = []
    for key, value in explicit.items():
        have = plain.get(key)
        have = getattr(have, "value", have)  # an enum compares by its value
        # vocab_size may grow with a tokenizer; dropout is a training setting, not part of the weights
        if key in plain and key not in ("vocab_size", "dropout") and value != have:
            bad.append(f"model.{key}={value} (the model has {have})")
    if bad:
        raise ConfigInputError(f"init={source} fixes the model; these settings contradict it: {', '.join(bad)}")


def compose_finetune(presets: list[str], overrides: list[str]) -> tuple[Config, Init]:
    """Compose the config, taking the model section from ``init`` when it points at a run."""
    init_value = parse_overrides(overrides).get("init")
    if init_value is None:  # init from a preset file: compose once to read it
        init_value = compose(presets, overrides).cfg.init
    init = parse_init(init_value)
    if init.kind != "run":
        return compose(presets, overrides).cfg, init
    assert init.run_dir is not None
    run_cfg = RunDir(init.run_dir).config_data()
    run_model = run_cfg["model"]
    size = run_cfg.get("size")
    chosen = presets  # what the user named: the model settings in these must agree with the run's
    if not presets and size and (PRESET_DIR / f"{size}.yaml").is_file():
        presets = [size]  # the run's size preset brings its fine-tuning budget and batch size along
    composed = compose(presets, overrides, family=run_model["family"])
    stated = composed if presets == chosen else compose(chosen, overrides, family=run_model["family"])
    if composed.cfg.model.family.value != run_model["family"]:  # a family preset / override names another family
        raise ConfigInputError(f"init={init_value} is a {run_model['family']} model; "
                               f"model.family={composed.cfg.model.family.value} contradicts it")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(ModelConfig), run_model)
        assert isinstance(merged, DictConfig)
        loaded = to_dataclass(merged)
    except ValueError as e:
        raise ConfigInputError(f"init={init_value}: {CONFIG} has a bad model section ({e})") from None
    _check_contradictions(stated.explicit_model, loaded, str(init_value))
    if "dropout" in composed.explicit_model:  # model.dropout=... fine-tunes with that rate (finetune.dropout wins)
        loaded = dataclasses.replace(loaded, dropout=float(composed.explicit_model["dropout"]))
    # the run's tokenizer is the model's, and so are its settings (config.yaml records what the fine-tune used; an
    # override of data.tokenizer.* only applies to init=scratch, which trains one); the family's pooling default
    # follows the loaded family
    run_tok = run_cfg["data"]["tokenizer"]
    cfg = with_values(composed.cfg, {
        "model": loaded,
        "data.tokenizer.path": str(RunDir(init.run_dir).tokenizer_file),
        "data.tokenizer.kind": TokenizerKind(run_tok["kind"]),
        "data.tokenizer.vocab_size": int(run_tok["vocab_size"]),
        "data.tokenizer.num_sentinels": int(run_tok["num_sentinels"]),
    })
    return cross_checks(cfg), init  # again, against the loaded model (e.g. data.max_len <= model.max_seq_len)


def load_network(model: ModelConfig, init: Init) -> tuple[Network, dict[str, Tensor] | None]:
    """Build the network for ``init``; returns ``(net, pooler_state or None)``."""
    if init.kind == "hf":
        return hf_network(init.hf or "")
    net = build_network(model)
    if init.kind == "run":
        assert init.checkpoint is not None
        # our own Lightning checkpoint: hparams hold plain dicts, so weights_only loading is not needed
        state = torch.load(init.checkpoint, map_location="cpu", weights_only=False)["state_dict"]
        prefix = "net."
        weights = {k[len(prefix):].replace("_orig_mod.", ""): v for k, v in state.items() if k.startswith(prefix)}
        missing, unexpected = net.load_state_dict(weights, strict=False)
        if missing or unexpected:
            raise ConfigInputError(
                f"init={init.checkpoint}: checkpoint does not match model (missing {list(missing)[:3]}, "
                f"unexpected {list(unexpected)[:3]})"
            )
    return net, None


def with_dropout(net: Network, dropout: float) -> Network:
    """``net`` with its dropout rate set to ``dropout``: the same weights in a network built with that rate."""
    if net.config.dropout == dropout:
        return net
    rebuilt = build_network(dataclasses.replace(net.config, dropout=dropout))
    rebuilt.load_state_dict(net.state_dict())
    return rebuilt.train(net.training)


def _hf_model(src: str) -> tuple[PreTrainedModel, bool]:
    """Load a Hugging Face model of a registered family's kind (``HFAdapter.model_type``: BERT / GPT-2 / T5) as its
    adapter's ``pretrained_class``; returns ``(model, has_pooler)``."""
    adapters = {a.model_type: a for name in registry.family_names() if (a := registry.family(name).hf) is not None}
    try:
        import transformers

        config = transformers.AutoConfig.from_pretrained(src)
        if config.model_type not in adapters:
            raise ConfigInputError(f"init=hf:{src} is a {config.model_type} model; supported: {', '.join(adapters)}")
        adapter = adapters[config.model_type]
        model_class = getattr(transformers, adapter.pretrained_class)
        model, info = model_class.from_pretrained(src, output_loading_info=True)
    except ImportError as e:
        raise ConfigInputError(f"init=hf:{src} needs transformers (pip install famlab[hf]): {e}") from None
    except OSError as e:
        reason = str(e).splitlines()[0]
        raise ConfigInputError(f"init=hf:{src} cannot be loaded (offline or not found): {reason}") from None
    has_pooler = adapter.body_pooler and not any("pooler" in k for k in info.get("missing_keys", []))
    return model.eval(), has_pooler


def hf_network(src: str) -> tuple[Network, dict[str, Tensor] | None]:
    model, has_pooler = _hf_model(src)
    # train mode: Lightning keeps modules' modes, and an eval-mode network would fine-tune without dropout
    net = from_hf(model).train()
    pooler = hf_pooler_state(model) if has_pooler else None
    adapter = registry.family_of(net).hf
    if adapter is not None and adapter.body_pooler and pooler is None:
        log.warning("init=hf:%s has no pooler weights: the BERT pooler starts untrained", src)
    return net, pooler


def hf_bundle(src: str, run_dir: Path) -> TokenizerBundle:
    """The HF model's own tokenizer as a ``datamodules.TokenizerBundle``, saved as ``<run_dir>/tokenizer.json``.

    ``famlab.datamodules.load_tokenizer`` requires famlab's special-token names (``[PAD]`` ...), which GPT-2 / T5
    tokenizers lack, so the ids are taken from the HF tokenizer's own attributes, with the same fallbacks
    the HF models use (GPT-2 pads with ``<|endoftext|>``; T5 has no [CLS] and starts the decoder with pad).
    """
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(src)
    except (ImportError, OSError, ValueError) as e:
        raise ConfigInputError(f"init=hf:{src}: its tokenizer cannot be loaded ({str(e).splitlines()[0]})") from None
    path = RunDir(run_dir).tokenizer_file
    tok.backend_tokenizer.save(str(path))
    fast = tok.backend_tokenizer

    def first(*names: str) -> int:
        for name in names:
            value = getattr(tok, f"{name}_token_id", None)
            if value is not None:
                return int(value)
        return 0

    special = {
        "pad": first("pad", "eos", "unk"),
        "unk": first("unk", "pad", "eos"),
        "cls": first("cls", "bos", "eos", "pad"),
        "sep": first("sep", "eos", "pad"),
        "mask": first("mask", "unk", "eos"),
        "bos": first("bos", "cls", "pad"),
        "eos": first("eos", "sep", "pad"),
    }
    special.update(r=special["unk"], x=special["unk"], s=special["unk"])
    sentinels: list[int] = []
    while (sentinel := fast.token_to_id(f"<extra_id_{len(sentinels)}>")) is not None:
        sentinels.append(sentinel)
    return TokenizerBundle(
        tokenizer=fast, path=path, hash=hashlib.sha256(path.read_bytes()).hexdigest(),
        vocab_size=fast.get_vocab_size(with_added_tokens=True), special_ids=special, sentinel_ids=sentinels,
    )


def load_task_for(d: TaskData) -> Task:
    """``data.task`` with the data section's column and split settings."""
    task = load_configured_task(d)
    if len(task.labels) < 2:
        raise ConfigInputError(f"data.task={d.task}: column {d.label_column!r} has {len(task.labels)} class "
                               f"({', '.join(map(str, task.labels))}); a classification task needs at least 2")
    return task


def default_pooling(family: str, has_pooler: bool = False) -> str:
    """The pooling when ``finetune.pooling`` is unset: the family's (``famlab.families.faithful``, measured best for
    famlab-pretrained bodies), except a Hugging Face BERT that brings a trained pooler, which reads ``[CLS]`` through
    it as it was trained to."""
    return "cls" if has_pooler else family_defaults(family).pooling
