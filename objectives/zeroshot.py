"""Zero-shot multiple choice: every family scores each candidate filler of a blank by its own likelihood.

An item is a text with one blank (``___``) and K candidate fillers. The text is cut into ``prefix``, ``span``
and ``suffix``: whitespace just before the blank moves into the span (``"a ___ of"`` with ``"cat"`` gives
``"a" | " cat" | " of"``), so a byte-level BPE reads the candidate with its leading space, as in running
text. The three pieces are tokenised separately, so every candidate shares the prefix's tokens.

Scoring rules (log-probabilities in nats; ``encode`` gives ids without special tokens):

- GPT, rule ``full`` (default): the causal log-likelihood of the whole text, prefix + span + suffix, given
  one leading token (``[EOS]``, the document separator of GPT's objectives; ``[S]`` for UL2, its LM mode).
  Rule ``span``: the span's tokens only, given the prefix (the suffix is never seen).
- T5 (``span`` / ``ul2``) and a GPT trained with decoder-only ``span``: T5's pretraining format with the
  blank as the one masked span. Input ``prefix <extra_id_0> suffix [EOS]`` (``[R]`` first for UL2's
  regular denoiser); the decoder is given ``<extra_id_0>`` and scores the span's tokens plus the token that
  closes it (``<extra_id_1>`` when text follows the blank, else ``[EOS]``): without it a candidate that is
  the beginning of a longer one would never score lower. GPT reads the input as a bidirectional prefix and
  the target after it in one sequence (as its objective trained).
- T5 ``prefix_lm``: the encoder reads ``prefix [EOS]``; the decoder scores span + suffix (rule ``span``:
  the span only).
- BERT: the pseudo-log-likelihood of the span (Salazar et al. 2020, "Masked Language Model Scoring"):
  ``[CLS] prefix span suffix [SEP]`` with one span token at a time replaced by ``[MASK]``, summing
  ``log p(token | rest)``. It is not a likelihood, but it ranks candidates the same way for every item.
- :class:`BigramLM`: as GPT's rules, with ``log p(t_i | t_{i-1})``.

Which rule applies is the objective's to say (``ObjectiveRules.cloze``, looked up through the registry by the
network's family and the objective that trained it), never inferred from its name: an objective that declares no
cloze rule has every item skipped as not scored (:func:`not_scored`), not scored by another objective's rule.

Per candidate the scorer returns the summed log-probability, the tokens scored and the UTF-8 bytes they
cover (the whole text for GPT ``full``, the span otherwise), so accuracy can use the raw score, the score per
token or the score per byte. A candidate wins only with a score strictly above every other: a tie is wrong.

Edge cases (every tokenizer, every family; an item is never a crash):

- Candidates of one token (all of them, or mixed with longer ones) are scored as any other.
- Candidates that encode to the same tokens are scored once and share that score; they are a tie under every
  normalisation, so neither can win (:meth:`ChoiceScores.wins`), even per byte where their texts' byte counts
  differ (``"Cat"`` / ``"cat"`` under a lowercasing tokenizer): the network cannot tell them apart.
- A prefix or suffix of zero or one token is scored as any other (GPT's ``[EOS]`` lead is always a context).
  A suffix whose text encodes to no tokens closes T5's span with ``[EOS]``, as the blank at the end does: the
  encoder input is then the same.
- An item with a candidate that encodes to no tokens is skipped (:attr:`ChoiceScores.skipped`), not scored:
  an empty filler would score 0 under the span rules (BERT, T5, GPT ``span``), beating every real candidate on
  the raw sum, while GPT ``full`` would score the text without it, so the families would answer different
  questions.
- An item that needs more positions than an absolute position table (``learned``, ``sinusoidal``) holds is
  skipped; relative schemes (RoPE, ALiBi, T5's bias) are scored at any length, as in training.

A skipped item has no winner: accuracy counts it as wrong, so every model and the bigram floor keep the same
denominator (the same items), and ``famlab eval`` reports how many were skipped and why.

Speed: GPT runs the shared context once (KV cache) and the K continuations as one batch; T5 encodes the
shared input once and decodes the K candidates as one batch; BERT needs one forward pass per span token
(all candidates of an item in one batch). Per item: GPT O(L_prefix + K (L_span + L_suffix)) tokens, T5
O(L) encoder + O(K L_span) decoder tokens, BERT O(K L_span) passes of O(L) tokens each. Every tensor is built on
the network's device (a :class:`BigramLM`: its counts' device) and an item's K scores come back to the host in one
transfer.

Legend: K candidates, T continuation length, S context length, V vocab, C model dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from famlab.families import registry
from famlab.families.config import ModelConfig, PosScheme
from famlab.families.formats import Arch, InputFormat, Reading, Rule
from famlab.families.network import CausalDecoder, EncoderDecoder, Network
from famlab.families.registry import family_names
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.prefix import prefix_lm_mask
from famlab.objectives.registry import arch_rules, default_objective, rules_of
from famlab.objectives.tokens import TokenIds
from torch import Tensor, nn

BLANK = "___"
NORMS = ("raw", "per_token", "per_byte")
RULES = ("full", "span")
Encode = Callable[[str], Sequence[int]]


@dataclass(frozen=True)
class Item:
    """One multiple-choice cloze item: ``text`` holds exactly one ``___``; ``choices[label]`` is right."""

    text: str
    choices: tuple[str, ...]
    label: int
    group: str | None = None


@dataclass(frozen=True)
class ChoiceScores:
    """Scores of an item's K candidates (lists of length K).

    Attributes:
        log_prob: summed log-probability (nats) per candidate; NaN when the item is skipped.
        num_tokens: tokens scored per candidate.
        num_bytes: UTF-8 bytes scored per candidate.
        token_class: per candidate, the index of the first candidate with the same tokens (candidates that
            share a class are indistinguishable to the network); None = all distinct.
        skipped: why the item was not scored (None = scored); a skipped item has no winner.
    """

    log_prob: list[float]
    num_tokens: list[int]
    num_bytes: list[int]
    token_class: tuple[int, ...] | None = None
    skipped: str | None = None

    def normalised(self, norm: str) -> list[float]:
        """``raw`` (summed log-probability), ``per_token`` or ``per_byte``."""
        if norm == "raw":
            return list(self.log_prob)
        counts = self.num_tokens if norm == "per_token" else self.num_bytes
        return [lp / max(n, 1) for lp, n in zip(self.log_prob, counts, strict=True)]

    def wins(self, label: int, norm: str) -> bool:
        """Whether candidate ``label`` wins under ``norm``: never for a skipped item or when another candidate
        has the same tokens (a tie the normalisation could otherwise break by byte count alone), else only with
        a score strictly above every other (:func:`is_correct`)."""
        if self.skipped is not None:
            return False
        if self.token_class is not None:
            own = self.token_class[label]
            if any(c == own for i, c in enumerate(self.token_class) if i != label):
                return False
        return is_correct(self.normalised(norm), label)

    @classmethod
    def skip(cls, num_choices: int, reason: str) -> ChoiceScores:
        """The scores of an item that was not scored: NaN log-probabilities (no candidate can win), no tokens."""
        return cls([math.nan] * num_choices, [0] * num_choices, [0] * num_choices, None, reason)


def split_blank(text: str, choice: str) -> tuple[str, str, str]:
    """``(prefix, span, suffix)`` with the whitespace before the blank moved into the span."""
    prefix, suffix = text.split(BLANK, 1)
    stripped = prefix.rstrip()
    return stripped, prefix[len(stripped) :] + choice, suffix


def is_correct(scores: Sequence[float], label: int) -> bool:
    """True only when the right candidate scores strictly above every other (ties are wrong; a NaN never wins
    and is never beaten, so an item with one is wrong)."""
    return all(scores[label] > s for i, s in enumerate(scores) if i != label)


class BigramLM(nn.Module):
    """An add-k bigram model over token ids: ``p(b | a) = (c(a, b) + k) / (c(a) + k V)``.

    Counts are stored sparsely (sorted keys ``a * V + b``), so a 32k vocabulary costs no ``V x V`` table.
    """

    family = "bigram"
    keys: Tensor
    counts: Tensor
    unigram: Tensor

    def __init__(self, vocab_size: int, keys: Tensor, counts: Tensor, unigram: Tensor, k: float) -> None:
        super().__init__()
        self.vocab_size, self.k = vocab_size, k
        self.register_buffer("keys", keys)  # (N,) sorted a * V + b
        self.register_buffer("counts", counts)  # (N,)
        self.register_buffer("unigram", unigram)  # (V,) c(a) as a left context

    @classmethod
    def fit(cls, docs: Sequence[Sequence[int]], vocab_size: int, *, separator: int, k: float = 0.1) -> BigramLM:
        """Count the bigrams of ``docs``, each preceded by ``separator`` (GPT's document separator)."""
        pieces = [torch.tensor([separator, *doc], dtype=torch.long) for doc in docs if len(doc)]
        if not pieces:
            raise ObjectiveError("a bigram model needs at least one non-empty document")
        prev = torch.cat([p[:-1] for p in pieces])
        nxt = torch.cat([p[1:] for p in pieces])
        keys, counts = torch.unique(prev * vocab_size + nxt, return_counts=True)  # sorted
        unigram = torch.bincount(prev, minlength=vocab_size)
        return cls(vocab_size, keys, counts, unigram, k)

    @classmethod
    def fit_stream(cls, stream: np.ndarray | Sequence[int], vocab_size: int, *, separator: int, k: float = 0.1,
                   chunk: int = 1 << 24) -> BigramLM:
        """The counts :meth:`fit` gives for the documents of ``stream`` (a 1-D token array, e.g. a prepared
        training stream's memory map, in which each document is followed by ``separator``), counted ``chunk`` tokens
        at a time: memory grows with the distinct bigrams, not with the corpus."""
        keys, counts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        unigram = np.zeros(vocab_size, dtype=np.int64)
        last = separator  # the first document is preceded by the separator, as in fit
        for lo in range(0, len(stream), chunk):
            part = np.asarray(stream[lo : lo + chunk], dtype=np.int64)
            prev, nxt, last = np.concatenate(([last], part[:-1])), part, int(part[-1])
            keep = nxt != separator  # fit counts no pair into a separator: a document's last token ends it
            prev, nxt = prev[keep], nxt[keep]
            unigram += np.bincount(prev, minlength=vocab_size)[:vocab_size]
            new_keys, new_counts = np.unique(prev * vocab_size + nxt, return_counts=True)
            keys, where = np.unique(np.concatenate((keys, new_keys)), return_inverse=True)
            counts = np.bincount(where, weights=np.concatenate((counts, new_counts)), minlength=len(keys))
            counts = counts.astype(np.int64)
        if not len(keys):
            raise ObjectiveError("a bigram model needs at least one non-empty document")
        return cls(vocab_size, torch.from_numpy(keys), torch.from_numpy(counts), torch.from_numpy(unigram), k)

    def with_k(self, k: float) -> BigramLM:
        """The same counts with another smoothing constant."""
        return BigramLM(self.vocab_size, self.keys, self.counts, self.unigram, k)

    def log_prob(self, prev: Tensor, nxt: Tensor) -> Tensor:
        """``log p(nxt | prev)`` elementwise (float64)."""
        key = prev.long() * self.vocab_size + nxt.long()
        pos = torch.searchsorted(self.keys, key).clamp(max=max(len(self.keys) - 1, 0))
        hit = self.keys[pos] == key
        count = torch.where(hit, self.counts[pos], torch.zeros_like(pos)).double()
        return torch.log((count + self.k) / (self.unigram[prev.long()].double() + self.k * self.vocab_size))

    def nll(self, docs: Sequence[Sequence[int]], separator: int) -> float:
        """Mean negative log-likelihood per token of ``docs`` (each preceded by ``separator``); NaN when they
        hold no token (e.g. every text encoded to nothing)."""
        device = self.keys.device
        pieces = [torch.tensor([separator, *doc], dtype=torch.long, device=device) for doc in docs if len(doc)]
        if not pieces:
            return math.nan
        seq = torch.cat([p[:-1] for p in pieces]), torch.cat([p[1:] for p in pieces])
        return float(-self.log_prob(*seq).mean())


def _config(net: Network) -> ModelConfig:
    return net.config


def _device(net: Network | BigramLM) -> torch.device:
    """Where ``net``'s tensors sit: a bigram's counts, a network's parameters."""
    tensors = net.buffers() if isinstance(net, BigramLM) else cast(nn.Module, net).parameters()
    return next(iter(tensors)).device


EMPTY_CANDIDATE = "a candidate encodes to no tokens"
# The cloze readings each architecture's scorer implements (a bigram: causal only).
READINGS: dict[Arch, tuple[Reading, ...]] = {
    Arch.ENCODER: (Reading.MASKED,),
    Arch.DECODER: (Reading.CAUSAL, Reading.SENTINEL),
    Arch.ENCODER_DECODER: (Reading.SENTINEL, Reading.PREFIX),
}


def not_scored(objective: str) -> str:
    """The skip reason of every item under an objective that declares no cloze rule (``ObjectiveRules.cloze``)."""
    return f"objective {objective} declares no scoring rule: not scored"


class _TooLong(ObjectiveError):
    """An item needs more positions than the network's absolute position table: :meth:`Scorer.score` skips it."""


def _check_len(net: Network, n: int) -> None:
    """Raise :class:`_TooLong` when a stack would be fed ``n`` positions past an absolute table (the stack itself
    raises there; relative schemes have no table and run at any length)."""
    cfg = _config(net)
    pos = getattr(cfg.pos, "value", cfg.pos)
    if PosScheme(pos).length_bounded and n > cfg.max_seq_len:
        # The reason names the model, not the item, so ``famlab eval`` can count skips per reason.
        raise _TooLong(f"needs more than model.max_seq_len={cfg.max_seq_len} positions (model.pos={pos})")


def _token_log_probs(logits: Tensor, targets: Tensor) -> Tensor:
    """``log p(target)`` per position (float64): logits ``(..., V)``, targets ``(...)``."""
    return logits.double().log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def _pad(rows: list[list[int]], pad: int, device: torch.device) -> Tensor:
    """``(N, T)`` rows right padded with ``pad``, built on ``device`` (the network's) in one copy."""
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long, device=device)


