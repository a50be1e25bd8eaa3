"""Where a train step's time goes, measured inside real steps: the forward's aten ops, the backward's autograd nodes.

``famlab bench --profile`` prints this for famlab and Hugging Face side by side. torch.profiler's tables
misled on the small CPUs here: its own bookkeeping allocations made freed 8 MiB activation buffers
page-fault again, which never happens in an unprofiled step (``getrusage`` shows no minor faults per step in
steady state; docs/results.md, Speed). Instead:

- the forward (model + loss) runs under a ``TorchDispatchMode`` that times each aten op around its kernel;
- the backward runs with a pre-hook and a hook on every node of the step's autograd graph; the CPU engine
  runs the nodes one after another in the calling thread, so a node's time is its kernels' time;
- forward / backward / optimizer wall times come from separate, uninstrumented steps.

The sides alternate as in the bench, and every figure is a median over the measured steps. CPU only:
CUDA kernels are asynchronous, so per-op wall times would mean nothing there.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from famlab.experiments.libraries.internals import TorchDispatchMode

if TYPE_CHECKING:
    from famlab.experiments.libraries.internals import OpOverload
    from torch.autograd.graph import Node

# aten ops and autograd nodes that are matrix multiplications (the "matmul" share of a step)
MATMUL_OPS = frozenset({"mm", "addmm", "addmm_", "bmm", "baddbmm", "baddbmm_", "addbmm", "addbmm_"})
MATMUL_NODES = frozenset({"MmBackward0", "AddmmBackward0", "BmmBackward0", "BaddbmmBackward0"})
ROUNDS = 8  # measured steps per side (each an instrumented and a plain one)


@dataclass
class TrainStep:
    """Forward + loss, backward and an optimizer step on one batch; calling it runs all three, returns the loss."""

    loss_fn: Callable[[], torch.Tensor]
    optimizer: torch.optim.Optimizer
    device: torch.device

    def forward(self) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda"):
            return self.loss_fn()

    def update(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def __call__(self) -> float:
        loss = self.forward()
        loss.backward()
        self.update()
        return float(loss.detach())


@dataclass
class StepBreakdown:
    """Median seconds per step: ``phases`` (forward, backward, optimizer; uninstrumented steps), the forward's
    aten ops and the backward's autograd nodes by name (instrumented steps)."""

    phases: dict[str, float]
    forward_ops: dict[str, float]
    backward_nodes: dict[str, float]

    def matmul_s(self) -> float:
        """Time in matrix multiplications: forward matmul ops plus matmul backward nodes."""
        return sum(t for n, t in self.forward_ops.items() if n in MATMUL_OPS) + sum(
            t for n, t in self.backward_nodes.items() if n in MATMUL_NODES
        )


class _OpTimer(TorchDispatchMode):
    """Adds each aten op's wall time (around the kernel call) to ``store[op name]``."""

    def __init__(self, store: dict[str, float]) -> None:
        super().__init__()
        self.store = store

    def __torch_dispatch__(self, func: OpOverload, types: Sequence[type], args: tuple[object, ...] = (),
                           kwargs: dict[str, object] | None = None) -> object:
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        self.store[func.overloadpacket.__name__] += time.perf_counter() - start
        return out


def _backward_timed(loss: torch.Tensor, store: dict[str, float]) -> None:
    """``loss.backward()`` with each graph node's time added to ``store[node name]``; the hooks are removed after."""
    handles, seen, todo = [], set(), [loss.grad_fn]
    starts: dict[Node, float] = {}
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)

        def pre(grad_outputs: tuple[torch.Tensor | None, ...], node: Node = node) -> None:
            starts[node] = time.perf_counter()

        def post(grad_inputs: tuple[torch.Tensor | None, ...], grad_outputs: tuple[torch.Tensor | None, ...],
                 node: Node = node, name: str = node.name()) -> None:
            store[name] += time.perf_counter() - starts[node]

        # AccumulateGrad nodes outlive the step (one per parameter), so their hooks must not stay behind
        handles += [node.register_prehook(pre), node.register_hook(post)]
        todo.extend(next_node for next_node, _ in node.next_functions)
    try:
        loss.backward()
    finally:
        for handle in handles:
            handle.remove()


def _median(samples: list[dict[str, float]]) -> dict[str, float]:
    names = {name for sample in samples for name in sample}
    return {name: statistics.median(sample.get(name, 0.0) for sample in samples) for name in names}


def breakdown(steps: dict[str, TrainStep], *, rounds: int = ROUNDS, warmup: int = 1) -> dict[str, StepBreakdown]:
    """Measure each named step ``rounds`` times (plus ``warmup``), alternating which side goes first."""
    phases: dict[str, list[dict[str, float]]] = {name: [] for name in steps}
    ops: dict[str, list[dict[str, float]]] = {name: [] for name in steps}
    nodes: dict[str, list[dict[str, float]]] = {name: [] for name in steps}
    order = list(steps)
    for i in range(warmup + rounds):
        for name in order if i % 2 == 0 else order[::-1]:
            step = steps[name]
            t0 = time.perf_counter()
            loss = step.forward()
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            step.update()
            t3 = time.perf_counter()
            fwd_ops: dict[str, float] = defaultdict(float)
            bwd_nodes: dict[str, float] = defaultdict(float)
            with _OpTimer(fwd_ops):
                loss = step.forward()
            _backward_timed(loss, bwd_nodes)
            step.update()
            if i >= warmup:
                phases[name].append({"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2})
                ops[name].append(fwd_ops)
                nodes[name].append(bwd_nodes)
    return {name: StepBreakdown(_median(phases[name]), _median(ops[name]), _median(nodes[name])) for name in steps}


def format_breakdown(results: dict[str, StepBreakdown], rows: int = 12) -> list[str]:
    """A side-by-side table in ms per step: phases, the top ``rows`` forward ops and backward nodes, matmul share."""
    names = list(results)
    lines = [f"    {'':44s}" + "".join(f"{name:>10s}" for name in names)]

    def row(label: str, values: list[float]) -> str:
        return f"    {label:44s}" + "".join(f"{v * 1e3:10.1f}" for v in values)

    lines.append("    phases (plain steps):")
    for phase in ("forward", "backward", "optimizer"):
        lines.append(row(phase, [results[n].phases[phase] for n in names]))
    lines.append(row("step", [sum(results[n].phases.values()) for n in names]))
    for title, table in (
        ("forward aten ops (instrumented steps)", "forward_ops"),
        ("backward autograd nodes (instrumented steps)", "backward_nodes"),
    ):
        per_side = [getattr(results[n], table) for n in names]
        keys = sorted({k for t in per_side for k in t}, key=lambda k: -max(t.get(k, 0.0) for t in per_side))
        lines.append(f"    {title}:")
        lines += [row("  " + key[:42], [t.get(key, 0.0) for t in per_side]) for key in keys[:rows]]
        rest = keys[rows:]
        if rest:
            lines.append(row(f"  ({len(rest)} others)", [sum(t.get(k, 0.0) for k in rest) for t in per_side]))
        lines.append(row("  sum", [sum(t.values()) for t in per_side]))
    shares = []
    for n in names:
        r = results[n]
        timed = sum(r.forward_ops.values()) + sum(r.backward_nodes.values())
        shares.append(f"{n} {r.matmul_s() * 1e3:.1f} ms = {r.matmul_s() / timed:.0%}")
    lines.append("    matmul (forward mm/addmm/bmm + their backward nodes) of all timed ops: " + ", ".join(shares))
    return lines
