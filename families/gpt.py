"""GPT-style network: token embeddings, a causal stack and the tied LM head."""

from __future__ import annotations

from famlab.families.blocks.layers import LayerCache
from famlab.families.config import Family, ModelConfig
from famlab.families.heads import LMHead
from famlab.families.network import NetworkOutput, check_buildable, init_weights, make_stack
from torch import Tensor, nn


class GPT(nn.Module):
    """Causal decoder. Faithful settings (HF ``GPT2LMHeadModel``): ``norm_position=pre``, ``pos=learned``,
    ``activation=gelu_tanh``, ``norm_eps=1e-5``, tied head, ``init=gpt2``."""

    family = Family.GPT.value

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        check_buildable(cfg)
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.decoder = make_stack(cfg, causal=True)
        self.head = LMHead(cfg.dim, cfg.vocab_size, tied=cfg.tie_embeddings, scale=cfg.head_scale or 1.0)
        init_weights(self, cfg)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        compute_logits: bool = True,
        cache: list[LayerCache] | None = None,
    ) -> NetworkOutput:
        """Decode ``input_ids`` ``(B, T)``; ``logits`` ``(B, T, V)``, ``hidden`` ``(B, T, C)``.

        ``cache`` (from ``net.decoder.new_cache()``) makes this an incremental step: ``input_ids`` are the new
        tokens and ``attention_mask`` (if any) covers the cached ones too.
        """
        hidden = self.decoder(
            self.embed(input_ids), attention_mask=attention_mask, position_ids=position_ids, cache=cache
        )
        return NetworkOutput(self.project(hidden) if compute_logits else None, hidden, None)

    def project(self, hidden: Tensor) -> Tensor:
        """LM head on any ``(..., C)`` tensor, giving ``(..., V)``."""
        return self.head(hidden, self.embed.weight)

    def output_embedding(self) -> tuple[Tensor, float]:
        """The LM head as ``(W, scale)``, ``project(h) == F.linear(scale * h, W)`` with ``W`` ``(V, C)`` the tied
        embedding or the head's own weight: what the objective's fused LM loss multiplies by."""
        return self.head.output_weight(self.embed.weight), self.head.scale
