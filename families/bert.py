"""BERT-style network: token (+ token-type) embeddings, a bidirectional stack and the MLM head."""

from __future__ import annotations

from famlab.families.config import Family, ModelConfig
from famlab.families.heads import MLMHead
from famlab.families.network import NetworkOutput, check_buildable, init_weights, make_stack
from torch import Tensor, nn


class Bert(nn.Module):
    """Encoder with BERT's MLM head. Faithful settings (HF ``BertForMaskedLM``): ``norm_position=post``,
    ``pos=learned``, ``activation=gelu``, ``type_vocab_size=2``, ``norm_eps=1e-12``, ``init=bert``."""

    family = Family.BERT.value

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        check_buildable(cfg)
        self.config = cfg
        # HF BERT gives the pad row padding_idx: zero at init and never updated
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim, padding_idx=cfg.pad_token_id)
        self.token_types = nn.Embedding(cfg.type_vocab_size, cfg.dim) if cfg.type_vocab_size else None
        self.encoder = make_stack(cfg, causal=False)
        self.head = MLMHead(
            cfg.dim,
            cfg.vocab_size,
            activation=cfg.activation.value,
            norm=cfg.norm.value,
            norm_eps=cfg.norm_eps,
            bias=cfg.bias,
            tied=cfg.tie_embeddings,
        )
        init_weights(self, cfg)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
        compute_logits: bool = True,
    ) -> NetworkOutput:
        """Encode ``input_ids`` ``(B, T)``; ``logits`` ``(B, T, V)``, ``hidden`` ``(B, T, C)``.

        ``token_type_ids`` ``(B, T)`` default to type 0. Use ``compute_logits=False`` and :meth:`project` on
        the masked positions only for sparse MLM.
        """
        x = self.embed(input_ids)  # (B, T, C)
        if self.token_types is not None:
            x = x + (self.token_types(token_type_ids) if token_type_ids is not None else self.token_types.weight[0])
        hidden = self.encoder(x, attention_mask=attention_mask, position_ids=position_ids)
        return NetworkOutput(self.project(hidden) if compute_logits else None, hidden, None)

    def project(self, hidden: Tensor) -> Tensor:
        """MLM head on any ``(..., C)`` tensor, giving ``(..., V)``."""
        return self.head(hidden, self.embed.weight)