def _masked_sums(lp: Tensor, masks: list[list[bool]]) -> list[float]:
    """Per row of ``lp`` ``(K, T)`` the sum of the positions its mask (at most T long, the rest off) selects."""
    keep = _pad([[int(m) for m in mask] for mask in masks], 0, lp.device).bool()  # (K, T') with T' <= T
    return torch.where(keep, lp[:, : keep.shape[1]], 0.0).sum(1).tolist()  # one host sync per item


class Scorer:
    """Scores items under one network (or :class:`BigramLM`) with its family's rule (module docstring).

    Args:
        net: a famlab BERT / GPT / T5 network or a :class:`BigramLM`.
        encode: text -> token ids without special tokens.
        ids: the tokenizer's special ids.
        objective: the objective the network was pretrained with (selects the input format); None = the
            family's default.
        rule: ``full`` or ``span`` (GPT and the bigram only; see the module docstring).
    """

    def __init__(self, net: Network | BigramLM, encode: Encode, ids: TokenIds, *, objective: str | None = None,
                 rule: str = "full") -> None:
        if rule not in RULES:
            raise ObjectiveError(f"rule={rule!r} must be one of {', '.join(RULES)}")
        family = getattr(net, "family", None)
        bigram = isinstance(net, BigramLM)
        if not bigram and family not in family_names():
            raise ObjectiveError(f"expected a famlab network or BigramLM, got {type(net).__name__}")
        self.net, self.encode, self.ids, self.rule, self.family = net, encode, ids, rule, str(family)
        self.format: InputFormat | None = None if bigram else registry.family(self.family).input_format
        # The objective's own cloze rule (ObjectiveRules); None: it declares none, and every item is not scored.
        self.cloze: Rule | None
        if self.format is None:  # the bigram is causal: it scores as a decoder (trained with clm by default)
            self.arch, self.objective = Arch.DECODER, objective or "clm"
            self.cloze = arch_rules(self.arch, self.objective).cloze
        else:
            self.arch, self.objective = self.format.arch, objective or default_objective(self.family)
            self.cloze = rules_of(self.family, self.objective).cloze
        readable = READINGS[self.arch] if self.format is not None else (Reading.CAUSAL,)
        if self.cloze is not None and self.cloze.reading not in readable:
            raise ObjectiveError(f"objective {self.objective}'s cloze rule ({self.cloze.reading.value}) cannot score a "
                                 f"{self.arch.value if self.format is not None else 'bigram'} model")
        self.device = _device(net)

    def _ids(self, text: str) -> list[int]:
        return list(self.encode(text)) if text else []

    @torch.no_grad()
    def score(self, item: Item) -> ChoiceScores:
        """Log-probability, tokens scored and bytes scored of each candidate of ``item``.

        An item with a candidate that encodes to no tokens, or one that needs more positions than the network's
        absolute position table, comes back skipped (:meth:`ChoiceScores.skip`, the reason in ``skipped``).
        """
        if self.cloze is None:
            return ChoiceScores.skip(len(item.choices), not_scored(self.objective))
        cloze = self.cloze
        pieces = [split_blank(item.text, c) for c in item.choices]
        prefix, suffix = self._ids(pieces[0][0]), self._ids(pieces[0][2])
        spans = [self._ids(span) for _, span, _ in pieces]
        if any(not s for s in spans):
            return ChoiceScores.skip(len(spans), EMPTY_CANDIDATE)
        # Candidates with the same tokens are scored once: their scores are then equal bit for bit (a batch
        # need not give two equal rows equal results), and the duplicate costs nothing.
        unique: list[list[int]] = []
        for s in spans:
            if s not in unique:
                unique.append(s)
        token_class = tuple(spans.index(s) for s in spans)
        slot = [unique.index(s) for s in spans]
        # A suffix text that encodes to nothing leaves the encoder input as the blank at the end does.
        text_follows = bool(suffix) and bool(pieces[0][2].strip())
        was_training = self.net.training
        self.net.eval()
        try:
            if cloze.reading is Reading.MASKED:
                scored = self._pll(prefix, unique, suffix)
                counts = [len(s) for s in unique]
            elif cloze.reading is Reading.CAUSAL:
                scored, counts = self._causal(cloze, prefix, unique, suffix)
            else:
                scored, counts = self._sentinel(cloze, prefix, unique, suffix, text_follows=text_follows)
        except _TooLong as e:
            return ChoiceScores.skip(len(spans), str(e))
        finally:
            self.net.train(was_training)
        log_prob, tokens = [scored[j] for j in slot], [counts[j] for j in slot]
        whole = cloze.reading is Reading.CAUSAL and self.rule == "full"
        pieces_scored = [p + s + x if whole else s for p, s, x in pieces]
        if cloze.reading is Reading.PREFIX and self.rule == "full":
            pieces_scored = [s + x for _, s, x in pieces]
        return ChoiceScores(log_prob, tokens, [len(t.encode("utf-8")) for t in pieces_scored], token_class)

    def _causal(self, cloze: Rule, prefix: list[int], spans: list[list[int]], suffix: list[int]
                ) -> tuple[list[float], list[int]]:
        """GPT / bigram: ``[lead] prefix`` once, then the K continuations ``span suffix`` from its cache."""
        context = [*cloze.lead_ids(self.ids), *prefix]
        conts = [s + suffix for s in spans]
        scored = [[True] * len(s) + [self.rule == "full"] * len(suffix) for s in spans]
        if self.format is None:
            ctx_lp, cont_lp = self._bigram(context, conts)
        else:
            ctx_lp, cont_lp = self._gpt(context, conts, bidirectional=0)
        full = self.rule == "full"
        out = [float(ctx_lp if full else 0.0) + lp for lp in _masked_sums(cont_lp, scored)]
        tokens = [(len(prefix) if full else 0) + sum(m) for m in scored]
        return out, tokens

    def _bigram(self, context: list[int], conts: list[list[int]]) -> tuple[float, Tensor]:
        net = cast(BigramLM, self.net)
        c = torch.tensor(context, device=self.device)
        ctx_lp = float(net.log_prob(c[:-1], c[1:]).sum())
        rows = _pad([[context[-1], *cont] for cont in conts], self.ids.pad, self.device)  # (K, T + 1)
        return ctx_lp, net.log_prob(rows[:, :-1], rows[:, 1:])  # (K, T)

    def _gpt(self, context: list[int], conts: list[list[int]], bidirectional: int) -> tuple[float, Tensor]:
        """Summed log-probability of ``context[1:]`` (causal part) and per-token log-probabilities ``(K, T)`` of
        each continuation. ``bidirectional``: length of the context's prefix-LM prefix (0 = plain causal)."""
        net = cast(CausalDecoder, self.net)
        width = max(len(c) for c in conts)
        _check_len(net, len(context) + width - 1)  # fed: the context, then each continuation but its last token
        cache = net.decoder.new_cache()
        ctx = torch.tensor([context], device=self.device)  # (1, S)
        mask = None
        if bidirectional:  # prefix-LM: the context's first `bidirectional` positions read each other
            mask = prefix_lm_mask(torch.tensor([bidirectional], device=self.device), len(context))
        out = net(ctx, attention_mask=mask, cache=cache).logits
        assert out is not None  # compute_logits defaults to True
        ctx_logits = out[0]  # (S, V)
        ctx_lp = float(_token_log_probs(ctx_logits[:-1], ctx[0, 1:]).sum()) if not bidirectional else 0.0
        K = len(conts)
        for layer in cache:  # the shared context's keys and values serve every candidate
            layer["self"] = {name: t.expand(K, *t.shape[1:]) for name, t in layer["self"].items()}  # (K, H, S, D)
        rows = _pad(conts, self.ids.pad, self.device)  # (K, T); right padding: causal rows never see it
        logits = net(rows[:, :-1], cache=cache).logits if width > 1 else None  # (K, T - 1, V)
        first = _token_log_probs(ctx_logits[-1].expand(K, -1), rows[:, 0])  # (K,)
        # Every continuation one token long (T = 1): nothing follows the first token, an empty (K, 0) block.
        rest = _token_log_probs(logits, rows[:, 1:]) if logits is not None else first.new_zeros(K, 0)  # (K, T - 1)
        return ctx_lp, torch.cat([first[:, None], rest], 1)

    def _sentinel(self, cloze: Rule, prefix: list[int], spans: list[list[int]], suffix: list[int], text_follows: bool
                  ) -> tuple[list[float], list[int]]:
        """T5's span format (or a T5 prefix LM's continuation); GPT-span in one sequence."""
        ids, s0, lead = self.ids, self.ids.sentinel_ids[0], cloze.lead_ids(self.ids)
        if cloze.reading is Reading.PREFIX:
            encoder, given = [*lead, *prefix, ids.eos], []
            targets = [s + suffix for s in spans]
            scored = [[True] * len(s) + [self.rule == "full"] * len(suffix) for s in spans]
        else:
            close = ids.sentinel_ids[1] if text_follows else ids.eos
            encoder, given = [*lead, *prefix, s0, *suffix, ids.eos], [s0]
            targets = [s + [close] for s in spans]
            scored = [[True] * len(t) for t in targets]
        if self.arch is Arch.DECODER:
            _, lp = self._gpt(encoder + given, targets, bidirectional=len(encoder))
        else:
            lp = self._t5(encoder, given, targets)
        return _masked_sums(lp, scored), [sum(m) for m in scored]

    def _t5(self, encoder: list[int], given: list[int], targets: list[list[int]]) -> Tensor:
        """Per-token log-probabilities ``(K, T)`` of each target: one encoder pass shared by the K decodes."""
        net = cast(EncoderDecoder, self.net)
        K = len(targets)
        rows = _pad([[self.ids.pad, *given, *t] for t in targets], self.ids.pad, self.device)  # (K, 1 + G + T)
        _check_len(net, max(len(encoder), rows.shape[1] - 1))  # encoder and decoder stacks share max_seq_len
        hidden = net.encode(torch.tensor([encoder], device=self.device))  # (1, S, C)
        out = net.decode(rows[:, :-1], hidden.expand(K, -1, -1))  # (K, G + T, C)
        logits = net.project(out[:, len(given) :])  # (K, T, V)
        return _token_log_probs(logits, rows[:, 1 + len(given) :])

    def _pll(self, prefix: list[int], spans: list[list[int]], suffix: list[int]) -> list[float]:
        """BERT: one row per span token with that token masked; all candidates of the item in one batch."""
        net = cast(Network, self.net)
        ids = self.ids
        rows, positions, targets, owner = [], [], [], []
        fmt = self.format
        assert fmt is not None
        for k, span in enumerate(spans):
            full = fmt.wrap([*prefix, *span, *suffix], ids)  # BERT: [CLS] prefix span suffix [SEP]
            _check_len(net, len(full))
            for j in range(len(span)):
                i = fmt.offset + len(prefix) + j
                rows.append(full[:i] + [ids.mask] + full[i + 1 :])
                positions.append(i)
                targets.append(full[i])
                owner.append(k)
        seq = _pad(rows, ids.pad, self.device)  # (N, T)
        mask = _pad([[1] * len(r) for r in rows], 0, self.device)  # (N, T)
        hidden = net(seq, attention_mask=mask, compute_logits=False).hidden  # (N, T, C)
        at = hidden[torch.arange(len(rows), device=self.device), torch.tensor(positions, device=self.device)]
        lp = _token_log_probs(net.project(at), torch.tensor(targets, device=self.device))  # (N,)
        sums = torch.zeros(len(spans), dtype=torch.float64, device=self.device)
        return sums.index_add_(0, torch.tensor(owner, device=self.device), lp).tolist()  # (K,), one host sync


