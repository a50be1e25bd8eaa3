"""The model configuration: one dataclass, one enum per closed choice, one registry per extensible one (families,
position schemes, norms, feed-forward kinds, activations: a :class:`~famlab.families.registries.Name` checked against
:data:`FAMILIES` / :data:`POSITIONS` / :data:`NORMS` / :data:`FFN_KINDS` / :data:`ACTIVATIONS`), derived fields and
validation.

Torch-free on purpose: ``experiments`` uses :class:`ModelConfig` directly as the ``model`` section of its
OmegaConf structured config, so every field is a plain type, a ``str`` or a ``str`` Enum, every field has a default,
and derived fields are ``Optional[...] = None`` until :meth:`ModelConfig.__post_init__` fills them
(``OmegaConf.to_object`` calls it). Errors name the CLI key (``model.<field>``) on one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from famlab.families.registries import Name, Registry


class ConfigError(ValueError):
    """A model configuration problem; the message is one line naming the ``model.<key>`` involved."""


class Family(Name):
    """A ``model.family`` value: the name of a registered family (:data:`FAMILIES`; the built-in ones below, any
    other registered with ``famlab.families.registry.register_family``). A ``str``; ``ModelConfig`` checks it is
    registered."""

    BERT: ClassVar[Family]
    GPT: ClassVar[Family]
    T5: ClassVar[Family]


Family.BERT = Family("bert")  # bidirectional encoder + MLM head
Family.GPT = Family("gpt")  # causal decoder + tied LM head
Family.T5 = Family("t5")  # encoder-decoder + (tied) LM head

class FamilyEntry(Protocol):
    """What this module reads of a registered family: its traits. ``famlab.families.registry.FamilySpec`` is one; the
    registry's functions hand back the spec they registered (this module stays below them: no import of theirs)."""

    @property
    def traits(self) -> FamilyTraits: ...


# Every family by name, the built-in ones first (``famlab.families.builtin`` registers them; ``FamilySpec`` in
# ``famlab.families.registry``, whose functions read and write this table).
FAMILIES: Registry[FamilyEntry] = Registry("model.family", ConfigError)


@dataclass(frozen=True)
class FamilyTraits:
    """What :class:`ModelConfig` derives from its family (``FamilySpec.traits`` reads them off the family's spec: its
    architecture, input format and defaults)."""

    encoder_decoder: bool = False  # num_decoder_layers: num_layers when unset (other families: 0, and only 0)
    type_vocab_size: int = 0  # type_vocab_size when unset: 2 where the input format has token types (BERT)
    scaled_tied_head: bool = False  # head_scale when unset: dim^-0.5 for a tied head (Mesh-TF, T5), else 1.0


def family_traits(name: str) -> FamilyTraits:
    """The traits of registered family ``name``; a ConfigError naming ``model.family`` for any other name."""
    return FAMILIES.get(name).traits


class PosScheme(Name):
    """A ``model.pos`` value: the name of a registered position scheme (:data:`POSITIONS`; the built-in ones below,
    built in ``families/blocks/positions.py``, any other registered with ``register_positions`` there)."""

    LEARNED: ClassVar[PosScheme]
    SINUSOIDAL: ClassVar[PosScheme]
    ROPE: ClassVar[PosScheme]
    ALIBI: ClassVar[PosScheme]
    T5_BIAS: ClassVar[PosScheme]
    NONE: ClassVar[PosScheme]

    @property
    def length_bounded(self) -> bool:
        """Whether the scheme holds a table of ``model.max_seq_len`` positions, so no input may be longer (the one
        place this is read: the stack, validation at other lengths, zero-shot scoring and generation). Relative
        schemes and ``none`` run at any length; a registered scheme says which it is."""
        return POSITIONS.get(self).length_bounded


PosScheme.LEARNED = PosScheme("learned")  # learned absolute embeddings added to the token embeddings (BERT, GPT-2)
PosScheme.SINUSOIDAL = PosScheme("sinusoidal")  # fixed sin/cos absolute embeddings (Vaswani et al. 2017)
PosScheme.ROPE = PosScheme("rope")  # rotary embeddings applied to q and k (Su et al. 2021)
PosScheme.ALIBI = PosScheme("alibi")  # linear attention biases with per-head slopes (Press et al. 2022)
PosScheme.T5_BIAS = PosScheme("t5_bias")  # bucketed learned relative attention bias shared by a stack (Raffel et al. 2020)  # noqa: E501
PosScheme.NONE = PosScheme("none")  # no position information (causal decoders can still infer order)

