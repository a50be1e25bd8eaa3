"""Pretraining objectives: how a packed block becomes a batch, and how a batch becomes a loss.

Each family's own objective, as one of three small classes sharing the `Objective` interface
(docs/interfaces.md): `raw_block_len` (tokens per sample the data module must cut), `separator_id`
(joined after every document), `collate(samples)`, `loss(net, batch)` and `tokens_in(batch)`.

An objective also owns how a network it trained is read afterwards (`ObjectiveRules`, `Objective.rules_on`): how
zero-shot scoring and bits per byte put a text to it, how `famlab generate` continues a prompt and `famlab fill`
fills a `[MASK]`, and the report's label of its bits per byte. Every reader asks the objective, looked up through
the registry by the run's family x objective (`famlab.objectives.registry.rules_of`); a rule left undeclared means
"not scored" / "cannot generate", never another objective's rule.

Legend: B batch, T model sequence length, Tt target length, N label tokens in the batch,
K MLM positions per row, V vocab, C model dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from famlab.families.formats import Arch, Reading, Rule
from famlab.families.kernels.dispatch import Kernel, use_fast
from famlab.families.kernels.linear_cross_entropy import linear_cross_entropy
from famlab.families.network import Network
from famlab.objectives.corruption import IGNORE, clm_shift, mlm_mask, span_corrupt, t5_lengths
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.tokens import TokenIds

Batch = dict[str, torch.Tensor]


@dataclass
class LossOutput:
    """What `Objective.loss` returns.

    Attributes:
        loss: scalar, summed cross-entropy / `num_label_tokens` (the mean over label tokens).
        num_label_tokens: N, the number of positions with a label (a Python int is avoided: a 0-d long
            tensor, so no device sync is forced).
        logits: `(B, K, V)` logits at the K selected positions per row when the objective computes them
            sparsely (MLM); `None` for the dense LM objectives (CLM, span, prefix LM, UL2), whose head is fused
            with the loss so their `(B, T, V)` logits never exist.
        labels: target ids with the same leading shape as `logits` (`-100` = no label).
    """

    loss: torch.Tensor
    num_label_tokens: torch.Tensor
    logits: torch.Tensor | None
    labels: torch.Tensor


def _summed_ce(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, label count) over `(..., V)` logits and `(...)` labels, `-100` skipped."""
    # float(): logits may be bf16 under autocast; the log-softmax sum needs fp32.
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), reduction="sum")
    count = (labels != IGNORE).sum()
    return total, count


def dense_lm_loss(net: Network, hidden: torch.Tensor, labels: torch.Tensor) -> LossOutput:
    """Mean cross-entropy of the network's LM head on `hidden` `(B, T, C)` against `labels` `(B, T)`, `-100` skipped.

    The fast path (`famlab.families.kernels.dispatch`) fuses the head's projection (`net.output_embedding()`)
    with the loss (`famlab.families.kernels.linear_cross_entropy`), so the dense `(B, T, V)` logits are never
    materialised; the reference path projects with `net.project`. The output carries `logits=None` either way.
    """
    if use_fast(Kernel.LINEAR_CROSS_ENTROPY, hidden):
        weight, scale = net.output_embedding()  # type: ignore[attr-defined]  # a CausalDecoder / EncoderDecoder
        mean = linear_cross_entropy(hidden, weight, labels, scale=scale, reduction="mean")
    else:
        total, count = _summed_ce(net.project(hidden), labels)  # (B, T, V) logits
        mean = total / count.clamp(min=1)
    return LossOutput(mean, (labels != IGNORE).sum(), None, labels)


def stack_samples(samples: Sequence[torch.Tensor], length: int) -> torch.Tensor:
    """`(B, length)` long tensor from 1-D samples, checking the data module cut them as asked."""
    block = torch.stack([torch.as_tensor(s, dtype=torch.long) for s in samples])
    if block.ndim != 2 or block.shape[1] != length:
        raise ObjectiveError(f"expected samples of {length} tokens (raw_block_len), got shape {tuple(block.shape)}")
    return block


NOT_SCORED = "not scored"  # the bits-per-byte label of an objective that declares no text rule


