"""Fused LM head + cross-entropy and the fused fp32 RMSNorm equal their unfused references (values and grads)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import families.blocks.norms as norms
from families.heads import linear_cross_entropy


@pytest.mark.parametrize(("rows", "vocab", "chunk", "scale"), [(50, 300, 1 << 22, 1.0), (50, 300, 300 * 7, 0.0625)])
def test_linear_cross_entropy_matches_unfused(rows: int, vocab: int, chunk: int, scale: float) -> None:
    torch.manual_seed(0)
    hidden = torch.randn(rows, 16, requires_grad=True)
    weight = (torch.randn(vocab, 16) * 0.3).requires_grad_()
    labels = torch.randint(0, vocab, (rows,))
    labels[::5] = -100
    ref = F.cross_entropy(F.linear(hidden * scale, weight), labels, reduction="sum")
    ref_grads = torch.autograd.grad(ref * 0.7, (hidden, weight))
    out = linear_cross_entropy(hidden, weight, labels, scale=scale, chunk_elements=chunk)
    grads = torch.autograd.grad(out * 0.7, (hidden, weight))
    assert_close(out, ref)
    for got, want in zip(grads, ref_grads, strict=True):
        assert_close(got, want)
    with torch.no_grad():
        assert_close(linear_cross_entropy(hidden, weight, labels, scale=scale, chunk_elements=chunk), ref)


def test_fused_rmsnorm_matches_autograd() -> None:
    torch.manual_seed(0)
    norm = norms.RMSNorm(16, eps=1e-6)
    norm.weight.data.normal_()
    x = torch.randn(3, 5, 16, requires_grad=True)
    grad = torch.randn(3, 5, 16)
    fused = norm(x)
    assert fused.grad_fn is not None and "RMSNormFunction" in type(fused.grad_fn).__name__
    reference = norms.rms_norm_reference(x, norm.weight, norm.eps)
    got = (fused, *torch.autograd.grad(fused, (x, norm.weight), grad))
    want = (reference, *torch.autograd.grad(reference, (x, norm.weight), grad))
    for g, w in zip(got, want, strict=True):
        assert_close(g, w)
