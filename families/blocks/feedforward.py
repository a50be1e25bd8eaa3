"""Position-wise feed-forward blocks: plain ``W2 act(W1 x)`` and gated ``W2 (act(W1 x) * V x)``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import cast

import torch.nn.functional as F
from famlab.families.config import ACTIVATIONS, FFN_KINDS, Activation, FFNKind
from torch import Tensor, nn

# Each built-in ``model.activation`` value and its function (``famlab.families.config.ACTIVATIONS``, which
# ``ModelConfig`` checks ``model.activation`` against; a plugin registers its own there the same way).
ACTIVATIONS.register(Activation.RELU.value, F.relu)
ACTIVATIONS.register(Activation.GELU.value, F.gelu)  # exact erf form (BERT)
ACTIVATIONS.register(Activation.GELU_TANH.value, partial(F.gelu, approximate="tanh"))  # HF's gelu_new (GPT-2, T5 v1.1)
ACTIVATIONS.register(Activation.SILU.value, F.silu)
ACTIVATIONS.seal()


@dataclass(frozen=True)
class FFNShape:
    """What a ``model.ffn`` kind builds: a gated block (``W2 (act(W1 x) * V x)``) or a plain one."""

    gated: bool


# Each built-in ``model.ffn`` value and the block it builds (``famlab.families.config.FFN_KINDS``, checked by
# ``ModelConfig``).
FFN_KINDS.register(FFNKind.PLAIN.value, FFNShape(gated=False))
FFN_KINDS.register(FFNKind.GATED.value, FFNShape(gated=True))
FFN_KINDS.seal()


def get_activation(name: str) -> Callable[[Tensor], Tensor]:
    """Look an activation function up by name (``relu | gelu | gelu_tanh | silu``); another name is a ConfigError
    naming ``model.activation``."""
    return cast(Callable[[Tensor], Tensor], ACTIVATIONS.get(name))


class FeedForward(nn.Module):
    """Feed-forward block ``(B, T, C) -> (B, T, C)``.

    The gated variant (Shazeer 2020, "GLU Variants Improve Transformer") fuses the gate and value input
    projections into one ``up`` Linear of width ``2 * hidden`` (one matmul instead of two); its first half
    is the activated gate (T5's ``wi_0``), the second half the linear value (``wi_1``).

    Args:
        dim: Model width C.
        hidden: Inner width F.
        activation: ``relu | gelu | gelu_tanh | silu``.
        gated: Gated (GLU) variant.
        bias: Biases on both Linears.
        dropout: Dropout after the activation (T5 places it there; BERT/GPT-2 drop the block output, which
            the layer does).
    """

    def __init__(
        self,
        dim: int,
        hidden: int,
        *,
        activation: str = "gelu",
        gated: bool = False,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.hidden = hidden
        self.gated = gated
        self.act = get_activation(activation)
        self.up = nn.Linear(dim, 2 * hidden if gated else hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)
        self.drop = nn.Dropout(dropout) if dropout > 0 else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block to ``x`` of shape ``(B, T, C)``."""
        h = self.up(x)  # (B, T, F) or (B, T, 2F)
        if self.gated:
            gate, value = h.split(self.hidden, dim=-1)  # (B, T, F) each, views
            h = self.act(gate) * value
        elif self.act is F.relu:
            h = F.relu(h, inplace=True)  # h is the Linear's output, which its backward does not need
        else:
            h = self.act(h)
        return self.down(self.drop(h))
