"""Zero-shot yardsticks that mean the same thing for every tokenizer: bits per byte, and length extrapolation.

Scoring rules (exact; a text is split into chunks of at most `max_len` scored tokens, each chunk scored on
its own, so no chunk ever sees more context than the network was built for):

- GPT, `bits_per_byte`: causal log-likelihood of the text's tokens given one leading token — `[EOS]` (the
  document separator GPT's objectives join documents with) for `clm` and `prefix_lm`, or `[S]` for a
  UL2-trained GPT (the S mode is its language-model mode); attention is plain causal. A GPT trained with
  decoder-only `span` gets T5's span rule in one sequence: prefix `<extra_id_0> [EOS]` (bidirectional),
  then `<extra_id_0>` given, then the text scored.
- T5, `bits_per_byte`: the decoder scores the text's tokens given an encoder input that holds no text:
  `<extra_id_0> [EOS]` with `<extra_id_0>` given as the decoder's first token for `span` (the whole text is
  one masked span), `[EOS]` for `prefix_lm` (an empty prefix), `[S] [EOS]` for `ul2`.
- BERT, `pll_bits_per_byte`: pseudo-log-likelihood (Salazar et al. 2020): `[CLS] text [SEP]` with one
  token at a time replaced by `[MASK]`, summing log p(token | rest). It is not a likelihood (it does not
  normalise over texts), so it is its own measure and must never share an axis with `bits_per_byte`.

In every rule the end-of-text token is not scored, and bytes are the UTF-8 bytes of the texts scored
(`len(text.encode("utf-8"))`); bits = -log2 p summed over the scored tokens.

Edge cases (any tokenizer): a text of one token is one chunk of one scored token; a text longer than the
positions is chunked as above (never truncated, never a crash); bytes are UTF-8 bytes whatever the script (CJK,
emoji, Cyrillic: a token may cover several bytes, or several tokens one character). An empty text, or one that
encodes to no tokens, is skipped and counted in `ByteScore.num_skipped`: it has nothing to score, and counting its
bytes with no bits would flatter the model. When nothing is scored at all the value is NaN with a `reason` (0 bits
per byte would read as a perfect model).

`length_extrapolation` evaluates an objective's validation loss at 1x, 2x, 4x the training length; a length-bounded
position scheme (`PosScheme.length_bounded`: `learned`, `sinusoidal`) cannot go past `model.max_seq_len`, which gives
`loss=None` with the reason, as do validation tokens shorter than one block at that length, an objective that cannot
be built at that length, and blocks that hold no label token. Past 1x a span-corruption objective keeps a training
block's noise-token and span counts (a lower density), so the longer blocks use only the sentinels training used and
the figure measures positions, not sentinel coverage (`extrapolation_objective` builds it).

Device: every function runs where the network sits (`model_device`): inputs are built there, sums stay there until one
host sync per call (per length for `length_extrapolation`). Objective batches are collated on the CPU, as a data loader
collates them (their corruption draws from a seeded CPU generator), and copied to the network's device in one step.
The caller puts the network on the device that trained it (`experiments/plumbing/eval_device.py`).

Legend: B batch, T sequence length, V vocab, C model dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from famlab.families.config import ModelConfig, PosScheme
from famlab.families.formats import Arch
from famlab.families.network import Network
from famlab.families.registry import FamilySpec, families_of, family_names, family_of
from famlab.objectives.corruption import span_counts
from famlab.objectives.errors import ObjectiveError
from famlab.objectives.objective import Objective
from famlab.objectives.prefix import prefix_lm_mask
from famlab.objectives.registry import (
    SETTINGS,
    ObjectiveSettings,
    default_objective,
    entry,
    make_objective,
    rules_of,
)
from famlab.objectives.tokens import TokenIds

if TYPE_CHECKING:
    from typing_extensions import Unpack

Encode = Callable[[str], Sequence[int]]
LN2 = math.log(2.0)


@dataclass
class ByteScore:
    """A byte-normalised score of some texts.

    Attributes:
        measure: `bits_per_byte` (GPT, T5: a true log-likelihood) or `pll_bits_per_byte` (BERT).
        value: `total_bits / num_bytes`.
        total_bits: -log2 of the (pseudo-)likelihood, summed over scored tokens.
        num_bytes: UTF-8 bytes of the texts scored.
        num_tokens: tokens scored.
        num_texts: texts scored.
        num_skipped: texts not scored: empty, or encoded to no tokens.
        reason: why `value` is NaN (nothing was scored); None otherwise.
    """

    measure: str
    value: float
    total_bits: float
    num_bytes: int
    num_tokens: int
    num_texts: int
    num_skipped: int = 0
    reason: str | None = None


@dataclass
class LengthPoint:
    """Validation loss at `multiple` x the training length (`loss=None` with a `reason` when not defined)."""

    multiple: int
    seq_len: int
    loss: float | None
    num_label_tokens: int
    reason: str | None = None


def _chunks(tokens: Sequence[int], size: int) -> list[list[int]]:
    return [list(tokens[i : i + size]) for i in range(0, len(tokens), size)]


def _texts(texts: Sequence[str], encode: Encode) -> tuple[list[tuple[str, list[int]]], int]:
    """The texts worth scoring with their tokens, and how many were skipped (empty, or encoded to no tokens)."""
    kept = []
    for text in texts:
        tokens = list(encode(text)) if text else []
        if tokens:
            kept.append((text, tokens))
    return kept, len(texts) - len(kept)


def _max_len(net: Network, max_len: int | None, context: int) -> int:
    """`max_len` (None: `model.max_seq_len`), refused when an absolute position table cannot hold it or when it
    leaves no room for a scored token after the `context` tokens every chunk carries."""
    cfg = _config(net)
    pos = getattr(cfg.pos, "value", cfg.pos)
    max_len = max_len or int(cfg.max_seq_len)
    if PosScheme(pos).length_bounded and max_len > cfg.max_seq_len:
        raise ObjectiveError(f"max_len={max_len} exceeds model.max_seq_len={cfg.max_seq_len} (model.pos={pos})")
    if max_len <= context:
        raise ObjectiveError(f"max_len={max_len} leaves no room for a scored token after {context} context tokens")
    return max_len


def _result(measure: str, log_prob: float, num_bytes: int, num_tokens: int, num_texts: int, num_skipped: int
            ) -> ByteScore:
    bits = -log_prob / LN2
    if num_bytes == 0:  # nothing scored: NaN, not 0 bits per byte (a perfect score)
        reason = f"no text to score ({num_skipped} empty or encoded to no tokens)"
        return ByteScore(measure, math.nan, 0.0, 0, 0, 0, num_skipped, reason)
    return ByteScore(measure, bits / num_bytes, bits, num_bytes, num_tokens, num_texts, num_skipped)


def _not_scored(measure: str, family: str, objective: str | None, num_texts: int) -> ByteScore:
    """The score of texts under an objective that declares no text rule (``ObjectiveRules.text``): NaN, none scored."""
    name = objective or default_objective(family)
    return ByteScore(measure, math.nan, 0.0, 0, 0, 0, num_texts, f"objective {name} declares no text rule: not scored")


def _config(net: Network) -> ModelConfig:
    """The network's `ModelConfig`."""
    return net.config