def score_items(scorer: Scorer, items: Sequence[Item]) -> list[ChoiceScores]:
    """:meth:`Scorer.score` of every item, in order (skipped items included, flagged in ``skipped``)."""
    return [scorer.score(item) for item in items]


def skipped(scores: Sequence[ChoiceScores]) -> dict[str, int]:
    """{reason: number of items} over the skipped items of ``scores`` (empty when every item was scored)."""
    out: dict[str, int] = {}
    for s in scores:
        if s.skipped is not None:
            out[s.skipped] = out.get(s.skipped, 0) + 1
    return out


def correct(items: Sequence[Item], scores: Sequence[ChoiceScores], norm: str) -> list[float]:
    """Per item 1.0 when the right candidate wins under ``norm`` (:meth:`ChoiceScores.wins`: ties, candidates
    with the same tokens and skipped items lose), else 0.0."""
    if norm not in NORMS:
        raise ObjectiveError(f"norm={norm!r} must be one of {', '.join(NORMS)}")
    return [float(s.wins(it.label, norm)) for it, s in zip(items, scores, strict=True)]


def length_only(items: Sequence[Item]) -> list[float]:
    """Per item 1.0 when the right candidate is strictly the shortest in UTF-8 bytes (ties lose), else 0.0.

    What candidate length alone gets: a score with a length bias (the raw sum favours fewer tokens, a
    normalisation can favour more) drifts towards this, or towards its mirror image, without reading the text.
    """
    return [float(is_correct([-len(c.encode("utf-8")) for c in it.choices], it.label)) for it in items]


def chance(items: Sequence[Item]) -> float:
    """Expected accuracy of a uniform random guess: the mean of 1 / K."""
    return math.fsum(1.0 / len(it.choices) for it in items) / max(len(items), 1)


__all__ = ["BLANK", "EMPTY_CANDIDATE", "NORMS", "BigramLM", "ChoiceScores", "Item", "Scorer", "chance", "correct",
           "is_correct", "length_only", "score_items", "skipped", "split_blank"]


HEADLINE = "per_byte"  # the default headline (famlab eval's docstring)
HEADLINES = {"wordnet-minimal-pairs": "raw"}  # tasks of minimal pairs: raw, as BLiMP (famlab eval's docstring)


def headline(task: str) -> str:
    """The normalisation whose accuracy is ``task``'s headline: ``raw`` for minimal pairs, else ``per_byte``."""
    return HEADLINES.get(task, HEADLINE)
