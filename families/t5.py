"""T5-style network: shared token embedding, bidirectional encoder, cross-attending causal decoder, LM head."""

from __future__ import annotations

from famlab.families.blocks.layers import LayerCache
from famlab.families.config import Family, ModelConfig
from famlab.families.heads import LMHead
from famlab.families.kernels.dispatch import Kernel, use_fast
from famlab.families.kernels.joint_embedding import embed_both
from famlab.families.network import NetworkOutput, check_buildable, init_weights, make_stack
from torch import Tensor, nn


class T5(nn.Module):
    """Encoder-decoder. Faithful settings (HF ``T5ForConditionalGeneration``): ``pos=t5_bias``, ``norm=rmsnorm``,
    ``norm_position=pre``, ``bias=false``, ``qk_scale=1.0``, ``norm_eps=1e-6``, ``init=t5``; v1.0: plain ReLU FFN,
    tied head scaled by dim^-0.5; v1.1: gated + gelu_tanh, ``head_dim`` independent of ``dim``."""

    family = Family.T5.value

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        check_buildable(cfg)
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)  # shared by encoder, decoder (and a tied head)
        self.encoder = make_stack(cfg, causal=False, t5_dropout=True)
        self.decoder = make_stack(cfg, causal=True, cross=True, num_layers=cfg.num_decoder_layers, t5_dropout=True)
        self.head = LMHead(cfg.dim, cfg.vocab_size, tied=cfg.tie_embeddings, scale=cfg.head_scale or 1.0)
        init_weights(self, cfg)

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Encoder output ``(B, S, C)`` for ``input_ids`` ``(B, S)``."""
        return self.encoder(self.embed(input_ids), attention_mask=attention_mask)

    def decode(
        self,
        decoder_input_ids: Tensor,
        encoder_hidden: Tensor,
        encoder_attention_mask: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
        cache: list[LayerCache] | None = None,
    ) -> Tensor:
        """Decoder hidden states ``(B, T, C)``; ``cache`` from ``net.decoder.new_cache()`` for incremental steps."""
        return self._decode_embedded(
            self.embed(decoder_input_ids), encoder_hidden, encoder_attention_mask, decoder_attention_mask, cache
        )

    def _decode_embedded(
        self,
        embedded: Tensor,
        encoder_hidden: Tensor,
        encoder_attention_mask: Tensor | None,
        decoder_attention_mask: Tensor | None,
        cache: list[LayerCache] | None = None,
    ) -> Tensor:
        return self.decoder(
            embedded,
            attention_mask=decoder_attention_mask,
            context=encoder_hidden,
            context_mask=encoder_attention_mask,
            cache=cache,
        )

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        decoder_input_ids: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
        compute_logits: bool = True,
    ) -> NetworkOutput:
        """Encode ``input_ids`` ``(B, S)`` and decode ``decoder_input_ids`` ``(B, T)``; ``logits`` ``(B, T, V)``."""
        if decoder_input_ids is None:
            raise ValueError("T5 forward needs decoder_input_ids (the targets shifted right behind the start id)")
        if use_fast(Kernel.JOINT_EMBEDDING, input_ids):
            encoder_in, decoder_in = embed_both(self.embed, input_ids, decoder_input_ids)  # (B, S, C), (B, T, C)
        else:
            encoder_in, decoder_in = self.embed(input_ids), self.embed(decoder_input_ids)
        encoder_hidden = self.encoder(encoder_in, attention_mask=attention_mask)
        hidden = self._decode_embedded(decoder_in, encoder_hidden, attention_mask, decoder_attention_mask)
        return NetworkOutput(self.project(hidden) if compute_logits else None, hidden, encoder_hidden)

    def project(self, hidden: Tensor) -> Tensor:
        """LM head on any ``(..., C)`` tensor, giving ``(..., V)`` (T5's tied-head rescaling included)."""
        return self.head(hidden, self.embed.weight)

    def output_embedding(self) -> tuple[Tensor, float]:
        """The LM head as ``(W, scale)``, ``project(h) == F.linear(scale * h, W)`` with ``W`` ``(V, C)`` the tied
        embedding or the head's own weight: what the objective's fused LM loss multiplies by."""
        return self.head.output_weight(self.embed.weight), self.head.scale
