"""Each family's input format: how text becomes what its network reads, in one object per family.

A family's :class:`InputFormat` (``FamilySpec.input_format``, ``famlab.families.registry``) is one of three classes,
one per architecture (:class:`Arch`), and owns:

- the classification input: a text or a text pair as token ids and token types, built from the family's template
  (``single`` / ``pair`` in Hugging Face ``TemplateProcessing`` syntax: BERT ``[CLS] $A [SEP]`` /
  ``[CLS] $A [SEP] $B:1 [SEP]:1``, GPT and T5 ``$A [EOS]`` / ``$A [SEP] $B [EOS]``). The fine-tuning collator
  (:meth:`InputFormat.classification`) and an exported tokenizer's post-processor (:meth:`InputFormat.template`) read
  the same template, so they cannot drift apart;
- how the network reads a classification batch (:meth:`InputFormat.extra_inputs`, :meth:`InputFormat.pooled`), the
  poolings it offers and the part of the network each one reads (:meth:`InputFormat.body`: what a classifier holds);
- the zero-shot scoring input: the measure (``bits_per_byte`` or BERT's ``pll_bits_per_byte``), the tokens a scored
  text is conditioned on under a :class:`Rule` (:meth:`InputFormat.byte_context`) and the pseudo-log-likelihood row
  (:meth:`InputFormat.wrap`); the scorers themselves are in ``famlab.objectives``.

A new family of an existing architecture reuses a class with its own template. Which rule applies is the objective's
to say, not the format's: each objective declares its rules (:class:`Reading` and :class:`Rule`, defined here as plain
data so this layer never imports ``objectives/``), and a format only turns a rule into tokens. Pure torch.

Legend: B batch, T sequence length, C model dim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Protocol, cast

import torch
from famlab.families import heads
from famlab.families.network import EncoderDecoder, Network
from torch import Tensor, nn


class Arch(str, Enum):
    """How a family's network reads a sequence: what the objective table (``objectives/registry.py``), the scorers,
    generation and FLOP counting dispatch on, so that a new family of a known architecture needs none of them."""

    ENCODER = "encoder"  # bidirectional encoder with a masked-LM head (BERT)
    DECODER = "decoder"  # causal decoder with an LM head (GPT)
    ENCODER_DECODER = "encoder_decoder"  # bidirectional encoder, cross-attending causal decoder (T5)


class SpecialIds(Protocol):
    """The special token ids a format writes (``famlab.objectives.TokenIds`` is one)."""

    @property
    def pad(self) -> int: ...
    @property
    def unk(self) -> int: ...
    @property
    def cls(self) -> int: ...
    @property
    def sep(self) -> int: ...
    @property
    def mask(self) -> int: ...
    @property
    def bos(self) -> int: ...
    @property
    def eos(self) -> int: ...
    @property
    def r(self) -> int: ...
    @property
    def x(self) -> int: ...
    @property
    def s(self) -> int: ...
    @property
    def sentinel_ids(self) -> Sequence[int]: ...


# A template's special-token names and the SpecialIds attribute holding each one's id (the tokenizer's names).
TOKEN_NAMES: Mapping[str, str] = {
    "[PAD]": "pad", "[UNK]": "unk", "[CLS]": "cls", "[SEP]": "sep", "[MASK]": "mask", "[BOS]": "bos", "[EOS]": "eos",
    "[R]": "r", "[X]": "x", "[S]": "s",
}  # fmt: skip
TEXTS = ("$A", "$B")  # the template's text slots


def truncate_pair(a: list[int], b: list[int] | None, budget: int) -> tuple[list[int], list[int] | None]:
    """Cut `a` (and `b`) to at most `budget` tokens together, longest first (as Hugging Face's default).

    Tokens are removed from the end of the longer text until both are equally long, then from both alike.
    """
    if b is None:
        return a[:budget], None
    if len(a) + len(b) <= budget:
        return a, b
    keep_a = min(len(a), max(budget - len(b), (budget + 1) // 2))
    keep_b = min(len(b), budget - keep_a)
    return a[:keep_a], b[:keep_b]


def template_pieces(template: str) -> list[tuple[str, int]]:
    """``[(piece, type id), ...]`` of a ``TemplateProcessing`` template: ``"[CLS] $A [SEP] $B:1"`` gives
    ``[("[CLS]", 0), ("$A", 0), ("[SEP]", 0), ("$B", 1)]``."""
    pieces = []
    for word in template.split():
        name, _, type_id = word.partition(":")
        if name not in TOKEN_NAMES and name not in TEXTS:
            raise ValueError(f"template {template!r}: {name!r} is neither a text ($A, $B) nor one of "
                             f"{list(TOKEN_NAMES)}")
        pieces.append((name, int(type_id or 0)))
    return pieces


class Reading(str, Enum):
    """How a network reads a text under the objective that trained it: what an objective declares for scoring and
    for prompting (``famlab.objectives``: ``ObjectiveRules``), and what a format turns into tokens here."""

    MASKED = "masked"  # one [MASK] at a time: an encoder's pseudo-log-likelihood (scoring) or per-[MASK] argmax (fill)
    CAUSAL = "causal"  # token by token after the lead tokens, under the causal mask
    SENTINEL = "sentinel"  # T5's span format: the blank (the whole text, the end of a prompt) as one masked span
    PREFIX = "prefix"  # a prefix LM: the lead tokens and the prefix read bidirectionally, the rest continued


@dataclass(frozen=True)
class Rule:
    """One reading with the special tokens put first (template names, e.g. ``("[S]",)`` for UL2's S mode).

    For :attr:`Reading.CAUSAL` the lead is what the text is scored (or continued) after; for the others it goes
    first in the (encoder) input, before the prefix or the corrupted text."""

    reading: Reading
    lead: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [name for name in self.lead if name not in TOKEN_NAMES]
        if unknown:
            raise ValueError(f"rule lead {unknown} holds no special token name (known: {', '.join(TOKEN_NAMES)})")

    def lead_ids(self, ids: SpecialIds) -> list[int]:
        """The lead tokens' ids."""
        return [getattr(ids, TOKEN_NAMES[name]) for name in self.lead]


@dataclass(frozen=True)
class InputFormat:
    """A family's input format (module docstring); one subclass per :class:`Arch`.

    Attributes:
        single: the classification template of one text.
        pair: the classification template of a text pair; ``:1`` marks token type 1.
        lm_template: whether an exported language model's tokenizer adds the template (GPT's continues raw text; a
            classifier's always adds it).
    """

    arch: ClassVar[Arch]
    poolings: ClassVar[tuple[str, ...]] = ("cls", "last", "mean")  # the ``finetune.pooling`` values it can read
    measure: ClassVar[str] = "bits_per_byte"  # the byte-normalised zero-shot measure (``objectives/evaluation.py``)

    single: str
    pair: str
    lm_template: bool = True

    def __post_init__(self) -> None:
        for template, texts in ((self.single, ["$A"]), (self.pair, ["$A", "$B"])):
            if [p for p, _ in template_pieces(template) if p in TEXTS] != texts:
                raise ValueError(f"template {template!r} must hold {' then '.join(texts)} once each")

    @property
    def token_types(self) -> bool:
        """Whether the network reads token type ids (the pair template marks a type other than 0)."""
        return any(t for _, t in template_pieces(self.pair))

    @property
    def model_input_names(self) -> list[str]:
        """What a Hugging Face tokenizer of this format returns to the model."""
        types = ["token_type_ids"] if self.token_types else []
        return ["input_ids", *types, "attention_mask"]

    def specials(self, pair: bool) -> int:
        """Special tokens the template adds to one text (``pair=False``) or a pair."""
        return sum(1 for p, _ in template_pieces(self.pair if pair else self.single) if p not in TEXTS)

    def classification(self, a: Sequence[int], b: Sequence[int] | None, ids: SpecialIds, max_len: int
                       ) -> tuple[list[int], list[int]]:
        """One example's ``(token ids, token type ids)``: the texts truncated (:func:`truncate_pair`) so the template's
        special tokens fit in ``max_len``."""
        template = self.single if b is None else self.pair
        ta, tb = truncate_pair(list(a), None if b is None else list(b), max_len - self.specials(b is not None))
        return self._fill(template, {"$A": ta, "$B": tb or []}, ids)

    def wrap(self, tokens: Sequence[int], ids: SpecialIds) -> list[int]:
        """``tokens`` in the single template, untruncated (BERT: ``[CLS] tokens [SEP]``)."""
        return self._fill(self.single, {"$A": list(tokens)}, ids)[0]

    @property
    def offset(self) -> int:
        """Where the text starts in :meth:`wrap`'s row (the special tokens before ``$A``)."""
        return [p for p, _ in template_pieces(self.single)].index("$A")

    @staticmethod
    def _fill(template: str, texts: dict[str, list[int]], ids: SpecialIds) -> tuple[list[int], list[int]]:
        tokens: list[int] = []
        types: list[int] = []
        for piece, type_id in template_pieces(template):
            part = texts[piece] if piece in TEXTS else [getattr(ids, TOKEN_NAMES[piece])]
            tokens += part
            types += [type_id] * len(part)
        return tokens, types

    def template(self, classifier: bool) -> tuple[str, str] | None:
        """``(single, pair)`` for an exported tokenizer's ``TemplateProcessing``; None: it adds no special token."""
        return (self.single, self.pair) if self.lm_template or classifier else None

    def extra_inputs(self, token_types: Tensor, ids: SpecialIds) -> dict[str, Tensor]:
        """A classification batch's inputs besides ``input_ids`` and ``attention_mask``: ``token_types`` ``(B, T)`` as
        ``token_type_ids`` where the network reads them."""
        return {"token_type_ids": token_types} if self.token_types else {}

    def pooled(self, net: Network, batch: Mapping[str, Tensor], pooling: str) -> Tensor:
        """``(B, C)`` pooled hidden states of ``net`` for a classification batch."""
        raise NotImplementedError

    def unused(self, pooling: str) -> tuple[str, ...]:
        """The network's submodules (attribute names) that :meth:`pooled` never reads with ``pooling``: its output
        head ``head`` (an LM or MLM head; a tied one only borrows the token embedding ``embed``, which stays), and
        for an encoder-decoder pooling its encoder, the ``decoder``. A fine-tune drops them (:meth:`body`): DDP
        requires every parameter a module holds to get a gradient in every step."""
        return ("head",)

    def body(self, net: Network, pooling: str) -> Network:
        """``net`` without the submodules :meth:`unused` names, in place (each set to None; a network that lacks
        one is left as it is): what a classifier pooling with ``pooling`` holds. ``net`` can no longer
        ``project`` (nor decode, where the decoder went)."""
        for name in self.unused(pooling):
            if isinstance(getattr(net, name, None), nn.Module):
                setattr(net, name, None)
        return net

    def load_body(self, net: Network, state: Mapping[str, Tensor], pooling: str) -> None:
        """Load a classifier's network weights ``state`` (what :meth:`body` kept) into the whole network ``net``; the
        modules it dropped keep ``net``'s values (a freshly built network's initialisation).

        Raises:
            ValueError: ``state`` lacks a tensor of the body, or has one the network does not.
        """
        dropped = tuple(f"{name}." for name in self.unused(pooling))
        missing, unexpected = net.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith(dropped)]
        if missing or unexpected:
            raise ValueError(f"the classifier's network weights do not fit the model: missing {missing[:3]}, "
                             f"unexpected {list(unexpected)[:3]}")

    def byte_context(self, rule: Rule, ids: SpecialIds) -> tuple[list[int], list[int]]:
        """``(encoder, given)``: what a text scored for bits per byte under ``rule`` (the text rule of the objective
        that trained the network) is conditioned on (``objectives/evaluation.py`` ``bits_per_byte``)."""
        raise ValueError(f"a {self.arch.value} network has no likelihood of a text (its measure is {self.measure})")

    def _rule_error(self, rule: Rule) -> ValueError:
        return ValueError(f"a {self.arch.value} network cannot read a text by the {rule.reading.value} rule")


@dataclass(frozen=True)
class EncoderFormat(InputFormat):
    """A bidirectional encoder (BERT): scored by pseudo-log-likelihood, one ``[MASK]`` at a time."""

    arch: ClassVar[Arch] = Arch.ENCODER
    measure: ClassVar[str] = "pll_bits_per_byte"

    def pooled(self, net: Network, batch: Mapping[str, Tensor], pooling: str) -> Tensor:
        mask = batch["attention_mask"]
        out = net(batch["input_ids"], attention_mask=mask, token_type_ids=batch.get("token_type_ids"),
                  compute_logits=False)
        return heads.pool(out.hidden, mask, pooling)



@dataclass(frozen=True)
class DecoderFormat(InputFormat):
    """A causal decoder (GPT): a text is scored after its rule's lead tokens; a decoder whose objective reads T5's
    span format (decoder-only ``span``) reads the corrupted input as a bidirectional prefix."""

    arch: ClassVar[Arch] = Arch.DECODER

    def pooled(self, net: Network, batch: Mapping[str, Tensor], pooling: str) -> Tensor:
        mask = batch["attention_mask"]
        # Left padding shifts the text; count positions from the first real token so they match pretraining.
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
        out = net(batch["input_ids"], attention_mask=mask, position_ids=positions, compute_logits=False)
        return heads.pool(out.hidden, mask, pooling)

    def byte_context(self, rule: Rule, ids: SpecialIds) -> tuple[list[int], list[int]]:
        if rule.reading is Reading.SENTINEL:  # as T5's span rule, in one sequence with a prefix mask
            return [*rule.lead_ids(ids), ids.sentinel_ids[0], ids.eos], [ids.sentinel_ids[0]]
        if rule.reading is Reading.CAUSAL:
            return [], rule.lead_ids(ids)
        raise self._rule_error(rule)


@dataclass(frozen=True)
class EncoderDecoderFormat(InputFormat):
    """An encoder-decoder (T5): the encoder reads the input, the decoder (started with ``[PAD]``) the target."""

    arch: ClassVar[Arch] = Arch.ENCODER_DECODER
    poolings: ClassVar[tuple[str, ...]] = ("cls", "last", "mean", "decoder")

    def extra_inputs(self, token_types: Tensor, ids: SpecialIds) -> dict[str, Tensor]:
        """Also ``decoder_input_ids`` ``(B, 1)``: the decoder start token ``[PAD]``, as HF T5."""
        extra = super().extra_inputs(token_types, ids)
        return extra | {"decoder_input_ids": torch.full((token_types.shape[0], 1), ids.pad, dtype=torch.long)}

    def pooled(self, net: Network, batch: Mapping[str, Tensor], pooling: str) -> Tensor:
        model = cast(EncoderDecoder, net)  # this format's networks are encoder-decoders
        mask = batch["attention_mask"]
        encoded = model.encode(batch["input_ids"], attention_mask=mask)  # (B, T, C)
        if pooling != "decoder":
            return heads.pool(encoded, mask, pooling)
        decoded = model.decode(batch["decoder_input_ids"], encoded, encoder_attention_mask=mask)
        return decoded[:, 0]  # (B, C): the decoder state at the first step

    def unused(self, pooling: str) -> tuple[str, ...]:
        return ("head",) if pooling == "decoder" else ("decoder", "head")

    def byte_context(self, rule: Rule, ids: SpecialIds) -> tuple[list[int], list[int]]:
        if rule.reading is Reading.SENTINEL:  # the whole text is one masked span
            return [*rule.lead_ids(ids), ids.sentinel_ids[0], ids.eos], [ids.sentinel_ids[0]]
        if rule.reading is Reading.PREFIX:  # the continuation of an empty prefix
            return [*rule.lead_ids(ids), ids.eos], []
        raise self._rule_error(rule)


__all__ = ["Arch", "DecoderFormat", "EncoderDecoderFormat", "EncoderFormat", "InputFormat", "Reading", "Rule",
           "SpecialIds", "template_pieces", "truncate_pair"]