@dataclass(frozen=True)
class ObjectiveRules:
    """How a network an objective trained is read afterwards; None: the objective declares no such rule.

    Attributes:
        text: bits per byte (``objectives/evaluation.py``): how a whole text is scored (its tokens given what the
            rule puts before them). None: bits per byte is not scored.
        cloze: zero-shot multiple choice (``objectives/zeroshot.py``): how a text with one blank is scored.
            None: every item is skipped as not scored.
        generate: ``famlab generate``: how a prompt is continued (:attr:`Reading.CAUSAL` under the causal mask,
            :attr:`Reading.PREFIX` as a prefix LM, :attr:`Reading.SENTINEL` as one masked span at its end).
            None: ``famlab generate`` refuses the run.
        fill: ``famlab fill``: how ``[MASK]`` s anywhere in a text are filled (:attr:`Reading.MASKED`: one token
            each; :attr:`Reading.SENTINEL`: one sentinel span each). None: only a prefix LM's one ``[MASK]`` at the
            end (a continuation), else ``famlab fill`` refuses the run.
    """

    text: Rule | None = None
    cloze: Rule | None = None
    generate: Rule | None = None
    fill: Rule | None = None

    @property
    def bpb_label(self) -> str:
        """The report's name of how bits per byte scored a text under :attr:`text`: ``PLL`` (one mask at a time),
        ``one span`` (the whole text as the one masked span of an empty input), ``causal`` (token by token from the
        text's start, after the lead tokens or an empty prefix) or ``not scored``."""
        if self.text is None:
            return NOT_SCORED
        return {Reading.MASKED: "PLL", Reading.SENTINEL: "one span"}.get(self.text.reading, "causal")


class Objective:
    """Base class; see the module docstring. Subclasses set `name`, `raw_block_len`, `separator_id`, and declare
    `rules` (or override `rules_on` when they read differently per architecture); the base declares none."""

    name: str
    raw_block_len: int
    separator_id: int
    rules: ClassVar[ObjectiveRules] = ObjectiveRules()
    # whether validation logs `val/mlm_acc`: the share of labels the argmax of its sparse logits gets right
    token_accuracy: ClassVar[bool] = False

    @classmethod
    def rules_on(cls, arch: Arch) -> ObjectiveRules:
        """This objective's rules on a network of ``arch`` (the class's :attr:`rules` unless it overrides this)."""
        return cls.rules

    def __init__(self, ids: TokenIds, seq_len: int, generator: torch.Generator | None = None) -> None:
        self.ids = ids
        self.seq_len = seq_len
        # None: torch's global generator, which Lightning seeds and an exact resume restores.
        self.generator = generator

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        raise NotImplementedError

    def loss(self, net: Network, batch: Batch) -> LossOutput:
        raise NotImplementedError

    def tokens_in(self, batch: Batch) -> int:
        """Tokens the network read in this batch (encoder inputs, plus decoder inputs for T5)."""
        return int(batch["input_ids"].numel())


class MaskedLM(Objective):
    """BERT's masked LM: `[CLS]` + a raw block of `seq_len - 1` tokens, 15 % selected, 80/10/10."""

    name = "mlm"
    rules = ObjectiveRules(text=Rule(Reading.MASKED), cloze=Rule(Reading.MASKED), fill=Rule(Reading.MASKED))
    token_accuracy = True

    def __init__(self, ids: TokenIds, seq_len: int, mask_rate: float, generator: torch.Generator | None) -> None:
        super().__init__(ids, seq_len, generator)
        if not 0.0 < mask_rate < 1.0:
            raise ObjectiveError(f"objective.mask_rate={mask_rate} must be in (0, 1)")
        self.mask_rate = mask_rate
        self.raw_block_len = seq_len - 1
        self.separator_id = ids.sep
        self.num_select = max(1, round(mask_rate * self.raw_block_len))  # K, as mlm_mask selects

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        block = stack_samples(samples, self.raw_block_len)  # (B, T - 1)
        inputs, labels = mlm_mask(block, self.ids, rate=self.mask_rate, generator=self.generator)
        cls = torch.full((block.shape[0], 1), self.ids.cls, dtype=torch.long)
        ignore = torch.full_like(cls, IGNORE)
        return {"input_ids": torch.cat([cls, inputs], 1), "labels": torch.cat([ignore, labels], 1)}  # (B, T)

    def loss(self, net: Network, batch: Batch) -> LossOutput:
        """Sparse MLM loss; `logits` `(B, K, V)` and `labels` `(B, K)` at the K selected positions per row."""
        out = net(batch["input_ids"], compute_logits=False)
        selected = (batch["labels"] != IGNORE).float()  # (B, T)
        # Every row of a batch from `collate` has exactly K selected positions (fewer only in rows made almost
        # entirely of specials, padded here with unlabelled positions). Gathering a fixed K keeps shapes static
        # for torch.compile, where boolean indexing would be data-dependent.
        positions = selected.topk(self.num_select, dim=1).indices  # (B, K)
        labels = batch["labels"].gather(1, positions)  # (B, K)
        hidden = out.hidden.gather(1, positions[..., None].expand(-1, -1, out.hidden.shape[-1]))  # (B, K, C)
        # The vocabulary projection only at the ~15 % selected positions (cramming, Geiping & Goldstein 2022).
        logits = net.project(hidden)  # (B, K, V)
        total, count = _summed_ce(logits, labels)
        return LossOutput(total / count.clamp(min=1), count, logits, labels)


