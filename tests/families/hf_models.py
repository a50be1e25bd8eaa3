"""Tiny randomly initialised Hugging Face reference models (no download) and a parity-diff helper."""

import torch

transformers = __import__("pytest").importorskip("transformers")

VOCAB = 97

# name -> (constructor, kwargs); two shapes per family, T5 v1.0 and v1.1, tied and untied heads
SPECS = {
    "bert-a": ("bert", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)),
    "bert-b": (
        "bert",
        dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=3, intermediate_size=80, type_vocab_size=3),
    ),
    "gpt2-a": ("gpt", dict(n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "gpt2-b": ("gpt", dict(n_embd=48, n_layer=3, n_head=6, n_positions=40, n_inner=96)),
    "t5-v1.0": (
        "t5",
        dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4, feed_forward_proj="relu"),
    ),
    "t5-v1.0-deep-dec": (
        "t5",
        dict(
            d_model=40,
            d_kv=12,
            d_ff=56,
            num_layers=2,
            num_decoder_layers=3,
            num_heads=4,
            feed_forward_proj="relu",
            relative_attention_num_buckets=8,
            relative_attention_max_distance=20,
        ),
    ),
    "t5-v1.1": (
        "t5",
        dict(
            d_model=32,
            d_kv=16,
            d_ff=48,
            num_layers=3,
            num_decoder_layers=2,
            num_heads=4,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
        ),
    ),
    "t5-v1.1-untied": (
        "t5",
        dict(
            d_model=32,
            d_kv=16,
            d_ff=48,
            num_layers=2,
            num_decoder_layers=3,
            num_heads=2,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
            untie=True,
        ),
    ),
}


def make_hf(name: str, seed: int = 0):
    """Build the reference model ``name`` in fp32 eval mode with random weights."""
    family, kwargs = SPECS[name]
    kwargs = dict(kwargs)
    untie = kwargs.pop("untie", False)
    torch.manual_seed(seed)
    if family == "bert":
        model = transformers.BertForMaskedLM(transformers.BertConfig(vocab_size=VOCAB, **kwargs))
    elif family == "gpt":
        model = transformers.GPT2LMHeadModel(
            transformers.GPT2Config(vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, **kwargs)
        )
    else:
        cfg = transformers.T5Config(
            vocab_size=VOCAB, decoder_start_token_id=0, pad_token_id=0, eos_token_id=None, **kwargs
        )
        model = transformers.T5ForConditionalGeneration(cfg)
        if untie:  # transformers 5 always ties T5's head; give it its own weights to test the untied path
            model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    return model.eval()


def parity_diff(name: str, net=None, seed: int = 0) -> float:
    """Max |logits_ours - logits_hf| on a padded batch (padding and token types for BERT; T5 encoder padding)."""
    from famlab.families import from_hf

    model = make_hf(name, seed)
    net = from_hf(model).eval() if net is None else net
    return logits_diff(model, net, seed)


def logits_diff(model, net, seed: int = 0, length: int = 13) -> float:
    """Max |logits| difference between an HF model and a famlab network (or a second HF model) in eval mode, on a
    padded batch of ``length`` tokens: padding and token types for BERT, with and without padding for GPT-2,
    encoder padding for T5."""
    family = {"bert": "bert", "gpt2": "gpt", "t5": "t5"}[model.config.model_type]
    ours_is_hf = hasattr(net, "config") and hasattr(net.config, "model_type")
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(seed)
    B, T = 3, length
    ids = torch.randint(1, vocab, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, T - 4 :] = 0
    mask[2, T // 2 :] = 0

    def run(m, **kw):
        if ours_is_hf or m is model:
            return m(**kw).logits
        args = {"input_ids": kw.pop("input_ids"), "attention_mask": kw.pop("attention_mask", None)}
        if "decoder_input_ids" in kw:
            args["decoder_input_ids"] = kw.pop("decoder_input_ids")
        return m(**args, **kw).logits

    with torch.no_grad():
        if family == "bert":
            types = torch.randint(0, model.config.type_vocab_size, (B, T), generator=g)
            ref = run(model, input_ids=ids, attention_mask=mask, token_type_ids=types)
            ours = run(net, input_ids=ids, attention_mask=mask, token_type_ids=types)
            return (ref - ours)[mask.bool()].abs().max().item()
        if family == "gpt":
            diff = (run(model, input_ids=ids) - run(net, input_ids=ids)).abs().max().item()
            ref_pad = run(model, input_ids=ids, attention_mask=mask)
            ours_pad = run(net, input_ids=ids, attention_mask=mask)
            return max(diff, (ref_pad - ours_pad)[mask.bool()].abs().max().item())
        dec = torch.randint(1, vocab, (B, 7), generator=g)
        ref = run(model, input_ids=ids, attention_mask=mask, decoder_input_ids=dec)
        ours = run(net, input_ids=ids, attention_mask=mask, decoder_input_ids=dec)
        return (ref - ours).abs().max().item()


if __name__ == "__main__":  # python tests/families/hf_models.py: the parity table for a report
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    for spec in SPECS:
        print(f"{spec:18s} max abs diff {parity_diff(spec):.3g}")
