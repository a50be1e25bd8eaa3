"""`trainer.compile`: the whole training loss (network + objective) goes through torch.compile with no graph break,
gives eager's loss and gradients, and falls back to eager loudly at whichever call fails."""

import logging

import pytest
import torch
from famlab.experiments.perf.bench import BenchSettings, make_batch, model_config, token_ids
from famlab.families import build_network
from famlab.families.compile import compile_fn, compile_network, is_compiled
from famlab.objectives import default_objective, make_objective

TINY = BenchSettings(dim=32, layers=2, heads=4, ffn=64, vocab=300, batch=2, seq=16)


def _net_and_batch(family: str):
    torch.manual_seed(0)
    s = BenchSettings(**{**TINY.__dict__, "families": family})
    net = build_network(model_config(family, s))
    objective = make_objective(default_objective(family), token_ids(s.vocab),
                               seq_len=s.seq, family=family, generator=torch.Generator().manual_seed(0))
    return net, objective, make_batch(objective, s, torch.Generator().manual_seed(1))


def _loss_and_grads(net, objective, batch):
    net.zero_grad(set_to_none=True)
    loss = objective.loss(net, batch).loss
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in net.parameters() if p.grad is not None]


@pytest.mark.slow  # ~20 s per family of tracing on 2 loaded cores
@pytest.mark.parametrize("family", ["bert", "gpt", "t5"])
def test_compiled_network_runs_through_dynamo_and_matches_eager(family):
    """Dynamo traces frames of the network (its counters move) and loss + gradients equal eager's."""
    net, objective, batch = _net_and_batch(family)
    eager_loss, eager_grads = _loss_and_grads(net, objective, batch)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compile_network(net, backend="aot_eager")  # the graph capture + autograd split of inductor, no C++ build
    loss, grads = _loss_and_grads(net, objective, batch)
    assert torch._dynamo.utils.counters["frames"]["ok"] > 0
    assert is_compiled(net)
    torch.testing.assert_close(loss, eager_loss)
    for g, e in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(g, e)
    assert set(net.state_dict()) == set(build_network(net.config).state_dict())  # no `_orig_mod.` prefix


@pytest.mark.slow
def test_trainer_compile_true_compiles_the_whole_training_loss_with_inductor():
    """`trainer.compile=true` (experiments' maybe_compile) compiles the training step's loss with inductor (one
    dynamo frame for network and loss) and keeps eager's loss."""
    from famlab.experiments.configuration.compose import compose
    from famlab.experiments.plumbing.trainer import maybe_compile
    from famlab.objectives import OptimSettings, PretrainModule

    net, objective, batch = _net_and_batch("gpt")
    eager_loss, _ = _loss_and_grads(net, objective, batch)
    cfg = compose(["gpt", "tiny"], ["trainer.compile=true"]).cfg
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    module = maybe_compile(cfg.trainer, PretrainModule(net, objective, OptimSettings()))
    loss = module.training_step(batch, 0)
    assert torch._dynamo.utils.counters["frames"]["ok"] == 1  # one frame: no graph break anywhere in the loss
    assert module.step_loss.is_compiled and not is_compiled(module.net)  # the loss is compiled, not only the net
    torch.testing.assert_close(loss.detach(), eager_loss, rtol=1e-5, atol=1e-5)  # inductor may reorder sums


# compiled vs eager, fp32 on CPU: inductor fuses and reorders reductions. Measured on the 2-core CI machine: the
# losses (~5.7) equal, every gradient within 2.4e-7 absolute; the bound leaves 4x for other CPUs' vector widths.
RTOL, ATOL = 1e-5, 1e-6


@pytest.mark.slow  # ~20-70 s per family: inductor builds C++ kernels for the forward and the backward
@pytest.mark.parametrize("family", ["bert", "gpt", "t5"])
def test_whole_loss_compiles_with_inductor_fullgraph_and_matches_eager(family):
    """``torch.compile(fullgraph=True)`` of ``objective.loss(net, batch)`` (MLM's sparse head, the fused LM loss
    and T5's kernels included): no graph break, and loss and every gradient equal eager's within RTOL / ATOL."""
    net, objective, batch = _net_and_batch(family)
    eager_loss, eager_grads = _loss_and_grads(net, objective, batch)
    torch._dynamo.reset()
    step = compile_fn(lambda b: objective.loss(net, b).loss, "the training loss", fullgraph=True)
    net.zero_grad(set_to_none=True)
    loss = step(batch)
    loss.backward()
    assert step.is_compiled, step.error  # fullgraph: any graph break would have raised and fallen back
    torch.testing.assert_close(loss.detach(), eager_loss, rtol=RTOL, atol=ATOL)
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    for g, e in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(g, e, rtol=RTOL, atol=ATOL)


def _warnings(caplog) -> list[logging.LogRecord]:
    """famlab.compile's warnings (torch logs its own records at DEBUG beside them)."""
    return [r for r in caplog.records if r.name == "famlab.compile" and r.levelno >= logging.WARNING]