class PositionEntry(Protocol):
    """What this module reads of a registered position scheme (``famlab.families.blocks.positions.PositionScheme``
    is one): whether it is length bounded."""

    @property
    def length_bounded(self) -> bool: ...


# Every position scheme by name, the built-in ones first (``famlab.families.blocks.positions`` registers them).
POSITIONS: Registry[PositionEntry] = Registry("model.pos", ConfigError)

if TYPE_CHECKING:
    FamilyField = Family
    PosField = PosScheme
else:  # OmegaConf takes a str field, not a str subclass: ModelConfig.__post_init__ makes the name a Family / PosScheme
    FamilyField = PosField = str


class Norm(Name):
    """A ``model.norm`` value: the name of a registered norm (:data:`NORMS`; the built-in ones below, built in
    ``families/blocks/norms.py``, any other registered with ``NORMS.register``). A ``str``; ``ModelConfig`` checks it
    is registered."""

    LAYERNORM: ClassVar[Norm]
    RMSNORM: ClassVar[Norm]


Norm.LAYERNORM = Norm("layernorm")  # LayerNorm (with bias when model.bias)
Norm.RMSNORM = Norm("rmsnorm")  # RMSNorm: no mean subtraction, no bias (T5)


class NormEntry(Protocol):
    """A registered norm: ``(dim, eps, bias) -> the norm layer`` (``famlab.families.blocks.norms.make_norm`` calls
    it; this module does not)."""

    def __call__(self, dim: int, eps: float, bias: bool, /) -> Any: ...


# Every norm by name, the built-in ones first (``famlab.families.blocks.norms`` registers them).
NORMS: Registry[NormEntry] = Registry("model.norm", ConfigError)


class NormPosition(str, Enum):
    """Where the norm sits relative to the residual add."""

    PRE = "pre"  # x + f(norm(x)), final norm after the stack (GPT-2, T5)
    POST = "post"  # norm(x + f(x)), norm on the embeddings, no final norm (BERT)


class FFNKind(Name):
    """A ``model.ffn`` value: the name of a registered feed-forward kind (:data:`FFN_KINDS`; the built-in ones below,
    registered in ``families/blocks/feedforward.py``). A ``str``; ``ModelConfig`` checks it is registered."""

    PLAIN: ClassVar[FFNKind]
    GATED: ClassVar[FFNKind]

    @property
    def gated(self) -> bool:
        """Whether the kind is gated (``W2 (act(W1 x) * V x)``): its default width and FLOPs count two up
        projections."""
        return FFN_KINDS.get(self).gated


FFNKind.PLAIN = FFNKind("plain")  # W2 act(W1 x)
FFNKind.GATED = FFNKind("gated")  # W2 (act(W1 x) * V x): SwiGLU with silu, T5 v1.1 gated-GELU with gelu_tanh


class FFNEntry(Protocol):
    """What this module reads of a registered feed-forward kind (``famlab.families.blocks.feedforward.FFNShape`` is
    one): whether it is gated."""

    @property
    def gated(self) -> bool: ...


# Every feed-forward kind by name, the built-in ones first (``famlab.families.blocks.feedforward`` registers them).
FFN_KINDS: Registry[FFNEntry] = Registry("model.ffn", ConfigError)


class Activation(Name):
    """A ``model.activation`` value: the name of a registered activation function (:data:`ACTIVATIONS`; the built-in
    ones below, registered in ``families/blocks/feedforward.py``). A ``str``; ``ModelConfig`` checks it is
    registered."""

    RELU: ClassVar[Activation]
    GELU: ClassVar[Activation]
    GELU_TANH: ClassVar[Activation]
    SILU: ClassVar[Activation]


Activation.RELU = Activation("relu")  # T5 v1.0
Activation.GELU = Activation("gelu")  # exact erf GELU (BERT)
Activation.GELU_TANH = Activation("gelu_tanh")  # tanh approximation, HF's gelu_new (GPT-2, T5 v1.1)
Activation.SILU = Activation("silu")  # SwiGLU with model.ffn=gated


class ActivationEntry(Protocol):
    """A registered activation: a tensor in, a tensor out (``famlab.families.blocks.feedforward.get_activation``
    hands it back; this module does not call it)."""

    def __call__(self, x: Any, /) -> Any: ...


