"""Every fast CPU kernel (famlab.families.kernels) equals its block's reference computation, values and gradients;
`dispatch.use_fast` picks each where docs/architecture.md says and `reference_only` turns them all off."""

from __future__ import annotations

import ast
from functools import partial
from pathlib import Path

import famlab.families.blocks.norms as norms
import pytest
import torch
import torch.nn.functional as F
from conftest import VOCAB, tiny
from famlab.families import build_network
from famlab.families.blocks.attention import attend
from famlab.families.kernels.context_kv import project_context
from famlab.families.kernels.dispatch import Kernel, reference_only, use_fast
from famlab.families.kernels.joint_embedding import embed_both
from famlab.families.kernels.linear_cross_entropy import linear_cross_entropy
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
    """The hand-written backward gives the step-by-step formula's outputs and gradients."""
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


def test_biased_attention_fast_path_matches_the_reference():
    """The CPU path for a learned bias (T5) gives the math reference's outputs and gradients, masked rows too."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, requires_grad=True) for _ in range(3))
    table = torch.randn(1, 3, 5, 5, requires_grad=True)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    results = []
    for impl in ("sdpa", "math"):  # sdpa takes the fast path: the bias needs a gradient, the tensors are on CPU
        bias = table.masked_fill(~causal, float("-inf"))
        assert use_fast(Kernel.BIASED_ATTENTION, q, bias)
        out = attend(q, k, v, mask=bias, is_causal=False, scale=0.5, impl=impl)
        grads = torch.autograd.grad(out.square().sum(), (q, k, v, table))
        results.append((out, grads))
    torch.testing.assert_close(results[0][0], results[1][0])
    for fast, ref in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(fast, ref)


@pytest.mark.parametrize("bias", [True, False])
def test_project_context_equals_each_layers_projection(bias: bool) -> None:
    """One matmul over the concatenated K/V weights gives each layer's own k, v and all gradients."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 2 * 12, bias=bias) for _ in range(3)]
    context = torch.randn(2, 5, 16, requires_grad=True)
    params = [context, *(p for layer in layers for p in layer.parameters())]
    fused = project_context(context, layers, [12, 12])
    reference = [layer(context).split([12, 12], dim=-1) for layer in layers]
    assert len(fused) == 3 and all(len(kv) == 2 for kv in fused)
    loss = sum((t * (i + 1)).sum() for i, kv in enumerate(fused) for t in kv)
    ref_loss = sum((t * (i + 1)).sum() for i, kv in enumerate(reference) for t in kv)
    for got, want in zip(torch.autograd.grad(loss, params), torch.autograd.grad(ref_loss, params), strict=True):
        assert_close(got, want)
    for got_kv, want_kv in zip(fused, reference, strict=True):
        for got, want in zip(got_kv, want_kv, strict=True):
            assert_close(got, want)


def test_embed_both_equals_two_lookups() -> None:
    """One lookup of encoder and decoder ids gives the two lookups' embeddings and the summed table gradient."""
    torch.manual_seed(0)
    embed = torch.nn.Embedding(50, 8)
    a, b = torch.randint(0, 50, (2, 7)), torch.randint(0, 50, (2, 3))
    first, second = embed_both(embed, a, b)
    assert first.shape == (2, 7, 8) and second.shape == (2, 3, 8)
    assert_close(first, embed(a))
    assert_close(second, embed(b))
    (grad,) = torch.autograd.grad(first.sum() + 2 * second.sum(), embed.weight)
    (want,) = torch.autograd.grad(embed(a).sum() + 2 * embed(b).sum(), embed.weight)
    assert_close(grad, want)


def test_use_fast_rules_and_reference_only() -> None:
    """The dispatch table's rules: RMSNorm only fp32 with autograd, biased attention only for a float bias with a
    gradient; ``reference_only`` turns every kernel off and restores them, also after an error."""
    x, w = torch.randn(2, 4), torch.ones(4)
    bias = torch.zeros(1, 1, 2, 2, requires_grad=True)
    assert use_fast(Kernel.RMS_NORM, x, w)
    assert not use_fast(Kernel.RMS_NORM, x.bfloat16(), w)
    assert not use_fast(Kernel.RMS_NORM, x, w.bfloat16())
    with torch.no_grad():
        assert not use_fast(Kernel.RMS_NORM, x, w)
    assert use_fast(Kernel.BIASED_ATTENTION, x, bias)
    assert not use_fast(Kernel.BIASED_ATTENTION, x, bias.detach())
    assert not use_fast(Kernel.BIASED_ATTENTION, x, torch.ones(1, 1, 2, 2, dtype=torch.bool))
    assert not use_fast(Kernel.BIASED_ATTENTION, x, None)
    with pytest.raises(RuntimeError, match="inside"), reference_only():
        assert not any(use_fast(kernel, x, w) for kernel in Kernel)
        raise RuntimeError("inside")
    assert all(use_fast(kernel, x) for kernel in (Kernel.LINEAR_CROSS_ENTROPY, Kernel.CONTEXT_KV,
                                                  Kernel.JOINT_EMBEDDING))


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_output_embedding_is_what_project_multiplies_by(family: str, tied: bool) -> None:
    """``project(h) == F.linear(scale * h, W)`` for the ``(W, scale)`` the fused LM loss reads."""
    torch.manual_seed(0)
    net = build_network(tiny(family, tie_embeddings=tied))
    weight, scale = net.output_embedding()
    hidden = torch.randn(2, 3, 32)
    assert_close(net.project(hidden), F.linear(scale * hidden, weight))
    assert (weight is net.embed.weight) == tied


def test_t5_forward_equals_its_reference_path() -> None:
    """A T5 forward and backward with every kernel on (RMSNorm, biased attention, one K/V projection, one
    embedding lookup) gives the reference path's hidden states and parameter gradients."""
    torch.manual_seed(0)
    net = build_network(tiny("t5", pos="t5_bias", norm="rmsnorm", bias=False, qk_scale=1.0))
    ids, dec = torch.randint(0, VOCAB, (2, 9)), torch.randint(0, VOCAB, (2, 5))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0  # padding: the encoder and cross-attention see a mask

    def run() -> tuple[torch.Tensor, ...]:
        hidden = net(ids, mask, decoder_input_ids=dec, compute_logits=False).hidden
        return (hidden, *torch.autograd.grad(hidden.square().sum(), list(net.parameters())))

    fast = run()
    with reference_only():
        reference = run()
    for got, want in zip(fast, reference, strict=True):  # fp32 sums in another order: relative error ~1e-5
        assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_kernels_import_only_torch_and_the_standard_library() -> None:
    """Kernels sit below the block library: none imports a famlab module (blocks import kernels, not back)."""
    folder = Path(__file__).resolve().parents[2] / "families" / "kernels"
    modules = sorted(folder.glob("*.py"))
    assert {m.stem for m in modules} >= {"dispatch", "linear_cross_entropy", "rms_norm", "biased_attention"}
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += ["." if node.level else node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not [n for n in names if n == "." or n.split(".")[0] in ("famlab", "families")], f"{path}: {names}"
