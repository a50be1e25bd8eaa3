"""Fused LM head + cross-entropy and the fused fp32 RMSNorm equal their unfused references (values and grads)."""

from __future__ import annotations

from functools import partial

import famlab.families.blocks.norms as norms
import pytest
import torch
import torch.nn.functional as F
from famlab.families.heads import linear_cross_entropy
from torch.testing import assert_close


@pytest.mark.parametrize(
    ("rows", "vocab", "chunk", "vocab_slice", "scale"),
    [(50, 300, 1 << 22, 1024, 1.0), (50, 300, 300 * 7, 1024, 0.0625), (50, 300, 300 * 7, 128, 0.0625)],
)
def test_linear_cross_entropy_matches_unfused(
    rows: int, vocab: int, chunk: int, vocab_slice: int, scale: float
) -> None:
    torch.manual_seed(0)
    hidden = torch.randn(rows, 16, requires_grad=True)
    weight = (torch.randn(vocab, 16) * 0.3).requires_grad_()
    labels = torch.randint(0, vocab, (rows,))
    labels[::5] = -100
    labels[1], labels[2] = vocab - 1, 0  # first and last column (of the last and first vocabulary slice)
    ref = F.cross_entropy(F.linear(hidden * scale, weight), labels, reduction="sum")
    ref_grads = torch.autograd.grad(ref * 0.7, (hidden, weight))
    fused = partial(linear_cross_entropy, scale=scale, chunk_elements=chunk, vocab_slice=vocab_slice)
    out = fused(hidden, weight, labels)
    grads = torch.autograd.grad(out * 0.7, (hidden, weight))
    assert_close(out, ref)
    for got, want in zip(grads, ref_grads, strict=True):
        assert_close(got, want)
    with torch.no_grad():
        assert_close(fused(hidden, weight, labels), ref)


def test_linear_cross_entropy_mean_hands_its_gradients_over_once() -> None:
    """``reduction="mean"`` as F.cross_entropy; ``loss.backward()`` (grad_output 1) gives the reference grads."""
    torch.manual_seed(0)
    hidden = torch.randn(30, 16, requires_grad=True)
    weight = (torch.randn(200, 16) * 0.3).requires_grad_()
    labels = torch.randint(0, 200, (30,))
    labels[::3] = -100
    ref = F.cross_entropy(F.linear(hidden, weight), labels)
    ref_grads = torch.autograd.grad(ref, (hidden, weight))
    out = linear_cross_entropy(hidden, weight, labels, reduction="mean", vocab_slice=64)
    assert_close(out, ref)
    out.backward(retain_graph=True)
    assert_close(hidden.grad, ref_grads[0])
    assert_close(weight.grad, ref_grads[1])
    with pytest.raises(RuntimeError, match="already backpropagated"):
        out.backward()
    with pytest.raises(ValueError, match="reduction"):
        linear_cross_entropy(hidden, weight, labels, reduction="none")
    none_labelled = torch.full_like(labels, -100)
    assert linear_cross_entropy(hidden, weight, none_labelled, reduction="mean").item() == 0.0


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


def test_linear_cross_entropy_under_bf16_autocast() -> None:
    """bf16 matmuls (as under ``bf16-mixed``), fp32 softmax and an fp32 weight gradient, as the unfused head."""
    torch.manual_seed(0)
    hidden = torch.randn(40, 16, requires_grad=True)
    weight = (torch.randn(300, 16) * 0.3).requires_grad_()
    labels = torch.randint(0, 300, (40,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = F.cross_entropy(F.linear(hidden, weight).float(), labels, reduction="sum")
        out = linear_cross_entropy(hidden, weight, labels, chunk_elements=300 * 16, vocab_slice=128)
    ref_grads = torch.autograd.grad(ref, (hidden, weight))
    grads = torch.autograd.grad(out, (hidden, weight))
    assert out.dtype == torch.float32 and grads[1].dtype == torch.float32
    assert_close(out, ref, rtol=1e-2, atol=1e-2)
    for got, want in zip(grads, ref_grads, strict=True):
        assert_close(got, want.to(got.dtype), rtol=2e-2, atol=2e-2)