# Every activation by name, the built-in ones first (``famlab.families.blocks.feedforward`` registers them).
ACTIVATIONS: Registry[ActivationEntry] = Registry("model.activation", ConfigError)

if TYPE_CHECKING:
    NormField = Norm
    FFNField = FFNKind
    ActivationField = Activation
else:  # OmegaConf takes a str field, not a str subclass (as FamilyField / PosField above)
    NormField = FFNField = ActivationField = str


class InitScheme(str, Enum):
    """Weight initialisation, faithful to each family's reference implementation."""

    BERT = "bert"  # normal(0, init_std) for every weight, zero biases, unit norms
    GPT2 = "gpt2"  # as bert, plus residual output projections scaled by 1/sqrt(2 * layers)
    T5 = "t5"  # Mesh-TF factors: normal(0, (fan_in)^-0.5) per weight kind, embeddings normal(0, 1)


class AttnImpl(str, Enum):
    """Attention kernel."""

    SDPA = "sdpa"  # torch.nn.functional.scaled_dot_product_attention (fast kernels)
    MATH = "math"  # plain matmul/softmax reference path (tests, FLOP counting)


# (low, high, brackets): "[]" closed, "()" open, "[)" / "(]" half-open; a bound of math.inf means "no bound"
Range = tuple[float, float, str]


