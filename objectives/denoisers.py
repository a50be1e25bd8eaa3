"""The objectives beyond each family's default: prefix LM, decoder-only span corruption, UL2, SpanBERT.

| family | objective | batch |
|---|---|---|
| gpt | `prefix_lm` | one sequence; bidirectional over a random-length prefix, causal after, loss on the rest |
| gpt | `span` | `corrupted input [EOS]` then `s0 span0 s1 ... [EOS]` in one sequence; prefix = the input |
| gpt | `ul2` | mode token then one of R / X (as `span`) or S (as `prefix_lm`), mixed per row |
| t5 | `prefix_lm` | encoder reads `prefix [EOS]`, decoder writes `rest [EOS]` |
| t5 | `ul2` | encoder reads `[mode] corrupted input [EOS]` (R / X) or `[S] prefix [EOS]` (S) |
| bert | `span_mlm` | SpanBERT span masking, sparse MLM loss as `mlm` |

UL2 (Tay et al. 2022): R = regular span corruption (mean span 3, density 0.15), X = extreme (long spans
and/or density 0.5), S = sequential (prefix LM); the mode token `[R]` / `[X]` / `[S]` goes first, so a
prompt can later ask for a mode. The mode is drawn per row with `rates`.

Position schemes under a prefix mask (GPT): learned, sinusoidal, RoPE and ALiBi (symmetric distance) tell
a later prefix token from an earlier one; `t5_bias` in a causal stack has only past buckets, so every
later prefix key shares the distance-0 bucket (a limitation of the unidirectional table, not of the mask).

Legend: B batch, R raw block length, T model sequence length, Q target length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from famlab.families.formats import Arch, Reading, Rule
from famlab.families.network import Network
from famlab.objectives.corruption import span_corrupt, span_counts
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.objective import (
    SPAN_RULES,
    Batch,
    LossOutput,
    MaskedLM,
    Objective,
    ObjectiveRules,
    dense_lm_loss,
    stack_samples,
)
from famlab.objectives.prefix import (
    decoder_batch,
    encoder_decoder_batch,
    pad_right,
    prefix_lm_mask,
    sample_prefix_len,
    split_prefix,
)
from famlab.objectives.spans import span_mlm_mask
from famlab.objectives.tokens import TokenIds


@dataclass(frozen=True)
class Denoiser:
    """One UL2 mode: span corruption at (`density`, `mean_span`), or a prefix LM when `density` is None."""

    mode: str  # r | x | s
    density: float | None = None
    mean_span: float = 3.0


def _span_lengths(raw: int, d: Denoiser) -> tuple[int, int]:
    """(corrupted input length incl. [EOS], target length incl. [EOS]) of span corruption on `raw` tokens."""
    assert d.density is not None
    noise, spans = span_counts(raw, d.density, d.mean_span)
    return raw - noise + spans + 1, noise + spans + 1


def _largest_raw(fits: object, limit: int) -> int:
    """Largest raw length `r` in [3, limit] with `fits(r)`; the lengths grow with r, so scan up."""
    best = 0
    for raw in range(3, limit + 1):
        if fits(raw):  # type: ignore[operator]
            best = raw
    if best == 0:
        raise ObjectiveError(f"data.seq_len is too short for this objective (no raw block length up to {limit} fits)")
    return best


class _DecoderOnly(Objective):
    """A GPT objective whose batches carry `prefix_len`: prefix attention from `prefix_lm_mask`."""

    def loss(self, net: Network, batch: Batch) -> LossOutput:
        mask = prefix_lm_mask(batch["prefix_len"], batch["input_ids"].shape[1])  # (B, 1, T, T)
        hidden = net(batch["input_ids"], attention_mask=mask, compute_logits=False).hidden  # (B, T, C)
        return dense_lm_loss(net, hidden, batch["labels"])


class _EncoderDecoder(Objective):
    """A T5 objective with right-padded encoder inputs (`attention_mask`) and targets."""

    def loss(self, net: Network, batch: Batch) -> LossOutput:
        hidden = net(
            batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=batch["decoder_input_ids"],
            compute_logits=False,
        ).hidden  # (B, Q, C)
        return dense_lm_loss(net, hidden, batch["labels"])

    def tokens_in(self, batch: Batch) -> int:
        """Real (non-padding) encoder tokens plus decoder tokens up to each row's last label."""
        return int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum())


