"""Autoregressive generation for GPT and T5 networks with a KV cache: greedy, temperature, top-k, top-p."""

from __future__ import annotations

from typing import cast

import torch
from famlab.families import registry
from famlab.families.formats import Arch
from famlab.families.network import CausalDecoder, EncoderDecoder, Network
from torch import Tensor


def sample_next(
    logits: Tensor,
    *,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Pick the next token ``(B,)`` from ``logits`` ``(B, V)``.

    ``temperature=0`` is greedy (argmax). Otherwise logits are divided by the temperature, restricted to the
    ``top_k`` most likely tokens (0 = all) and to the smallest set whose probability reaches ``top_p``
    (nucleus sampling, Holtzman et al. 2020; the most likely token always stays), then sampled.
    """
    if temperature < 0 or top_k < 0 or not 0.0 < top_p <= 1.0:
        raise ValueError(
            f"generation: need temperature >= 0, top_k >= 0, 0 < top_p <= 1 "
            f"(got temperature={temperature}, top_k={top_k}, top_p={top_p})"
        )
    if temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        drop = probs.cumsum(dim=-1) - probs >= top_p  # mass before this token already reaches top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    net: Network,
    input_ids: Tensor,
    *,
    max_new_tokens: int,
    eos_id: int | None,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    decoder_start_id: int | None = None,
    attention_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids`` ``(B, T)`` (GPT) or from its encoding (T5).

    Args:
        net: A GPT or T5 network from :func:`famlab.families.build_network`.
        input_ids: Prompt (GPT; left padding with ``attention_mask``) or encoder input (T5).
        max_new_tokens: Upper bound on generated tokens.
        eos_id: Stop a sequence after it emits this id (None: never).
        temperature, top_k, top_p, generator: See :func:`sample_next`.
        decoder_start_id: T5's first decoder token (default ``net.config.pad_token_id``, as T5).
        attention_mask: ``(B, T)`` padding mask of ``input_ids``.
        use_cache: Reuse keys/values (False recomputes the whole prefix every step; same result).

    Returns:
        ``(B, N)`` generated ids, N <= ``max_new_tokens`` (generation stops once every row has emitted EOS);
        positions after a row's EOS hold ``net.config.pad_token_id``.
    """
    arch = _generative_arch(net)
    was_training = net.training
    net.eval()
    prefix: _Prefix
    if arch is Arch.ENCODER_DECODER:
        start = net.config.pad_token_id if decoder_start_id is None else decoder_start_id
        prefix = _EncoderDecoderPrefix(cast(EncoderDecoder, net), input_ids, attention_mask, start, use_cache)
    else:
        prefix = _CausalPrefix(cast(CausalDecoder, net), input_ids, attention_mask, use_cache)
    out = _sample_tokens(net, prefix, max_new_tokens=max_new_tokens, eos_id=eos_id, temperature=temperature,
                         top_k=top_k, top_p=top_p, generator=generator)
    net.train(was_training)
    if not out:
        return input_ids.new_zeros(input_ids.shape[0], 0)
    return torch.stack(out, dim=1)


def _generative_arch(net: Network) -> Arch:
    """The network's architecture, refused unless it generates (a causal decoder or an encoder-decoder)."""
    family = getattr(net, "family", None)
    arch = registry.family(family).arch if family in registry.family_names() else None
    if arch is None or arch not in (Arch.DECODER, Arch.ENCODER_DECODER):
        names = " or ".join(registry.families_of(Arch.DECODER, Arch.ENCODER_DECODER))
        raise ValueError(f"generate: needs a {names} network (a causal decoder or an encoder-decoder), got {family}")
    return arch


class _Prefix:
    """The sequence generated so far (``seq``, ``(B, S)``) and how the network reads it: :meth:`hidden` is the
    last position's hidden state once ``new`` tokens are in ``seq`` (``new`` alone with a KV cache, else all of
    ``seq``)."""

    def __init__(self, seq: Tensor, use_cache: bool) -> None:
        self.seq = seq
        self.use_cache = use_cache

    def extend(self, new: Tensor) -> Tensor:
        """Append ``new`` ``(B, 1)`` to the sequence; the hidden state of its last position."""
        self.seq = torch.cat((self.seq, new), dim=1)
        return self.hidden(new)

    def hidden(self, new: Tensor) -> Tensor:
        raise NotImplementedError


class _EncoderDecoderPrefix(_Prefix):
    """T5: the input encoded once; the decoder starts from ``start`` and reads the encoding at every step."""

    def __init__(self, net: EncoderDecoder, input_ids: Tensor, attention_mask: Tensor | None, start: int,
                 use_cache: bool) -> None:
        self.net, self.attention_mask = net, attention_mask
        self.encoder_hidden = net.encode(input_ids, attention_mask)
        super().__init__(torch.full((input_ids.shape[0], 1), start, dtype=torch.long, device=input_ids.device),
                         use_cache)
        self.cache = net.decoder.new_cache() if use_cache else None

    def hidden(self, new: Tensor) -> Tensor:
        tokens = new if self.use_cache else self.seq
        return self.net.decode(tokens, self.encoder_hidden, self.attention_mask, cache=self.cache)[:, -1]


class _CausalPrefix(_Prefix):
    """GPT: the prompt, left padded with ``attention_mask``; the mask and the positions grow with the sequence."""

    def __init__(self, net: CausalDecoder, input_ids: Tensor, attention_mask: Tensor | None, use_cache: bool) -> None:
        super().__init__(input_ids, use_cache)
        self.net, self.mask = net, attention_mask
        self.positions = (None if attention_mask is None
                          else (attention_mask.long().cumsum(-1) - 1).clamp(min=0))  # left padding
        self.cache = net.decoder.new_cache() if use_cache else None

    def extend(self, new: Tensor) -> Tensor:
        if self.mask is not None and self.positions is not None:  # with a padding mask
            self.mask = torch.cat((self.mask, torch.ones_like(new, dtype=self.mask.dtype)), dim=1)
            self.positions = torch.cat((self.positions, self.positions[:, -1:] + 1), dim=1)
        return super().extend(new)

    def hidden(self, new: Tensor) -> Tensor:
        if self.use_cache:
            pos = None if self.positions is None else self.positions[:, -new.shape[1] :]
            result = self.net(new, attention_mask=self.mask, position_ids=pos, compute_logits=False, cache=self.cache)
            return result.hidden[:, -1]
        return self.net(self.seq, attention_mask=self.mask, position_ids=self.positions,
                        compute_logits=False).hidden[:, -1]


def _sample_tokens(net: Network, prefix: _Prefix, *, max_new_tokens: int, eos_id: int | None, temperature: float,
                   top_k: int, top_p: float, generator: torch.Generator | None) -> list[Tensor]:
    """Sample up to ``max_new_tokens`` next tokens ``(B,)`` after ``prefix``, stopping once every row emitted EOS;
    a row's tokens after its EOS are the pad id."""
    pad = net.config.pad_token_id
    done = torch.zeros(prefix.seq.shape[0], dtype=torch.bool, device=prefix.seq.device)
    out: list[Tensor] = []
    hidden = prefix.hidden(prefix.seq)
    for _ in range(max_new_tokens):
        next_id = sample_next(
            net.project(hidden), temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
        )
        next_id = torch.where(done, torch.full_like(next_id, pad), next_id)
        out.append(next_id)
        if eos_id is not None:
            done = done | (next_id == eos_id)
            if bool(done.all()):
                break
        if len(out) == max_new_tokens:
            break
        hidden = prefix.extend(next_id[:, None])  # (B, 1)
    return out