def _spec(net: Network) -> FamilySpec:
    try:
        return family_of(net)
    except ValueError:
        raise ObjectiveError(f"expected a famlab network ({', '.join(family_names())}), got {type(net).__name__}"
                             ) from None


def model_device(net: Network) -> torch.device:
    """The device `net`'s parameters sit on: where evaluation builds its inputs."""
    return next(iter(net.parameters())).device


def _padded(rows: Sequence[Sequence[int]], pad: int, device: torch.device) -> torch.Tensor:
    """`(B, T)` rows right padded with `pad` to the longest, built on `device` in one copy."""
    width = max(len(r) for r in rows)
    return torch.tensor([[*r, *[pad] * (width - len(r))] for r in rows], dtype=torch.long, device=device)


def _score_items(
    net: Network, items: list[tuple[list[int], list[int], list[int]]], pad: int, batch_size: int
) -> float:
    """Summed log-probabilities (nats, float64) of every item's scored tokens.

    An item is `(encoder_ids, given, scored)`: a decoder (GPT) reads `encoder_ids + given + scored[:-1]` with
    `encoder_ids` as a bidirectional prefix (`prefix_lm_mask`; plain causal when it is empty) and predicts
    `scored` after `given`; an encoder-decoder (T5) encodes `encoder_ids` and decodes `[PAD] + given + scored[:-1]`
    the same way. Rows are right padded, which causal attention never sees before a real token. Every tensor is
    built on the network's device and the sum stays there until the end (one host sync, not one per batch).
    """
    decoder = _spec(net).arch is Arch.DECODER
    device = model_device(net)
    total = torch.zeros((), dtype=torch.float64, device=device)
    for start in range(0, len(items), batch_size):
        group = items[start : start + batch_size]
        rows, targets = [], []
        for enc_ids, given, scored in group:
            context = enc_ids + given if decoder else [pad] + given
            rows.append(context + scored)
            targets.append([-100] * (len(context) - 1) + scored)  # the label of position t is row[t + 1]
        seq = _padded(rows, pad, device)  # (B, T + 1)
        target = _padded(targets, -100, device)  # (B, T): each target row is one shorter than its row
        if decoder and any(enc for enc, _, _ in group):
            prefix = torch.tensor([len(enc) for enc, _, _ in group], device=device)
            mask = prefix_lm_mask(prefix, seq.shape[1] - 1)  # (B, 1, T, T)
            logits = net(seq[:, :-1], attention_mask=mask).logits  # (B, T, V)
        elif decoder:
            logits = net(seq[:, :-1]).logits  # (B, T, V)
        else:
            encoded = [e for e, _, _ in group]
            enc = _padded(encoded, pad, device)  # (B, S)
            enc_mask = _padded([[1] * len(e) for e in encoded], 0, device)  # (B, S)
            logits = net(enc, attention_mask=enc_mask, decoder_input_ids=seq[:, :-1]).logits  # (B, T, V)
        assert logits is not None  # compute_logits defaults to True
        total -= F.cross_entropy(logits.double().transpose(1, 2), target, reduction="sum", ignore_index=-100)
    return float(total)