class GPTPrefixLM(_DecoderOnly):
    """GPT prefix LM on a raw block of `seq_len + 1` tokens; prefix length P uniform in [1, T - 1] per row,
    or `round(prefix_fraction * T)` for every row."""

    name = "prefix_lm"
    # scored as GPT's clm (after [EOS], causal); a prompt is read bidirectionally after [EOS], as in training
    rules = ObjectiveRules(text=Rule(Reading.CAUSAL, ("[EOS]",)), cloze=Rule(Reading.CAUSAL, ("[EOS]",)),
                           generate=Rule(Reading.PREFIX, ("[EOS]",)))

    def __init__(self, ids: TokenIds, seq_len: int, prefix_fraction: float | None, generator: torch.Generator | None):
        super().__init__(ids, seq_len, generator)
        self.prefix_fraction = prefix_fraction
        self.raw_block_len = seq_len + 1
        self.separator_id = ids.eos

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        z = stack_samples(samples, self.raw_block_len)  # (B, T + 1)
        batch = z.shape[0]
        prefix = sample_prefix_len(batch, 1, self.seq_len - 1, self.prefix_fraction, self.generator)
        return decoder_batch(z, prefix, torch.full((batch,), z.shape[1]))


class GPTSpan(_DecoderOnly):
    """Decoder-only span corruption: `inputs` then `targets` of T5's span corruption in one sequence.

    The raw length is the largest whose `inputs + targets` fit `seq_len + 1` tokens; the few leftover
    positions are `[PAD]` without loss.
    """

    name = "span"
    rules = SPAN_RULES

    def __init__(self, ids: TokenIds, seq_len: int, density: float, mean_span: float,
                 generator: torch.Generator | None) -> None:
        super().__init__(ids, seq_len, generator)
        self.denoiser = Denoiser("r", density, mean_span)
        self.raw_block_len = _largest_raw(lambda r: sum(_span_lengths(r, self.denoiser)) <= seq_len + 1, seq_len)
        self.separator_id = ids.eos

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        block = stack_samples(samples, self.raw_block_len)
        z, prefix, length = _decoder_span(block, self.ids, self.denoiser, None, self.generator)
        return decoder_batch(pad_right(z, self.seq_len + 1, self.ids.pad), prefix, length)


