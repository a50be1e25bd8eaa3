"""The family registry: one :class:`FamilySpec` per family, the one place the list of families comes from.

Every consumer reads it: ``build_network`` (the network class), the config (``model.family`` is validated against
:func:`family_names`, and a family's defaults and preset are composed from its spec), the objective table (by the
family's :class:`~famlab.families.formats.Arch`), the fine-tuning collator and classifier, zero-shot scoring,
generation, FLOP counting, ``famlab compare`` / ``bench`` (their default families) and the Hugging Face conversion and
export (:class:`HFAdapter`). The three built-in families are registered by ``famlab.families.builtin`` when
``famlab.families`` is imported; another is registered with :func:`register_family` (``tests/test_toy_family.py``
registers one from a test) and needs no library file edited (docs/architecture.md, "Adding a family").

Torch-free apart from the types it names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from famlab.families.config import FAMILIES, ConfigError, Family, FamilyTraits, ModelConfig
from famlab.families.formats import Arch, InputFormat
from famlab.families.heads import Pooler
from famlab.families.network import Network
from torch import Tensor

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class FamilyDefaults:
    """A family's defaults (``famlab.families.faithful`` holds the built-in ones); ``model`` holds ``ModelConfig`` keys
    as plain values."""

    model: MappingProxyType[str, Any] = field(repr=False)
    objective: str  # the pretraining objective when ``objective.name`` is unset (objectives/registry.py)
    pooling: str  # the fine-tuning pooling when ``finetune.pooling`` is unset (families/heads.py ``pool``)
    # The ``model`` keys the family's Hugging Face class has no setting for: ``from_hf`` takes them (and ``init``)
    # from ``model`` and ``to_hf`` refuses any other value. The other keys are HF config values ``from_hf`` reads.
    hf_fixed: tuple[str, ...] = ()
    # A tied LM head scales the final hidden state by dim^-0.5 (Mesh-TF, T5): ``model.head_scale``'s derived value.
    scaled_tied_head: bool = False


@dataclass(frozen=True)
class HFAdapter:
    """What the Hugging Face conversion (``famlab.families.hf``, ``hf_settings``, ``hf_classifier``), ``famlab export``
    and ``init=hf:`` need of a family. The callables take and return ``transformers`` objects (``transformers`` is
    imported inside them only).

    Attributes:
        lm_class: the ``transformers`` class ``to_hf`` builds (``BertForMaskedLM``).
        auto_class: the Auto class that loads an exported language model (``AutoModelForMaskedLM``).
        classes: the ``transformers`` classes ``from_hf`` reads.
        model_type: HF ``config.model_type`` (``bert``, ``gpt2``, ``t5``), which ``init=hf:<name>`` recognises.
        pretrained_class: the class ``init=hf:`` loads (``BertForPreTraining``: the MLM head and the pooler).
        config_from_hf: ``(HF model, family name)`` -> ``ModelConfig`` (refuses what famlab does not model).
        check: refuses (``HFConversionError``) what the HF class cannot express beyond the family's ``hf_fixed`` keys
            and GQA, which ``hf_settings.check_expressible`` refuses for every family.
        config_to_hf: ``ModelConfig`` -> HF config (unchecked: ``hf_settings.config_to_hf`` checks first).
        weight_map: ``(cfg, HF class name)`` -> ``(our key, HF keys, how)`` triples.
        bodies: classes ``from_hf`` reads without the LM head (``BertModel``; the head stays at its init).
        always_tied: the HF class ties its output to the input embedding whatever its config says (T5 under
            transformers 5): ``to_hf`` gives an untied head its own parameter and ``famlab export`` refuses one.
        classifier: ``(HF LM, classifier weight (K, C), bias (K,), pooler or None)`` -> ``(model, state dict)``: the HF
            sequence classifier whose logits are the fine-tuned classifier's, and the weights to load into it; None:
            no HF sequence classifier pools as famlab does (``famlab export`` writes the body and the head).
        classifier_pooling: the pooling ``classifier`` computes (``cls``, ``last``).
        body_pooler: the HF base model carries BERT's pooler (``add_pooling_layer``; ``init=hf:`` loads it).
        encoder_class: the class of an encoder-decoder's encoder alone (``T5EncoderModel``), for a classifier that pools
            the encoder; ``body_class`` the whole body's (``T5Model``). None: the LM's ``base_model`` is the body.
        tokenizer_max_length: an exported tokenizer's ``model_max_length``; None = ``model.max_seq_len``.
        rope_variant: with ``model.pos=rope`` the family converts as RoFormer, BERT with rotary q/k
            (``famlab.families.hf_roformer``).
    """

    lm_class: str
    auto_class: str
    classes: tuple[str, ...]
    model_type: str
    pretrained_class: str
    config_from_hf: Callable[[PreTrainedModel, str], ModelConfig]
    check: Callable[[ModelConfig], None]
    config_to_hf: Callable[[ModelConfig], PretrainedConfig]
    weight_map: Callable[[ModelConfig, str], list[tuple[str, list[str], str]]]
    bodies: tuple[str, ...] = ()
    always_tied: bool = False
    # (the HF LM, head weight, head bias, the head's pooler) -> (the HF sequence classifier, its state dict)
    classifier: (
        Callable[[PreTrainedModel, Tensor, Tensor, Pooler | None], tuple[PreTrainedModel, dict[str, Tensor]]] | None
    ) = None
    classifier_pooling: str | None = None
    body_pooler: bool = False
    encoder_class: str | None = None
    body_class: str | None = None
    tokenizer_max_length: int | None = None
    rope_variant: bool = False


@dataclass(frozen=True)
class FamilySpec:
    """One family: everything famlab needs to build, train, fine-tune, score and export it.

    Attributes:
        name: the ``model.family`` value (and the CLI word: ``famlab pretrain <name>``).
        network: the network class (or a builder): ``network(cfg)`` gives a :class:`~famlab.families.network.Network`.
        defaults: its block choices, default objective and pooling (:class:`FamilyDefaults`), composed into its
            config before its preset.
        input_format: its :class:`~famlab.families.formats.InputFormat` (classification and scoring input, the
            exported tokenizer template); its ``arch`` is the family's architecture.
        preset: the preset composed after the defaults (a name in ``experiments/configs/`` or a ``.yaml`` path);
            None = ``experiments/configs/<name>.yaml`` where it exists, else none.
        hf: its Hugging Face conversion (:class:`HFAdapter`); None = ``to_hf`` / ``famlab export`` refuse it.
    """

    name: str
    network: Callable[[ModelConfig], Network]
    defaults: FamilyDefaults
    input_format: InputFormat
    preset: str | None = None
    hf: HFAdapter | None = None

    @property
    def arch(self) -> Arch:
        """The family's architecture (its input format's)."""
        return self.input_format.arch

    @property
    def traits(self) -> FamilyTraits:
        """What ``ModelConfig`` derives from the family: read off its architecture, input format and defaults."""
        return FamilyTraits(
            encoder_decoder=self.arch is Arch.ENCODER_DECODER,
            type_vocab_size=2 if self.input_format.token_types else 0,
            scaled_tied_head=self.defaults.scaled_tied_head,
        )

    def model_settings(self) -> dict[str, Any]:
        """``model.family`` and the ``model`` keys of its defaults, a new dict
        (``ModelConfig(**settings, dim=...)``)."""
        return {"family": self.name, **self.defaults.model}


def register_family(spec: FamilySpec) -> FamilySpec:
    """Add ``spec`` to :data:`~famlab.families.config.FAMILIES` (its name a ``model.family`` value); a ConfigError
    (a ValueError) if the name is taken or not a lower-case identifier, or its pooling is not its input format's."""
    if spec.defaults.pooling not in spec.input_format.poolings:
        raise ValueError(f"family {spec.name}: pooling {spec.defaults.pooling!r} is not one of its input format's "
                         f"{list(spec.input_format.poolings)}")
    FAMILIES.register(spec.name, spec)
    return spec


