"""The analytic FLOP formula equals torch's FLOP counter on a real forward + backward (math attention path)."""

import pytest
import torch
from conftest import VOCAB, tiny
from famlab.families import build_network
from famlab.families.flops import forward_flops, train_flops
from famlab.families.network import set_attn_impl
from torch.utils.flop_counter import FlopCounterMode


@pytest.mark.parametrize(
    ("family", "overrides"),
    [
        ("gpt", {}),
        ("gpt", dict(num_kv_heads=2, ffn="gated", activation="silu")),
        ("bert", {}),
        ("t5", dict(head_dim=12, num_decoder_layers=3, ffn="gated")),
        ("t5", dict(pos="t5_bias", bias=False)),
    ],
)
def test_train_flops_match_flop_counter(family, overrides):
    torch.manual_seed(0)
    cfg = tiny(family, **overrides)
    net = build_network(cfg)
    set_attn_impl(net, "math")  # the counter sees no FLOPs inside SDPA on CPU
    B, T, T_dec = 2, 10, 6
    ids = torch.randint(1, VOCAB, (B, T))
    labels = None
    with FlopCounterMode(display=False) as counter:
        if family == "t5":
            out = net(ids, decoder_input_ids=ids[:, :T_dec])
            loss = out.logits.sum()
        elif family == "bert":  # sparse MLM: project only the labelled positions
            select = torch.zeros(B, T, dtype=torch.bool)
            select[:, ::3] = True
            labels = int(select.sum())
            loss = net.project(net(ids, compute_logits=False).hidden[select]).sum()
        else:
            loss = net(ids).logits.sum()
        loss.backward()
    expected = train_flops(
        cfg, batch_size=B, seq_len=T, dec_len=T_dec if family == "t5" else 0, num_label_tokens=labels
    )
    assert counter.get_total_flops() == expected
    assert expected == 3 * forward_flops(
        cfg, batch_size=B, seq_len=T, dec_len=T_dec if family == "t5" else 0, num_label_tokens=labels
    )