def _fails_on_graph(n: int):
    """An ``aot_eager``-like backend that compiles graphs 1..n-1 and raises on the n-th (a later recompile)."""
    from torch._dynamo.backends.common import aot_autograd

    seen = [0]
    inner = aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=lambda gm, _: gm)

    def backend(gm, example_inputs):
        seen[0] += 1
        if seen[0] >= n:
            raise RuntimeError(f"graph {seen[0]}: no compiler here")
        return inner(gm, example_inputs)

    return backend


def test_the_loss_falls_back_to_eager_at_a_later_failing_call(caplog):
    """The first call compiles; a recompile (another batch size) fails: that call and every later one run eager
    with eager's loss, after exactly one warning naming the error."""
    net, objective, batch = _net_and_batch("gpt")
    half = {k: v[:1] for k, v in batch.items()}
    torch._dynamo.reset()
    step = compile_fn(lambda b: objective.loss(net, b).loss, "the training loss",
                      backend=_fails_on_graph(2), dynamic=False)
    with caplog.at_level(logging.WARNING, logger="famlab.compile"):
        step(batch)
        assert step.is_compiled and not _warnings(caplog)
        losses = [step(half), step(batch)]
    (record,) = _warnings(caplog)
    assert "torch.compile of the training loss failed" in record.getMessage()
    assert "graph 2: no compiler here" in record.getMessage() and "running eager" in record.getMessage()
    assert not step.is_compiled and step.error is not None
    torch.testing.assert_close(losses[0], objective.loss(net, half).loss)
    torch.testing.assert_close(losses[1], objective.loss(net, batch).loss)


def test_a_network_falls_back_to_eager_at_a_later_failing_call(caplog):
    """compile_network guards every call too: a failing recompile leaves an eager network and one warning."""
    net, objective, batch = _net_and_batch("gpt")
    half = {k: v[:1] for k, v in batch.items()}
    torch._dynamo.reset()
    compile_network(net, backend=_fails_on_graph(2), dynamic=False)
    with caplog.at_level(logging.WARNING, logger="famlab.compile"):
        objective.loss(net, batch)
        assert is_compiled(net) and not _warnings(caplog)
        loss = objective.loss(net, half).loss
    (record,) = _warnings(caplog)
    assert "graph 2: no compiler here" in record.getMessage()
    assert not is_compiled(net)
    with torch.no_grad():
        torch.testing.assert_close(loss, objective.loss(net, half).loss)


def test_failing_backend_falls_back_to_eager_and_logs(caplog):
    """A compiler that fails on the first call leaves a warning and an eager network with the eager loss."""

    def broken_backend(gm, example_inputs):
        raise RuntimeError("no compiler here")

    net, objective, batch = _net_and_batch("gpt")
    eager_loss, _ = _loss_and_grads(net, objective, batch)
    torch._dynamo.reset()
    with caplog.at_level(logging.WARNING, logger="famlab.compile"):
        compile_network(net, backend=broken_backend)
        loss, _ = _loss_and_grads(net, objective, batch)
    assert "running eager" in caplog.text and "no compiler here" in caplog.text
    assert not is_compiled(net)
    torch.testing.assert_close(loss, eager_loss)


def test_torch_module_compile_internals_are_what_compile_network_swaps():
    """torch: ``nn.Module.compile`` stores the compiled call in ``_compiled_call_impl``, ``__call__`` goes through it
    when set, and ``_call_impl`` is the eager call (families/compile.py swaps the first for its eager fallback)."""
    net = torch.nn.Linear(2, 2)
    assert callable(getattr(net, "_call_impl", None)), "torch removed nn.Module._call_impl"
    assert getattr(net, "_compiled_call_impl", "gone") is None, "torch changed nn.Module._compiled_call_impl"
    net.compile(backend="eager")  # lazy: nothing is traced until the first call
    assert net._compiled_call_impl is not None, "torch: nn.Module.compile no longer sets _compiled_call_impl"
    net._compiled_call_impl = lambda *args, **kwargs: "routed"
    assert net(torch.zeros(1, 2)) == "routed", "torch: nn.Module.__call__ no longer calls _compiled_call_impl"
    net._compiled_call_impl = None
    torch.testing.assert_close(net(torch.ones(1, 2)), net._call_impl(torch.ones(1, 2)))


@pytest.mark.parametrize(("cuda", "accelerator", "expected"),
                         [(True, "auto", "high"), (True, "cpu", "highest"), (False, "auto", "highest")])
def test_tf32_matmuls_exactly_when_the_run_trains_on_cuda(monkeypatch, cuda, accelerator, expected):
    """make_trainer's fp32_matmul_precision: TF32 ("high") for fp32 matmuls on a CUDA run, torch's default elsewhere
    (a visible GPU is stood in for by torch.cuda.is_available)."""
    from famlab.experiments.configuration.compose import compose
    from famlab.experiments.plumbing.trainer import fp32_matmul_precision

    cfg = compose(["gpt", "tiny"], [f"trainer.accelerator={accelerator}"]).cfg
    before = torch.get_float32_matmul_precision()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    try:
        torch.set_float32_matmul_precision("highest")
        assert fp32_matmul_precision(cfg.trainer) == expected == torch.get_float32_matmul_precision()
    finally:
        torch.set_float32_matmul_precision(before)
