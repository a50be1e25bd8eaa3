"""The token ids every objective needs, looked up by name from the tokenizer (see docs/interfaces.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from famlab.objectives.errors import ObjectiveError


@dataclass(frozen=True)
class TokenIds:
    """Ids of the special tokens and sentinels of one tokenizer.

    Built by `experiments` from a `TokenizerBundle`:
    `TokenIds(vocab_size=b.vocab_size, sentinel_ids=b.sentinel_ids, **b.special_ids)`.
    `sentinel_ids[i]` is the id of `<extra_id_i>` (T5 counts them down from the top of the vocabulary, but
    nothing here relies on that).
    """

    vocab_size: int
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int
    bos: int
    eos: int
    r: int
    x: int
    s: int
    sentinel_ids: Sequence[int] = ()

    def __post_init__(self) -> None:
        # Store a tuple so the ids cannot change after construction (the dataclass is frozen).
        object.__setattr__(self, "sentinel_ids", tuple(int(i) for i in self.sentinel_ids))
        for name in ("pad", "unk", "cls", "sep", "mask", "bos", "eos", "r", "x", "s"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise ObjectiveError(f"token id {name}={value} is outside the vocabulary [0, {self.vocab_size})")
        for i, value in enumerate(self.sentinel_ids):
            if not 0 <= value < self.vocab_size:
                raise ObjectiveError(f"sentinel <extra_id_{i}>={value} is outside the vocabulary of {self.vocab_size}")

    @property
    def special(self) -> tuple[int, ...]:
        """All special ids: the named ones and every sentinel (sorted, unique)."""
        named = (self.pad, self.unk, self.cls, self.sep, self.mask, self.bos, self.eos, self.r, self.x, self.s)
        return tuple(sorted(set(named) | set(self.sentinel_ids)))

    def special_lookup(self, device: torch.device | str | None = None) -> torch.Tensor:
        """A `(V,)` bool table, True at special ids: `table[tokens]` marks special positions without loops."""
        table = torch.zeros(self.vocab_size, dtype=torch.bool, device=device)
        table[list(self.special)] = True
        return table

    def normal_ids(self, device: torch.device | str | None = None) -> torch.Tensor:
        """`(V - num_special,)` long tensor of the non-special ids (what MLM's random replacement draws from)."""
        return torch.nonzero(~self.special_lookup(device), as_tuple=False).flatten()