class CausalLM(Objective):
    """GPT's causal LM: a raw block of `seq_len + 1` tokens gives inputs `block[:-1]`, labels `block[1:]`."""

    name = "clm"
    # scored and continued after [EOS], the document separator its blocks join documents with
    rules = ObjectiveRules(text=Rule(Reading.CAUSAL, ("[EOS]",)), cloze=Rule(Reading.CAUSAL, ("[EOS]",)),
                           generate=Rule(Reading.CAUSAL, ("[EOS]",)))

    def __init__(self, ids: TokenIds, seq_len: int, generator: torch.Generator | None) -> None:
        super().__init__(ids, seq_len, generator)
        self.raw_block_len = seq_len + 1
        self.separator_id = ids.eos

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        inputs, labels = clm_shift(stack_samples(samples, self.raw_block_len))  # (B, T) each
        return {"input_ids": inputs, "labels": labels}

    def loss(self, net: Network, batch: Batch) -> LossOutput:
        hidden = net(batch["input_ids"], compute_logits=False).hidden  # (B, T, C)
        return dense_lm_loss(net, hidden, batch["labels"])


# A span-corruption model (T5's, or decoder-only): a text, a blank and the end of a prompt are each one masked span.
SPAN_RULES = ObjectiveRules(text=Rule(Reading.SENTINEL), cloze=Rule(Reading.SENTINEL),
                            generate=Rule(Reading.SENTINEL), fill=Rule(Reading.SENTINEL))


class SpanCorruption(Objective):
    """T5's span corruption: raw length from `t5_lengths` so the encoder inputs are `seq_len` with no padding."""

    name = "span"
    rules = SPAN_RULES

    def __init__(
        self, ids: TokenIds, seq_len: int, density: float, mean_span: float, generator: torch.Generator | None
    ) -> None:
        super().__init__(ids, seq_len, generator)
        self.density = density
        self.mean_span = mean_span
        self.raw_block_len, self.targets_len = t5_lengths(seq_len, density, mean_span)
        self.separator_id = ids.eos

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        block = stack_samples(samples, self.raw_block_len)
        inputs, targets = span_corrupt(
            block, self.ids, density=self.density, mean_span=self.mean_span, generator=self.generator
        )  # (B, T'), (B, Tt)
        # Teacher forcing as HF T5: targets shifted right, [PAD] as the decoder start token.
        start = torch.full((block.shape[0], 1), self.ids.pad, dtype=torch.long)
        decoder_inputs = torch.cat([start, targets[:, :-1]], 1)  # (B, Tt)
        return {"input_ids": inputs, "decoder_input_ids": decoder_inputs, "labels": targets}

    def loss(self, net: Network, batch: Batch) -> LossOutput:
        hidden = net(batch["input_ids"], decoder_input_ids=batch["decoder_input_ids"], compute_logits=False).hidden
        return dense_lm_loss(net, hidden, batch["labels"])  # over the (B, Tt) targets

    def tokens_in(self, batch: Batch) -> int:
        return int(batch["input_ids"].numel() + batch["decoder_input_ids"].numel())


__all__ = [
    "Batch", "LossOutput", "Objective", "ObjectiveRules", "MaskedLM", "CausalLM", "SpanCorruption", "NOT_SCORED",
    "SPAN_RULES", "dense_lm_loss", "stack_samples",
]