@torch.no_grad()
def bits_per_byte(
    net: Network,
    texts: Sequence[str],
    encode: Encode,
    ids: TokenIds,
    *,
    objective: str | None = None,
    max_len: int | None = None,
    batch_size: int = 16,
) -> ByteScore:
    """Bits per UTF-8 byte of `texts` under a GPT or T5 network (rules in the module docstring).

    Args:
        net: a GPT or T5 network (BERT: use `pll_bits_per_byte`).
        texts: held-out texts.
        encode: text -> token ids with no special tokens (e.g. `lambda t: tok.encode(t, add_special_tokens=False).ids`).
        ids: the tokenizer's special ids.
        objective: the objective the network was trained with (`clm`, `prefix_lm`, `span`, `ul2`); selects the
            conditioning tokens. None = the family's default (`clm` / `span`).
        max_len: longest sequence fed to the network; None = `net.config.max_seq_len`.
        batch_size: chunks per forward pass.
    """
    spec = _spec(net)
    fmt = spec.input_format
    if fmt.measure != "bits_per_byte":
        names = " or ".join(families_of(Arch.DECODER, Arch.ENCODER_DECODER))
        raise ObjectiveError(f"bits_per_byte needs a {names} network; a {spec.name} network has {fmt.measure} (not a "
                             "likelihood)")
    rule = rules_of(spec.name, objective).text  # the objective's own rule (ObjectiveRules), never another's
    if rule is None:
        return _not_scored(fmt.measure, spec.name, objective, len(texts))
    encoder, given = fmt.byte_context(rule, ids)
    # tokens scored per chunk: a decoder reads encoder + given + chunk[:-1], T5's decoder [PAD] + given + chunk[:-1]
    if spec.arch is Arch.DECODER:
        max_len = _max_len(net, max_len, len(encoder) + len(given) - 1)
        size = max_len - len(encoder) - len(given) + 1
    else:
        max_len = _max_len(net, max_len, len(given))  # the decoder reads [PAD] + given + chunk[:-1]
        size = max_len - len(given)
    kept, num_skipped = _texts(texts, encode)
    items = [(encoder, given, chunk) for _, tokens in kept for chunk in _chunks(tokens, size)]
    was_training = net.training
    net.eval()
    try:
        log_prob = _score_items(net, items, ids.pad, batch_size)
    finally:
        net.train(was_training)
    count = sum(len(chunk) for _, _, chunk in items)
    num_bytes = sum(len(text.encode("utf-8")) for text, _ in kept)
    return _result("bits_per_byte", log_prob, num_bytes, count, len(kept), num_skipped)