def unregister_family(name: str) -> None:
    """Remove a registered family (tests); a built-in family or an unknown name is refused (a ConfigError)."""
    FAMILIES.unregister(name)


def family_names() -> tuple[str, ...]:
    """The registered families, in registration order (the built-in ``bert, gpt, t5`` first)."""
    return FAMILIES.names()


def families_of(*archs: Arch) -> list[str]:
    """The registered families of the given architectures, in registration order (for messages and defaults)."""
    return [name for name in FAMILIES if family(name).arch in archs]


def family(name: str | Family) -> FamilySpec:
    """The spec of family ``name`` (a string or a ``Family``); a ConfigError (a ValueError) naming ``model.family``."""
    # FAMILIES (in families/config.py, below this module) holds what register_family put there: FamilySpecs
    return cast(FamilySpec, FAMILIES.get(name))


def family_of(net: object) -> FamilySpec:
    """The spec of a network's family (``net.family``); a ConfigError for anything else."""
    name = getattr(net, "family", None)
    if not isinstance(name, str) or name not in FAMILIES:
        raise ConfigError(f"expected a famlab network ({', '.join(FAMILIES)}), got {type(net).__name__}")
    return family(name)


def family_defaults(name: str) -> FamilyDefaults:
    """The defaults of family ``name`` (its spec's)."""
    return family(name).defaults


def family_model_settings(name: str) -> dict[str, Any]:
    """``model.family`` and the ``model`` keys of its defaults, a new dict (``ModelConfig(**settings, dim=...)``)."""
    return family(name).model_settings()


__all__ = ["FamilyDefaults", "FamilySpec", "HFAdapter", "families_of", "family", "family_defaults",
           "family_model_settings", "family_names", "family_of", "register_family", "unregister_family"]
