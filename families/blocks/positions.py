"""Position schemes behind one interface, computed once per stack and shared by its layers.

Every scheme implements three hooks; each returns ``None`` when the scheme does not act there:

- ``embed(position_ids) -> (B|1, T, C)``: added to the token embeddings (learned, sinusoidal);
- ``rotary(position_ids) -> (cos, sin)`` each ``(B|1, 1, T, D)``: rotates q and k (RoPE);
- ``bias(q_pos, k_pos) -> (B|1, H, T, S)``: additive attention bias (ALiBi, T5 relative buckets).

``position_ids`` / ``q_pos`` / ``k_pos`` are ``(T,)`` or ``(B, T)`` long tensors. Every scheme, built in or not, is
one :class:`PositionScheme` in ``famlab.families.config.POSITIONS`` (how it is built, whether it is length bounded),
and :func:`make_positions` looks each up there. Adding one is a class and a :func:`register_positions` call: the
built-in ones at the end of this module, code outside famlab in its own module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol, cast

import torch
from famlab.families.config import POSITIONS, PosScheme
from torch import Tensor, nn


class Positions(nn.Module):
    """No position information (``pos=none``); the base class of every scheme."""

    scheme: ClassVar[PosScheme] = PosScheme.NONE  # the ``model.pos`` a class implements

    def embed(self, position_ids: Tensor) -> Tensor | None:
        return None

    def rotary(self, position_ids: Tensor) -> tuple[Tensor, Tensor] | None:
        return None

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        return None


class LearnedPositions(Positions):
    """Learned absolute position embeddings (BERT, GPT-2)."""

    scheme: ClassVar[PosScheme] = PosScheme.LEARNED

    def __init__(self, max_len: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_len, dim).normal_(std=0.02))

    def embed(self, position_ids: Tensor) -> Tensor:
        return nn.functional.embedding(position_ids, self.weight)  # (B|T, ..., C)


class SinusoidalPositions(Positions):
    """Fixed sin/cos absolute embeddings (Vaswani et al. 2017), a non-persistent buffer (not in the state dict)."""

    scheme: ClassVar[PosScheme] = PosScheme.SINUSOIDAL

    table: Tensor

    def __init__(self, max_len: int, dim: int) -> None:
        super().__init__()
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
        inv = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))  # (C/2,)
        table = torch.zeros(max_len, dim)
        table[:, 0::2] = torch.sin(pos * inv)
        table[:, 1::2] = torch.cos(pos * inv)[:, : dim // 2]
        self.register_buffer("table", table, persistent=False)

    def embed(self, position_ids: Tensor) -> Tensor:
        return self.table[position_ids]


class RotaryPositions(Positions):
    """Rotary embeddings (Su et al. 2021, RoFormer) in the rotate-half layout of GPT-NeoX / LLaMA."""

    scheme: ClassVar[PosScheme] = PosScheme.ROPE

    inv_freq: Tensor

    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (D/2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotary(self, position_ids: Tensor) -> tuple[Tensor, Tensor]:
        freqs = position_ids.float()[..., None] * self.inv_freq  # (B|., T, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (B|., T, D)
        if emb.dim() == 3:
            emb = emb[:, None]  # (B, 1, T, D): broadcast over heads
        return emb.cos(), emb.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` of shape ``(B, H, T, D)`` by the angles behind ``cos``/``sin`` (broadcast to it)."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)  # rotate_half
    return (x * cos + rotated * sin).to(x.dtype)


def alibi_slopes(num_heads: int) -> Tensor:
    """Per-head ALiBi slopes: the geometric sequence ``2^(-8/n)``, ``2^(-16/n)``, … (Press et al. 2022).

    For a head count that is not a power of two, the paper takes the slopes of the closest smaller power
    of two and adds every other slope of the next power of two.
    """

    def power_of_2(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = power_of_2(num_heads)
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_2(closest) + alibi_slopes(2 * closest)[0::2].tolist()[: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBiPositions(Positions):
    """Attention bias ``-slope_h * |i - j|``: symmetric for encoders, the paper's form under a causal mask."""

    scheme: ClassVar[PosScheme] = PosScheme.ALIBI

    slopes: Tensor

    def __init__(self, num_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        distance = (k_pos[..., None, :] - q_pos[..., :, None]).abs().float()  # (B|., T, S)
        bias = -self.slopes[:, None, None] * distance.unsqueeze(-3)  # (B|., H, T, S)
        return bias if bias.dim() == 4 else bias[None]


def t5_relative_bucket(
    relative_position: Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int
) -> Tensor:
    """T5's bucket for ``relative_position = key_pos - query_pos`` (Raffel et al. 2020; HF's T5Attention).

    Half the buckets hold exact small distances, the other half log-spaced distances up to ``max_distance``;
    a bidirectional table spends half of its buckets on each direction.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = -torch.clamp(relative_position, max=0)  # only the past counts
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    large = (
        max_exact
        + (
            torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
        ).long()
    )
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


class T5RelativeBias(Positions):
    """T5's learned bucketed relative position bias, one scalar per (bucket, head); no 1/sqrt(d) pairing needed."""

    scheme: ClassVar[PosScheme] = PosScheme.T5_BIAS

    def __init__(self, num_heads: int, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.weight = nn.Parameter(torch.empty(num_buckets, num_heads).normal_(std=0.02))  # (buckets, H)

    def bias(self, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        relative = k_pos[..., None, :] - q_pos[..., :, None]  # (B|., T, S)
        buckets = t5_relative_bucket(
            relative, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=self.max_distance
        )
        values = nn.functional.embedding(buckets, self.weight)  # (B|., T, S, H)
        values = values.movedim(-1, -3)  # (B|., H, T, S)
        return values if values.dim() == 4 else values[None]


@dataclass(frozen=True)
class StackShape:
    """What a stack tells its position scheme: its shape and the position settings of ``ModelConfig``."""

    dim: int
    num_heads: int
    head_dim: int
    max_len: int  # model.max_seq_len
    causal: bool
    rope_theta: float = 10000.0
    num_buckets: int = 32
    max_distance: int = 128


class PositionsFactory(Protocol):
    """Builds a registered scheme from the stack's shape (``max_len``: ``model.max_seq_len``)."""

    def __call__(self, *, dim: int, num_heads: int, head_dim: int, max_len: int, causal: bool) -> Positions: ...


@dataclass(frozen=True)
class PositionScheme:
    """One ``model.pos`` value: how a stack builds it and whether it is length bounded (``PosScheme.length_bounded``).
    """

    build: Callable[[StackShape], Positions]
    length_bounded: bool


def make_positions(
    kind: str,
    *,
    dim: int,
    num_heads: int,
    head_dim: int,
    max_len: int,
    causal: bool,
    rope_theta: float = 10000.0,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Positions:
    """Build the registered position scheme ``kind`` (``learned | sinusoidal | rope | alibi | t5_bias | none`` built
    in); an unregistered name is a ConfigError naming ``model.pos``."""
    shape = StackShape(dim, num_heads, head_dim, max_len, causal, rope_theta, num_buckets, max_distance)
    positions = cast(PositionScheme, POSITIONS.get(kind)).build(shape)  # what register_positions put there
    if positions.scheme != kind:  # the stack reads its length bound off the scheme
        raise ValueError(f"model.pos={kind}: its class {type(positions).__name__} has scheme "
                         f"{positions.scheme.value!r}; set its scheme to the name register_positions returned")
    return positions


def register_positions(name: str, factory: PositionsFactory, *, length_bounded: bool) -> PosScheme:
    """Add position scheme ``name`` (``model.pos=<name>``) built by ``factory``; ``length_bounded``: it holds a table
    of ``model.max_seq_len`` positions, so no input may be longer. Returns its :class:`PosScheme`, which the class
    the factory builds takes as its ``scheme``.

    Raises:
        famlab.families.config.ConfigError: ``name`` is a scheme already, or not a lower-case identifier.
    """

    def build(s: StackShape) -> Positions:
        return factory(dim=s.dim, num_heads=s.num_heads, head_dim=s.head_dim, max_len=s.max_len, causal=s.causal)

    POSITIONS.register(name, PositionScheme(build, length_bounded))
    return PosScheme(name)


def unregister_positions(name: str) -> None:
    """Remove a scheme :func:`register_positions` added; a built-in scheme or an unknown name is refused (a
    ConfigError)."""
    POSITIONS.unregister(name)


def _t5_bias(s: StackShape) -> Positions:
    return T5RelativeBias(s.num_heads, bidirectional=not s.causal, num_buckets=s.num_buckets,
                          max_distance=s.max_distance)


# The built-in schemes, in the order docs/blocks.md lists them; registered as any other is, then sealed.
POSITIONS.register("learned", PositionScheme(lambda s: LearnedPositions(s.max_len, s.dim), length_bounded=True))
POSITIONS.register("sinusoidal", PositionScheme(lambda s: SinusoidalPositions(s.max_len, s.dim), length_bounded=True))
POSITIONS.register("rope", PositionScheme(lambda s: RotaryPositions(s.head_dim, s.rope_theta), length_bounded=False))
POSITIONS.register("alibi", PositionScheme(lambda s: ALiBiPositions(s.num_heads), length_bounded=False))
POSITIONS.register("t5_bias", PositionScheme(_t5_bias, length_bounded=False))
POSITIONS.register("none", PositionScheme(lambda s: Positions(), length_bounded=False))
POSITIONS.seal()