def _decoder_span(
    block: torch.Tensor, ids: TokenIds, d: Denoiser, lead: int | None, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`([lead] inputs targets, prefix_len, length)` for a decoder-only span-corruption group."""
    assert d.density is not None
    inputs, targets = span_corrupt(block, ids, density=d.density, mean_span=d.mean_span, generator=generator)
    parts = [inputs, targets]
    if lead is not None:
        parts.insert(0, torch.full((block.shape[0], 1), lead, dtype=block.dtype))
    z = torch.cat(parts, 1)
    batch = block.shape[0]
    prefix = torch.full((batch,), z.shape[1] - targets.shape[1])
    return z, prefix, torch.full((batch,), z.shape[1])


class T5PrefixLM(_EncoderDecoder):
    """T5 prefix LM on a raw block of `seq_len - 1` tokens: encoder `block[:P] [EOS]`, decoder `block[P:] [EOS]`."""

    name = "prefix_lm"
    # the encoder reads `prefix [EOS]` (for bits per byte an empty prefix), the decoder continues
    rules = ObjectiveRules(text=Rule(Reading.PREFIX), cloze=Rule(Reading.PREFIX), generate=Rule(Reading.PREFIX))

    def __init__(self, ids: TokenIds, seq_len: int, prefix_fraction: float | None, generator: torch.Generator | None):
        super().__init__(ids, seq_len, generator)
        self.prefix_fraction = prefix_fraction
        self.raw_block_len = seq_len - 1  # P <= R - 1 = T - 2, so the encoder's P + 1 tokens fit T
        self.separator_id = ids.eos

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        block = stack_samples(samples, self.raw_block_len)
        raw = self.raw_block_len
        prefix = sample_prefix_len(block.shape[0], 1, raw - 1, self.prefix_fraction, self.generator)
        enc, enc_len, tgt, tgt_len = split_prefix(block, prefix, eos=self.ids.eos, pad=self.ids.pad)
        # Fixed widths (T and R) whatever this batch's split points: static shapes for torch.compile.
        enc, tgt = pad_right(enc, self.seq_len, self.ids.pad), pad_right(tgt, raw, self.ids.pad)
        return encoder_decoder_batch(enc, enc_len, tgt, tgt_len, pad=self.ids.pad)


class UL2(Objective):
    """UL2's mixture of denoisers for GPT (`decoder_only=True`) or T5.

    Args:
        rates: probabilities of R, X, S per row (normalised).
        r, x: the R and X denoisers' (density, mean span).
        prefix_fraction: S's split point (None = uniform per row).
    """

    name = "ul2"

    @classmethod
    def rules_on(cls, arch: Arch) -> ObjectiveRules:
        """A prompt is continued in the S mode (``[S]`` first, a prefix LM) and ``[MASK]`` s are filled in the R mode
        (``[R]`` first, regular span corruption). A text is scored in the S mode: after ``[S]`` (GPT, causal) or as
        the continuation of ``[S] [EOS]`` (T5); a blank is scored causally after ``[S]`` (GPT) or as the R mode's
        one masked span (T5)."""
        s_mode, r_mode = ("[S]",), ("[R]",)
        if arch is Arch.DECODER:
            text = cloze = Rule(Reading.CAUSAL, s_mode)
        else:
            text, cloze = Rule(Reading.PREFIX, s_mode), Rule(Reading.SENTINEL, r_mode)
        return ObjectiveRules(text=text, cloze=cloze, generate=Rule(Reading.PREFIX, s_mode),
                              fill=Rule(Reading.SENTINEL, r_mode))

    def __init__(
        self,
        ids: TokenIds,
        seq_len: int,
        *,
        decoder_only: bool,
        rates: Sequence[float],
        r: tuple[float, float],
        x: tuple[float, float],
        prefix_fraction: float | None,
        generator: torch.Generator | None,
    ) -> None:
        super().__init__(ids, seq_len, generator)
        if len(rates) != 3 or min(rates) < 0 or sum(rates) <= 0:
            raise ObjectiveError(f"objective.ul2_rates={list(rates)} must be three non-negative rates (R, X, S)")
        self.rates = torch.tensor([float(v) for v in rates], dtype=torch.float64) / sum(rates)
        self.denoisers = (Denoiser("r", r[0], r[1]), Denoiser("x", x[0], x[1]), Denoiser("s"))
        self.mode_ids = (ids.r, ids.x, ids.s)
        self.decoder_only = decoder_only
        self.prefix_fraction = prefix_fraction
        self.separator_id = ids.eos
        spans = self.denoisers[:2]
        if decoder_only:  # [mode] inputs targets <= T + 1; S: [S] block <= T + 1
            self.raw_block_len = _largest_raw(
                lambda raw: max(1 + sum(_span_lengths(raw, d)) for d in spans) <= seq_len + 1, seq_len
            )
        else:  # encoder [mode] inputs <= T; S's prefix is capped at T - 2 below
            self.raw_block_len = _largest_raw(
                lambda raw: max(1 + _span_lengths(raw, d)[0] for d in spans) <= seq_len, 4 * seq_len
            )
            # S's shortest prefix (1 token) leaves a target of R tokens ([EOS] included).
            self.max_target_len = max([self.raw_block_len] + [_span_lengths(self.raw_block_len, d)[1] for d in spans])

    def sample_modes(self, batch: int) -> torch.Tensor:
        """`(B,)` mode index per row: 0 = R, 1 = X, 2 = S."""
        return torch.multinomial(self.rates, batch, replacement=True, generator=self.generator)

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        block = stack_samples(samples, self.raw_block_len)
        modes = self.sample_modes(block.shape[0])
        # Corrupt each mode's rows together (span_corrupt needs equal counts per row), pad, then restore order.
        order = torch.cat([torch.nonzero(modes == m).flatten() for m in range(3)])
        groups = [block[modes == m] for m in range(3)]
        if self.decoder_only:
            return self._decoder(groups, order)
        return self._encoder_decoder(groups, order)

    def _decoder(self, groups: list[torch.Tensor], order: torch.Tensor) -> Batch:
        width = self.seq_len + 1
        zs, prefixes, lengths = [], [], []
        for d, lead, rows in zip(self.denoisers, self.mode_ids, groups, strict=True):
            if rows.shape[0] == 0:
                continue
            if d.density is None:  # S: [S] block, split at a random point of the block
                raw = rows.shape[1]
                p = sample_prefix_len(rows.shape[0], 1, raw - 1, self.prefix_fraction, self.generator)
                z = torch.cat([torch.full((rows.shape[0], 1), lead, dtype=rows.dtype), rows], 1)
                prefix, length = 1 + p, torch.full((rows.shape[0],), raw + 1)
            else:
                z, prefix, length = _decoder_span(rows, self.ids, d, lead, self.generator)
            zs.append(pad_right(z, width, self.ids.pad))
            prefixes.append(prefix)
            lengths.append(length)
        inverse = order.argsort()
        z, prefix, length = (torch.cat(t)[inverse] for t in (zs, prefixes, lengths))
        return decoder_batch(z, prefix, length)

    def _encoder_decoder(self, groups: list[torch.Tensor], order: torch.Tensor) -> Batch:
        parts = []
        for d, lead, rows in zip(self.denoisers, self.mode_ids, groups, strict=True):
            n = rows.shape[0]
            if n == 0:
                continue
            if d.density is None:  # S: encoder [S] prefix [EOS] within T tokens
                high = min(rows.shape[1] - 1, self.seq_len - 2)
                p = sample_prefix_len(n, 1, high, self.prefix_fraction, self.generator)
                parts.append(split_prefix(rows, p, eos=self.ids.eos, pad=self.ids.pad, lead=lead))
            else:
                inputs, targets = span_corrupt(
                    rows, self.ids, density=d.density, mean_span=d.mean_span, generator=self.generator
                )
                enc = torch.cat([torch.full((n, 1), lead, dtype=rows.dtype), inputs], 1)
                parts.append((enc, torch.full((n,), enc.shape[1]), targets, torch.full((n,), targets.shape[1])))
        # Fixed widths whatever modes this batch drew (static shapes): T, and the longest target any mode makes.
        enc_w, tgt_w = self.seq_len, self.max_target_len
        inverse = order.argsort()
        enc = torch.cat([pad_right(p[0], enc_w, self.ids.pad) for p in parts])[inverse]
        tgt = torch.cat([pad_right(p[2], tgt_w, self.ids.pad) for p in parts])[inverse]
        enc_len = torch.cat([p[1] for p in parts])[inverse]
        tgt_len = torch.cat([p[3] for p in parts])[inverse]
        return encoder_decoder_batch(enc, enc_len, tgt, tgt_len, pad=self.ids.pad)

    def loss(self, net: Network, batch: Batch) -> LossOutput:
        impl = _DecoderOnly.loss if self.decoder_only else _EncoderDecoder.loss
        return impl(self, net, batch)  # type: ignore[arg-type]

    def tokens_in(self, batch: Batch) -> int:
        if self.decoder_only:
            return int(batch["input_ids"].numel())
        return _EncoderDecoder.tokens_in(self, batch)  # type: ignore[arg-type]


class SpanMaskedLM(MaskedLM):
    """BERT with SpanBERT masking (`span_mlm`): same format and sparse loss as `mlm`, spans from `span_mlm_mask`."""

    name = "span_mlm"

    def __init__(
        self, ids: TokenIds, seq_len: int, mask_rate: float, p: float, max_span: int, generator: torch.Generator | None
    ) -> None:
        super().__init__(ids, seq_len, mask_rate, generator)
        self.p = p
        self.max_span = max_span
        span_mlm_mask(torch.full((1, self.raw_block_len), ids.unk), ids, rate=mask_rate, p=p, max_span=max_span)

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        block = stack_samples(samples, self.raw_block_len)  # (B, T - 1)
        inputs, labels = span_mlm_mask(
            block, self.ids, rate=self.mask_rate, p=self.p, max_span=self.max_span, generator=self.generator
        )
        cls = torch.full((block.shape[0], 1), self.ids.cls, dtype=torch.long)
        ignore = torch.full_like(cls, -100)
        return {"input_ids": torch.cat([cls, inputs], 1), "labels": torch.cat([ignore, labels], 1)}
