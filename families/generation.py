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
    family = getattr(net, "family", None)
    arch = registry.family(family).arch if family in registry.family_names() else None
    if arch not in (Arch.DECODER, Arch.ENCODER_DECODER):
        names = " or ".join(registry.families_of(Arch.DECODER, Arch.ENCODER_DECODER))
        raise ValueError(f"generate: needs a {names} network (a causal decoder or an encoder-decoder), got {family}")
    was_training = net.training
    net.eval()
    B = input_ids.shape[0]
    pad = net.config.pad_token_id
    mask: Tensor | None = None
    positions: Tensor | None = None
    done = torch.zeros(B, dtype=torch.bool, device=input_ids.device)
    out: list[Tensor] = []
    if arch is Arch.ENCODER_DECODER:
        encdec = cast(EncoderDecoder, net)  # the encoder-decoder architecture's network
        encoder_hidden = encdec.encode(input_ids, attention_mask)
        start = pad if decoder_start_id is None else decoder_start_id
        seq = torch.full((B, 1), start, dtype=torch.long, device=input_ids.device)
        cache = encdec.decoder.new_cache() if use_cache else None

        def step(new: Tensor) -> Tensor:
            tokens = new if use_cache else seq
            return encdec.decode(tokens, encoder_hidden, attention_mask, cache=cache)[:, -1]

        hidden = step(seq)
    else:
        seq = input_ids
        mask = attention_mask
        positions = None if mask is None else (mask.long().cumsum(-1) - 1).clamp(min=0)  # left padding
        causal = cast(CausalDecoder, net)  # the causal decoder architecture's network
        cache = causal.decoder.new_cache() if use_cache else None

        def step(new: Tensor) -> Tensor:
            if use_cache:
                pos = None if positions is None else positions[:, -new.shape[1] :]
                result = causal(new, attention_mask=mask, position_ids=pos, compute_logits=False, cache=cache)
                return result.hidden[:, -1]
            return causal(seq, attention_mask=mask, position_ids=positions, compute_logits=False).hidden[:, -1]

        hidden = step(seq)
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
        new = next_id[:, None]  # (B, 1)
        seq = torch.cat((seq, new), dim=1)
        if mask is not None and positions is not None:  # GPT with a padding mask
            mask = torch.cat((mask, torch.ones_like(new, dtype=mask.dtype)), dim=1)
            positions = torch.cat((positions, positions[:, -1:] + 1), dim=1)
        hidden = step(new)
    net.train(was_training)
    if not out:
        return input_ids.new_zeros(B, 0)
    return torch.stack(out, dim=1)