@torch.no_grad()
def pll_bits_per_byte(
    net: Network,
    texts: Sequence[str],
    encode: Encode,
    ids: TokenIds,
    *,
    max_len: int | None = None,
    batch_size: int = 64,
) -> ByteScore:
    """BERT's pseudo-log-likelihood in bits per UTF-8 byte (`measure="pll_bits_per_byte"`; see module docstring).

    One forward pass per scored token (batched); the vocabulary projection only at the masked position.
    """
    spec = _spec(net)
    fmt = spec.input_format
    if fmt.measure != "pll_bits_per_byte":
        names = " or ".join(families_of(Arch.ENCODER))
        raise ObjectiveError(f"pll_bits_per_byte needs a {names} network; a {spec.name} network has {fmt.measure}")
    max_len = _max_len(net, max_len, fmt.specials(pair=False))  # BERT: [CLS] and [SEP] around every chunk
    device = model_device(net)
    rows: list[tuple[list[int], int]] = []  # (sequence with one [MASK], masked position)
    targets: list[int] = []
    kept, num_skipped = _texts(texts, encode)
    for _, tokens in kept:
        for chunk in _chunks(tokens, max_len - fmt.specials(pair=False)):
            full = fmt.wrap(chunk, ids)
            for i in range(fmt.offset, fmt.offset + len(chunk)):
                rows.append((full[:i] + [ids.mask] + full[i + 1 :], i))
                targets.append(full[i])
    was_training = net.training
    net.eval()
    total = torch.zeros((), dtype=torch.float64, device=device)
    try:
        for start in range(0, len(rows), batch_size):
            group = rows[start : start + batch_size]
            seq = _padded([s for s, _ in group], ids.pad, device)  # (B, T)
            mask = _padded([[1] * len(s) for s, _ in group], 0, device)  # (B, T)
            hidden = net(seq, attention_mask=mask, compute_logits=False).hidden  # (B, T, C)
            pos = torch.tensor([p for _, p in group], device=device)  # (B,)
            logits = net.project(hidden[torch.arange(len(group), device=device), pos])  # (B, V)
            target = torch.tensor(targets[start : start + len(group)], device=device)  # (B,)
            total -= F.cross_entropy(logits.double(), target, reduction="sum")
    finally:
        net.train(was_training)
    num_bytes = sum(len(text.encode("utf-8")) for text, _ in kept)
    return _result("pll_bits_per_byte", float(total), num_bytes, len(rows), len(kept), num_skipped)


def byte_score(
    net: Network,
    texts: Sequence[str],
    encode: Encode,
    ids: TokenIds,
    *,
    objective: str | None = None,
    max_len: int | None = None,
) -> ByteScore:
    """`pll_bits_per_byte` for BERT, `bits_per_byte` for GPT and T5 (the family's input format's `measure`) — check
    `ByteScore.measure` before putting two scores on one axis."""
    spec = _spec(net)
    if spec.input_format.measure == "pll_bits_per_byte":
        if rules_of(spec.name, objective).text is None:
            return _not_scored(spec.input_format.measure, spec.name, objective, len(texts))
        return pll_bits_per_byte(net, texts, encode, ids, max_len=max_len)
    return bits_per_byte(net, texts, encode, ids, objective=objective, max_len=max_len)


# Each span-corruption denoiser's (density, mean span) settings: T5 / GPT `span` and UL2's R, then UL2's X.
SPAN_DENOISERS = (("noise_density", "mean_span"), ("ul2_x_density", "ul2_x_mean_span"))
Build = Callable[..., Objective]  # (seq_len, **settings) -> a fresh objective seeded as every other


def _span_settings(counts: dict[tuple[str, str], tuple[int, int]], raw: int) -> dict[str, float]:
    """The density `noise / raw` and mean span `noise / spans` that `span_counts` turns into exactly `counts` for a
    raw block of `raw` tokens."""
    settings = {}
    for (density, mean_span), (noise, spans) in counts.items():
        settings[density], settings[mean_span] = noise / raw, noise / spans
    return settings