def check_range(key: str, value: float | None, lo: float, hi: float, brackets: str = "[]") -> None:
    """Raise a one-line ConfigError unless ``value`` is finite and within the range; ``None`` passes.

    Non-finite numbers (``nan``, ``inf``) are always refused: no famlab setting means anything at infinity.
    """
    if value is None:
        return
    low_ok = lo < value if brackets[0] == "(" else lo <= value
    high_ok = value < hi if brackets[1] == ")" else value <= hi
    if not (math.isfinite(value) and low_ok and high_ok):
        raise ConfigError(f"{key}={value} must be in {brackets[0]}{_num(lo)}, {_num(hi)}{brackets[1]}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def check_ranges(obj: object, section: str, ranges: dict[str, Range]) -> None:
    """:func:`check_range` on each named field of ``obj`` (every element of a list field), keys ``section.name``."""
    for name, (lo, hi, brackets) in ranges.items():
        value = getattr(obj, name)
        for v in value if isinstance(value, (list, tuple)) else [value]:
            check_range(f"{section}.{name}" if section else name, v, lo, hi, brackets)


BIG = 2**31 - 1  # counts of steps, batches, ids: an int64 is not the limit, the machine is long before this

# Ranges of the numeric fields of ModelConfig; derived (None) fields are checked once filled in.
MODEL_RANGES: dict[str, Range] = {
    "vocab_size": (0, 2**24, "[]"),  # 0 = from the tokenizer
    "dim": (1, 65536, "[]"),
    "num_layers": (1, 1024, "[]"),
    "num_decoder_layers": (0, 1024, "[]"),
    "num_heads": (1, 4096, "[]"),
    "num_kv_heads": (1, 4096, "[]"),
    "head_dim": (1, 4096, "[]"),
    "ffn_dim": (1, 2**20, "[]"),
    "max_seq_len": (1, 2**20, "[]"),
    "dropout": (0.0, 1.0, "[)"),
    "qk_scale": (0.0, 1e4, "(]"),
    "head_scale": (0.0, 1e4, "(]"),
    "type_vocab_size": (0, 1024, "[]"),
    "rel_pos_buckets": (2, 4096, "[]"),
    "rel_pos_max_distance": (1, 2**20, "[]"),
    "rope_theta": (0.0, 1e12, "(]"),
    "norm_eps": (0.0, 1.0, "()"),
    "init_std": (0.0, 10.0, "(]"),
    "pad_token_id": (0, 2**24, "[)"),
}


NameT = TypeVar("NameT", bound=Name)


def _registered(cls: type[NameT], registry: Registry[Any], value: str) -> NameT:
    """``value`` as its :class:`Name` class once ``registry`` has it; an unregistered name is one ConfigError line
    naming the key and the registered names (:meth:`Registry.get`)."""
    registry.get(value)
    return cls(value)


def _enum(cls: type[Enum], key: str, value: object) -> Enum:
    """Coerce a string (or enum) to ``cls``, raising a one-line ConfigError naming ``model.<key>``."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        valid = ", ".join(m.value for m in cls)
        raise ConfigError(f"model.{key}={value!r} is not one of: {valid}") from None


@dataclass
class ModelConfig:
    """Architecture of a BERT, GPT or T5 network. Defaults are a small GPT-2-style decoder."""

    # Which network: bert (encoder + MLM head) | gpt (causal decoder) | t5 (encoder-decoder).
    family: FamilyField = Family.GPT
    # Vocabulary size; 0 means "take it from the tokenizer" (experiments sets it before building).
    vocab_size: int = 0
    # Model (residual stream) width C.
    dim: int = 256
    # Number of layers (the encoder's for T5).
    num_layers: int = 4
    # T5 decoder layers; derived: num_layers for t5, 0 for the other families.
    num_decoder_layers: int | None = None
    # Query heads H.
    num_heads: int = 4
    # Key/value heads (GQA: divides num_heads; 1 = MQA); derived: num_heads.
    num_kv_heads: int | None = None
    # Per-head width D, independent of dim (T5's d_kv); derived: dim // num_heads.
    head_dim: int | None = None
    # Feed-forward hidden width; derived: 4*dim (plain) or 8/3*dim rounded up to a multiple of 8 (gated).
    ffn_dim: int | None = None
    # Longest sequence the position scheme must cover (size of learned/sinusoidal tables).
    max_seq_len: int = 512
    # Position scheme: learned | sinusoidal | rope | alibi | t5_bias | none.
    pos: PosField = PosScheme.LEARNED
    # Normalisation: layernorm | rmsnorm, or a registered norm.
    norm: NormField = Norm.LAYERNORM
    # Norm placement: pre (GPT-2, T5) | post (BERT).
    norm_position: NormPosition = NormPosition.PRE
    # Feed-forward kind: plain | gated, or a registered kind.
    ffn: FFNField = FFNKind.PLAIN
    # Feed-forward activation: relu | gelu | gelu_tanh | silu, or a registered activation.
    activation: ActivationField = Activation.GELU_TANH
    # Dropout probability on embeddings, attention weights and residual branches.
    dropout: float = 0.1
    # Biases in Linear layers and LayerNorm (BERT/GPT-2 True, T5 False).
    bias: bool = True
    # Share the input embedding with the output projection.
    tie_embeddings: bool = True
    # Attention logit scale; None = 1/sqrt(head_dim). T5 uses 1.0 (the scale is folded into its init).
    qk_scale: float | None = None
    # Multiplier on the final hidden state before the LM head; derived: dim^-0.5 for a tied T5 head
    # (Mesh-TF rescaling), else 1.0.
    head_scale: float | None = None
    # Token-type (segment) vocabulary; derived: 2 for bert, 0 (no token-type embedding) otherwise.
    type_vocab_size: int | None = None
    # T5 relative-position buckets (pos=t5_bias).
    rel_pos_buckets: int = 32
    # T5 relative distance beyond which buckets are shared (pos=t5_bias).
    rel_pos_max_distance: int = 128
    # RoPE base frequency (pos=rope).
    rope_theta: float = 10000.0
    # Epsilon of every norm (BERT 1e-12, GPT-2 1e-5, T5 1e-6).
    norm_eps: float = 1e-5
    # Initialisation scheme: bert | gpt2 | t5.
    init: InitScheme = InitScheme.GPT2
    # Std of the normal init for the bert/gpt2 schemes; the t5 scheme multiplies its factors by init_std/0.02.
    init_std: float = 0.02
    # Padding token id (T5's decoder start token is the pad id).
    pad_token_id: int = 0
    # Attention kernel: sdpa (fast) | math (reference path, used for FLOP counting and tests).
    attn_impl: AttnImpl = AttnImpl.SDPA

    def __post_init__(self) -> None:
        """Coerce enums, fill derived fields and validate; raises ConfigError naming the keys."""
        self._coerce_enums()
        # vocab_size 0 is allowed here ("from the tokenizer"); build_network rejects it
        check_ranges(self, "model", MODEL_RANGES)
        self._derive_heads()
        self._derive_ffn_dim()
        self._derive_family_fields()
        self._check_positions()
        check_ranges(self, "model", MODEL_RANGES)  # the derived fields, now filled in
        if self.pad_token_id < 0 or (self.vocab_size and self.pad_token_id >= self.vocab_size):
            raise ConfigError(f"model.pad_token_id={self.pad_token_id} must be in [0, model.vocab_size)")

    def _coerce_enums(self) -> None:
        """The enum-valued fields as their enums and the registered names as their :class:`Name` (a config file or
        the command line gives strings); an unknown value is one line naming the key and the valid values."""
        self.family = _registered(Family, FAMILIES, self.family)
        self.pos = _registered(PosScheme, POSITIONS, self.pos)
        self.norm = _registered(Norm, NORMS, self.norm)
        self.norm_position = _enum(NormPosition, "norm_position", self.norm_position)  # type: ignore[assignment]
        self.ffn = _registered(FFNKind, FFN_KINDS, self.ffn)
        self.activation = _registered(Activation, ACTIVATIONS, self.activation)
        self.init = _enum(InitScheme, "init", self.init)  # type: ignore[assignment]
        self.attn_impl = _enum(AttnImpl, "attn_impl", self.attn_impl)  # type: ignore[assignment]

    def _derive_heads(self) -> None:
        """``head_dim`` (``dim // num_heads``) and ``num_kv_heads`` (``num_heads``) when unset; both checked."""
        if self.head_dim is None:
            if self.dim % self.num_heads:
                raise ConfigError(
                    f"model.dim={self.dim} is not divisible by model.num_heads={self.num_heads}; set model.head_dim"
                )
            self.head_dim = self.dim // self.num_heads
        elif self.head_dim < 1:
            raise ConfigError(f"model.head_dim={self.head_dim} must be >= 1")
        if self.pos == PosScheme.ROPE and self.head_dim % 2:
            raise ConfigError(f"model.head_dim={self.head_dim} must be even for model.pos=rope")

        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        if self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model.num_kv_heads={self.num_kv_heads} must be >= 1 and divide model.num_heads={self.num_heads}"
            )

    def _derive_ffn_dim(self) -> None:
        """``ffn_dim`` when unset: 4 * dim, or 8/3 * dim rounded up to a multiple of 8 for a gated FFN."""
        if self.ffn_dim is None:
            if self.ffn.gated:  # same parameter count as a plain 4*dim FFN (Shazeer 2020)
                self.ffn_dim = 8 * math.ceil(8 * self.dim / 3 / 8)
            else:
                self.ffn_dim = 4 * self.dim
        elif self.ffn_dim < 1:
            raise ConfigError(f"model.ffn_dim={self.ffn_dim} must be >= 1")

    def _derive_family_fields(self) -> None:
        """The fields whose default is the family's: decoder layers, token-type vocabulary, LM-head scale."""
        traits = family_traits(self.family.value)
        if traits.encoder_decoder:
            if self.num_decoder_layers is None:
                self.num_decoder_layers = self.num_layers
            elif self.num_decoder_layers < 1:
                raise ConfigError(f"model.num_decoder_layers={self.num_decoder_layers} must be >= 1")
        elif self.num_decoder_layers is None:
            self.num_decoder_layers = 0
        elif self.num_decoder_layers != 0:
            owners = " or ".join(name for name in FAMILIES if family_traits(name).encoder_decoder)
            raise ConfigError(
                f"model.num_decoder_layers={self.num_decoder_layers} applies only to model.family={owners} "
                f"(got model.family={self.family.value}); set it to null"
            )

        if self.type_vocab_size is None:
            self.type_vocab_size = traits.type_vocab_size
        elif self.type_vocab_size < 0:
            raise ConfigError(f"model.type_vocab_size={self.type_vocab_size} must be >= 0")

        if self.head_scale is None:
            scaled = traits.scaled_tied_head and self.tie_embeddings
            self.head_scale = self.dim**-0.5 if scaled else 1.0

    def _check_positions(self) -> None:
        """The position scheme's own settings (T5 relative buckets, the RoPE base)."""
        if self.pos == PosScheme.T5_BIAS:
            if self.rel_pos_buckets < 2:
                raise ConfigError(f"model.rel_pos_buckets={self.rel_pos_buckets} must be >= 2")
            if self.rel_pos_max_distance < self.rel_pos_buckets // 2:
                raise ConfigError(
                    f"model.rel_pos_max_distance={self.rel_pos_max_distance} must be >= "
                    f"model.rel_pos_buckets/2={self.rel_pos_buckets // 2}"
                )
        if self.pos == PosScheme.ROPE and self.rope_theta <= 0:
            raise ConfigError(f"model.rope_theta={self.rope_theta} must be > 0")
