"""`trainer.compile`: the network really goes through torch.compile, gives eager's loss, and falls back loudly."""

import logging

import pytest
import torch
from famlab.experiments.perf.bench import BenchSettings, make_batch, model_config, token_ids
from famlab.families import build_network
from famlab.families.compile import compile_network, is_compiled
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
def test_trainer_compile_true_uses_inductor_and_matches_eager():
    """`trainer.compile=true` (experiments' maybe_compile) compiles with inductor and keeps eager's loss."""
    from famlab.experiments.configuration.compose import compose
    from famlab.experiments.plumbing.trainer import maybe_compile
    from famlab.objectives import OptimSettings, PretrainModule

    net, objective, batch = _net_and_batch("gpt")
    eager_loss, _ = _loss_and_grads(net, objective, batch)
    cfg = compose(["gpt", "tiny"], ["trainer.compile=true"]).cfg
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    module = maybe_compile(cfg, PretrainModule(net, objective, OptimSettings()))
    loss = module.training_step(batch, 0)
    assert torch._dynamo.utils.counters["frames"]["ok"] > 0
    assert is_compiled(module.net)
    torch.testing.assert_close(loss.detach(), eager_loss, rtol=1e-5, atol=1e-5)  # inductor may reorder sums


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
        assert fp32_matmul_precision(cfg) == expected == torch.get_float32_matmul_precision()
    finally:
        torch.set_float32_matmul_precision(before)