def _holding_counts(build: Build, seq_len: int, counts: dict[tuple[str, str], tuple[int, int]], raw: int
                    ) -> dict[str, float]:
    """Settings under which the objective at `seq_len` corrupts its raw block with exactly `counts`.

    The objective derives its raw length from the density, which `_span_settings` derives from the raw length:
    iterate from the guess `raw` to the fixed point (a few rounds: a density error moves the raw length by a
    fraction of that error, as the density is below 1/2).
    """
    for _ in range(16):
        settings = _span_settings(counts, raw)
        got = build(seq_len, **settings).raw_block_len
        exact = all(span_counts(got, settings[d], settings[s]) == c for (d, s), c in counts.items())
        if got == raw and exact:
            return settings
        raw = got
    raise ObjectiveError(f"no raw block of seq_len={seq_len} holds the training blocks' (noise, spans) {counts}")


def _settings_at(objective: str, family: str, build: Build, train_seq_len: int, seq_len: int,
                 settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` for the objective at `seq_len`: unchanged at the training length and for objectives without
    sentinels; span denoisers longer than that keep the training block's noise-token and span counts."""
    pairs = [pair for pair in SPAN_DENOISERS if pair[0] in entry(objective, family).settings]
    if seq_len == train_seq_len or not pairs:
        return settings
    try:
        train_raw = build(train_seq_len, **settings).raw_block_len
    except ObjectiveError as e:
        raise ObjectiveError(f"the training length {train_seq_len} cannot be built, so neither its span counts: {e}"
                             ) from e
    values = {**SETTINGS, **settings}
    counts = {pair: span_counts(train_raw, values[pair[0]], values[pair[1]]) for pair in pairs}
    return settings | _holding_counts(build, seq_len, counts, train_raw * seq_len // train_seq_len)


def _builder(objective: str, ids: TokenIds, family: str, seed: int) -> Build:
    def build(seq_len: int, **settings: Unpack[ObjectiveSettings]) -> Objective:
        # A fresh seeded generator per build: the same masks on every call, the shape probe included. The objective
        # is data-pipeline state (its generator, UL2's mode rates), on the CPU with the batches it collates.
        with torch.device("cpu"):
            generator = torch.Generator().manual_seed(seed)
            return make_objective(objective, ids, seq_len=seq_len, family=family, generator=generator, **settings)

    return build


def extrapolation_objective(
    objective: str, ids: TokenIds, *, family: str, train_seq_len: int, multiple: int, seed: int = 0, **settings: Any
) -> Objective:
    """The objective `length_extrapolation` scores at `multiple x train_seq_len` (rule in its docstring)."""
    build = _builder(objective, ids, family, seed)
    seq_len = multiple * train_seq_len
    return build(seq_len, **_settings_at(objective, family, build, train_seq_len, seq_len, settings))


def _blocks(tokens: torch.Tensor, raw: int, available: int, max_tokens: int) -> torch.Tensor | str:
    """`(N, raw)` blocks from the first `available` tokens, or the reason there is none."""
    num = available // raw if raw > 0 else 0
    if num == 0:
        return f"{available} validation tokens (max_tokens={max_tokens}) hold no block of {raw} tokens"
    return tokens[: num * raw].reshape(num, raw).long()


def _collate(obj: Objective, blocks: torch.Tensor) -> dict[str, torch.Tensor]:
    """`obj`'s batch of `(N, raw)` blocks, built on the CPU as a data loader builds it (its corruption draws from a
    seeded CPU generator), whatever the default device; the caller moves it to the network's device in one copy."""
    with torch.device("cpu"):
        return obj.collate(list(blocks))


def _too_long(net: Network, probe: Objective, block: torch.Tensor, m: int) -> str | None:
    """Why an absolute position table cannot read `probe`'s batch of `block`; None when it can."""
    cfg = _config(net)
    pos = getattr(cfg.pos, "value", cfg.pos)
    first = _collate(probe, block[None])
    needed = max(first["input_ids"].shape[1], first.get("decoder_input_ids", first["input_ids"]).shape[1])
    if PosScheme(pos).length_bounded and needed > cfg.max_seq_len:
        return f"model.pos={pos} covers model.max_seq_len={cfg.max_seq_len} positions, {m}x needs {needed}"
    return None


def _point(net: Network, build: Build, settings: dict[str, Any], blocks: torch.Tensor, m: int, seq_len: int,
           batch_size: int) -> LengthPoint:
    """The token-weighted loss over `blocks` of the objective `build(seq_len, **settings)` at `m x`."""
    reason = _too_long(net, build(seq_len, **settings), blocks[0], m)  # a fresh probe: `obj`'s masks untouched
    if reason is not None:
        return LengthPoint(m, seq_len, None, 0, reason)
    obj = build(seq_len, **settings)
    device = model_device(net)
    nll = torch.zeros((), dtype=torch.float64, device=device)
    labelled = torch.zeros((), dtype=torch.long, device=device)
    for start in range(0, len(blocks), batch_size):
        batch = _collate(obj, blocks[start : start + batch_size])
        out = obj.loss(net, {k: v.to(device, non_blocking=True) for k, v in batch.items()})
        # a batch without labels has a NaN mean loss, which 0 x NaN would spread
        nll += torch.where(out.num_label_tokens > 0, out.loss.double() * out.num_label_tokens, 0.0)
        labelled += out.num_label_tokens
    count = int(labelled)  # the one host sync of this length
    nll_sum = float(nll)
    if count == 0:
        reason = f"{len(blocks)} blocks of {obj.raw_block_len} tokens hold no label token"
        return LengthPoint(m, seq_len, None, 0, reason)
    return LengthPoint(m, seq_len, nll_sum / count, count)


@torch.no_grad()
def length_extrapolation(
    net: Network,
    tokens: torch.Tensor,
    ids: TokenIds,
    *,
    objective: str,
    train_seq_len: int,
    multiples: Sequence[int] = (1, 2, 4),
    max_tokens: int = 32_768,
    batch_size: int = 8,
    seed: int = 0,
    **objective_kwargs: object,
) -> list[LengthPoint]:
    """Validation loss of `objective` at `m x train_seq_len` for each m in `multiples`.

    Blocks are cut from the 1-D validation token stream `tokens` (documents already joined by the
    objective's separator, as `PretrainDataModule` stores them), at most `max_tokens` raw tokens per length,
    corrupted with a generator seeded by `seed` (the same masks on every call). The loss is the mean over all
    label tokens, as `val/loss`.

    Span corruption (T5 and GPT `span`, UL2's R and X) keeps, past 1x, each denoiser's noise-token and span counts
    of a training block, at a lower density: the sentinels, span lengths and targets are training's and only the
    input around them grows. At the training density a longer block would need sentinels no training block used
    (never-trained embeddings), longer spans would change what each sentinel asks for, and restarting the
    sentinels per segment would put one sentinel twice in an input. Other objectives are built as at 1x.

    Returns:
        One `LengthPoint` per multiple, never raising for a length: `loss=None` with a `reason` when the
        position scheme is absolute and the batch would need more than `model.max_seq_len` positions, when
        `tokens` (at most `max_tokens` of them) hold less than one block, when the objective cannot be built at
        that length (e.g. a block too short to corrupt), or when the blocks hold no label token.
    """
    family = _spec(net).name
    tokens = torch.as_tensor(tokens, device="cpu").reshape(-1)  # a NumPy memmap (the data module's) or a tensor
    available = min(len(tokens), max_tokens)
    build = _builder(objective, ids, family, seed)
    points = []
    was_training = net.training
    net.eval()
    try:
        for m in multiples:
            seq_len = m * train_seq_len
            try:
                settings = _settings_at(objective, family, build, train_seq_len, seq_len, dict(objective_kwargs))
                obj = build(seq_len, **settings)
            except ObjectiveError as e:  # e.g. a length too short for the objective's corruption
                points.append(LengthPoint(m, seq_len, None, 0, f"objective {objective} at seq_len={seq_len}: {e}"))
                continue
            blocks = _blocks(tokens, obj.raw_block_len, available, max_tokens)
            if isinstance(blocks, str):
                points.append(LengthPoint(m, seq_len, None, 0, blocks))
            else:
                points.append(_point(net, build, settings, blocks, m, seq_len, batch_size))
    finally:
        net.train(was_training)
    return points
