"""First contact with a GPU: does famlab run there the way docs/architecture.md says it should? One table, < 8 minutes.

Run it on the first GPU machine famlab meets, before any comparison:

    python benchmarks/gpu_check.py                      # one table; exit status 1 if a check fails
    python benchmarks/gpu_check.py --json out.json      # the table as JSON too (docs/results.md quotes it)
    python benchmarks/gpu_check.py --only attn,lm_loss  # the checks whose names start so
    python benchmarks/gpu_check.py --cpu-smoke          # the same checks at tiny shapes on the CPU (the suite runs it)

Checks, in order (a row each; the result is ok, FAIL: why, or skipped: why):

- ``attn.flash_causal``: plain causal attention through famlab's attention block (``families/blocks/attention.py``)
  runs on SDPA's flash kernel, both by default and with only flash allowed (``sdpa_kernel([FLASH_ATTENTION])``);
  output and gradients equal the fp64 math path.
- ``attn.t5_bias`` / ``attn.alibi``: the block with T5's learned relative bias (a float bias with a gradient) and
  with ALiBi under a causal mask (``families/blocks/positions.py``) runs on the memory-efficient kernel with only
  it allowed, and the default path's and that kernel's gradients (the bias's included) equal the fp64 math path.
  On the CPU (no efficient kernel) the default path runs: what ``families/kernels/dispatch.py`` chooses there.
- ``lm_loss``: the LM loss path dispatch chooses on the device (``objectives.objective.dense_lm_loss``) against the
  dense reference (``dispatch.reference_only()``): loss and gradients, and their times.
- ``pretrain.<family>``: ``famlab pretrain <family> small`` for 100 bf16 steps in a subprocess; tokens/s and MFU
  are the medians of the run's ``perf/tokens_per_sec`` and ``perf/mfu`` (metrics.csv) after the first 20 steps.
- ``workers.compare``: a tiny ``famlab compare`` with ``compare.workers=2`` on one GPU; its jobs must overlap.
- ``compile.gpt``: ``famlab pretrain gpt small trainer.compile=true`` a few steps, no eager fallback; its tokens/s
  against ``pretrain.gpt``'s.
- ``ddp.finetune``: a 2-rank DDP ``famlab finetune`` (needs two GPUs).

Tolerances (``torch.testing.assert_close`` against an fp64 reference, ``atol`` relative to the reference's
largest magnitude): bf16 rtol = atol = 2e-2, fp32 rtol = atol = 2e-3 (fp32 matmuls may run in TF32 on a GPU).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from famlab.experiments.analysis.yardsticks import read_metrics  # noqa: E402
from famlab.experiments.libraries.internals import TorchDispatchMode  # noqa: E402
from famlab.experiments.perf.bench import BenchSettings, model_config  # noqa: E402
from famlab.experiments.perf.hardware import peak_flops  # noqa: E402
from famlab.experiments.plumbing.live import read_status  # noqa: E402
from famlab.experiments.steps.comparison import STATUS_DIR  # noqa: E402
from famlab.families import build_network  # noqa: E402
from famlab.families.blocks.attention import Attention  # noqa: E402
from famlab.families.blocks.layers import prepare_mask  # noqa: E402
from famlab.families.blocks.positions import Positions, make_positions  # noqa: E402
from famlab.families.kernels.dispatch import Kernel, reference_only, use_fast  # noqa: E402
from famlab.objectives.corruption import IGNORE  # noqa: E402
from famlab.objectives.objective import dense_lm_loss  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

FAMILIES = ("bert", "gpt", "t5")
TOLERANCE = {torch.bfloat16: 2e-2, torch.float32: 2e-3}  # rtol = atol / max|reference| (see the module docstring)
GPU_BUDGET_S = 470.0  # the whole table within 8 minutes


@dataclass
class Row:
    """One check: its name, ``ok`` / ``FAIL: why`` / ``skipped: why``, a number where there is one, what it means."""

    name: str
    result: str
    number: str = ""
    meaning: str = ""
    values: dict[str, float] = field(default_factory=dict)  # the number's raw values, for the JSON

    @property
    def ok(self) -> bool:
        return self.result == "ok" or self.result.startswith("skipped")


class CheckFailed(Exception):
    """A check's property does not hold; the message is the row's reason."""


class CheckSkipped(Exception):
    """The check cannot run here; the message is the reason."""


@dataclass
class Mode:
    """Where and at which shapes the checks run: the GPU at ``small`` shapes, or the CPU smoke at tiny ones."""

    cuda: bool
    workdir: Path
    deadline: float  # time.monotonic() by which every check must have finished
    cuda_count: int = 0

    @property
    def device(self) -> torch.device:
        return torch.device("cuda" if self.cuda else "cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.cuda else torch.float32

    def left(self) -> float:
        return self.deadline - time.monotonic()


# --- attention kernels ----------------------------------------------------------------------------------------------


class OpRecorder(TorchDispatchMode):
    """The names of the aten ops run inside it (forward and backward), below autograd."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def sdpa_kernels(ops: list[str]) -> str:
    """The SDPA kernels among ``ops`` (``flash``, ``efficient``, ``math``, ``cudnn``), or what ran instead."""
    names = {"flash": "_scaled_dot_product_flash_attention", "efficient": "_scaled_dot_product_efficient_attention",
             "cudnn": "_scaled_dot_product_cudnn_attention", "math": "_scaled_dot_product_attention_math"}
    found = [k for k, op in names.items() if any(o.startswith(op) for o in ops)]
    return "+".join(found) if found else "no SDPA kernel (famlab's own: matmul + softmax)"


def attention_case(scheme: str, mode: Mode) -> tuple[Attention, Positions, torch.Tensor, bool]:
    """famlab's attention block with ``scheme``'s positions at the check's shapes, an input, and causality."""
    dim, heads, batch, seq = (512, 8, 8, 256) if mode.cuda else (64, 4, 2, 64)
    causal = scheme != "t5_bias"  # T5's encoder is bidirectional; ALiBi and plain attention as in GPT
    torch.manual_seed(0)
    block = Attention(dim, heads, bias=scheme != "t5_bias", qk_scale=1.0 if scheme == "t5_bias" else None)
    positions = make_positions(scheme, dim=dim, num_heads=heads, head_dim=dim // heads, max_len=seq, causal=causal)
    x = torch.randn(batch, seq, dim) * 0.5
    return block.to(mode.device), positions.to(mode.device), x.to(mode.device), causal


def attention_grads(block: Attention, positions: Positions, x: torch.Tensor, causal: bool,
                    dtype: torch.dtype) -> tuple[list[torch.Tensor], list[str]]:
    """[output, grad of x, grads of the block's and the positions' parameters] and the aten ops run."""
    x = x.detach().clone().requires_grad_(True)
    for p in [*block.parameters(), *positions.parameters()]:
        p.grad = None
    T = x.shape[1]
    autocast = torch.autocast(x.device.type, dtype) if dtype != x.dtype else nullcontext()
    with OpRecorder() as rec, autocast:
        bias = positions.bias(torch.arange(T, device=x.device), torch.arange(T, device=x.device))
        mask, is_causal = prepare_mask(None, q_len=T, k_len=T, causal=causal, bias=bias, device=x.device)
        y = block(x, mask=mask, is_causal=is_causal)
        (y.float() * torch.linspace(-1, 1, y.shape[-1], device=x.device)).sum().backward()  # a non-uniform grad
    params = [p.grad for p in [*block.parameters(), *positions.parameters()] if p.grad is not None]
    return [y.detach(), x.grad, *params], rec.ops


def assert_close_to(actual: list[torch.Tensor], reference: list[torch.Tensor], dtype: torch.dtype,
                    names: list[str]) -> float:
    """Each tensor within the stated tolerance of its fp64 reference; returns the largest error over max|ref|.

    ``names`` names the tensors in order (a list longer than ``reference`` is cut to it)."""
    if len(actual) != len(reference):
        raise CheckFailed(f"{len(actual)} tensors against the reference's {len(reference)} (a gradient is missing)")
    tol, worst = TOLERANCE[dtype], 0.0
    for name, a, r in zip(names, actual, reference, strict=False):
        scale = float(r.abs().max()) or 1.0
        worst = max(worst, float((a.double() - r).abs().max()) / scale)
        try:
            torch.testing.assert_close(a.double(), r, rtol=tol, atol=tol * scale)
        except AssertionError as e:
            detail = [line.strip() for line in str(e).splitlines() if line.strip()]
            raise CheckFailed(f"{name} off the reference: {detail[1] if len(detail) > 1 else detail[0]}") from e
    return worst


def attention_names(block: Attention, positions: Positions) -> list[str]:
    """What :func:`attention_grads` returns, in order: the output, x's gradient, each parameter's gradient."""
    params = [f"grad of {n}" for n, _ in block.named_parameters()]
    return ["output", "grad of x", *params, *[f"grad of the {type(positions).__name__} {n}"
                                               for n, _ in positions.named_parameters()]]


def math_reference(block: Attention, positions: Positions, x: torch.Tensor, causal: bool) -> list[torch.Tensor]:
    """The same computation through the block's plain math path in fp64."""
    ref_block, ref_pos = copy.deepcopy(block).double(), copy.deepcopy(positions).double()
    ref_block.impl = "math"
    return attention_grads(ref_block, ref_pos, x.double(), causal, torch.float64)[0]


def flash_row(mode: Mode) -> Row:
    """Plain causal attention: SDPA's flash kernel by default and when it is the only one allowed."""
    block, positions, x, causal = attention_case("none", mode)
    reference = math_reference(block, positions, x, causal)
    chosen, ops = attention_grads(block, positions, x, causal, mode.dtype)
    default = sdpa_kernels(ops)
    if default.startswith("no SDPA") or default == "math":
        raise CheckFailed(f"SDPA's default for plain causal attention ran {default}, no fused kernel")
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        only_flash, ops = attention_grads(block, positions, x, causal, mode.dtype)
    if "flash" not in sdpa_kernels(ops):
        raise CheckFailed(f"with only flash allowed, causal attention ran {sdpa_kernels(ops)}")
    names = attention_names(block, positions)
    err = max(assert_close_to(chosen, reference, mode.dtype, names),
              assert_close_to(only_flash, reference, mode.dtype, names))
    where = "CUDA" if mode.cuda else "CPU"
    return Row("attn.flash_causal", "ok", f"max err {err:.1e}", f"{where}: causal self-attention runs SDPA's flash "
               f"kernel (default path ran {default}); {str(mode.dtype)[6:]} equals fp64 math", {"max_rel_err": err})


def biased_row(scheme: str, mode: Mode) -> Row:
    """An additive float bias (T5's learned one, ALiBi's fixed one): the memory-efficient kernel on CUDA."""
    block, positions, x, causal = attention_case(scheme, mode)
    reference = math_reference(block, positions, x, causal)
    chosen, ops = attention_grads(block, positions, x, causal, mode.dtype)
    default = sdpa_kernels(ops)
    names = attention_names(block, positions)
    err = assert_close_to(chosen, reference, mode.dtype, names)
    learned = " (bias grad too)" if any(p.requires_grad for p in positions.parameters()) else ""
    if not mode.cuda:
        return Row(f"attn.{scheme}", "ok", f"max err {err:.1e}", f"CPU (no memory-efficient kernel): the default "
                   f"path ran {default}; grads{learned} equal fp64 math", {"max_rel_err": err})
    for dtype in (torch.bfloat16, torch.float32):  # bf16 under autocast, as training runs; fp32 as evaluation may
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            efficient, ops = attention_grads(block, positions, x, causal, dtype)
        if "efficient" not in sdpa_kernels(ops):
            raise CheckFailed(f"with only the memory-efficient kernel allowed, famlab ran {sdpa_kernels(ops)} "
                              f"({str(dtype)[6:]})")
        err = max(err, assert_close_to(efficient, reference, dtype, names))
    return Row(f"attn.{scheme}", "ok", f"max err {err:.1e}", f"memory-efficient kernel takes the float bias; "
               f"grads{learned} equal fp64 math (bf16 and fp32); default path ran {default}", {"max_rel_err": err})


# --- the LM loss ----------------------------------------------------------------------------------------------------


def _sync(mode: Mode) -> None:
    if mode.cuda:
        torch.cuda.synchronize()


def lm_loss_row(mode: Mode) -> Row:
    """The loss path dispatch chooses on the device against the dense reference: values, gradients and time."""
    batch, seq, dim, vocab = (64, 256, 512, 16384) if mode.cuda else (4, 64, 64, 2048)
    s = BenchSettings(families="gpt", dim=dim, layers=1, heads=4, ffn=4 * dim, vocab=vocab, seq=seq)
    torch.manual_seed(0)
    net = build_network(model_config("gpt", s)).to(mode.device)
    hidden = torch.randn(batch, seq, dim, device=mode.device, requires_grad=True)
    labels = torch.randint(0, vocab, (batch, seq), device=mode.device)
    labels[:, ::5] = IGNORE
    weight = net.output_embedding()[0]
    chosen = "fused linear_cross_entropy" if use_fast(Kernel.LINEAR_CROSS_ENTROPY, hidden) else "dense (reference)"

    def step() -> tuple[list[torch.Tensor], float]:
        hidden.grad, weight.grad = None, None
        _sync(mode)
        t0 = time.perf_counter()
        with torch.autocast(mode.device.type, mode.dtype, enabled=mode.cuda):
            loss = dense_lm_loss(net, hidden, labels).loss
        loss.backward()
        _sync(mode)
        return [loss.detach(), hidden.grad.clone(), weight.grad.clone()], time.perf_counter() - t0  # type: ignore

    def timed(context: Callable[[], AbstractContextManager[None]]) -> tuple[list[torch.Tensor], float]:
        with context():
            runs = [step() for _ in range(5)]
        return runs[-1][0], statistics.median(t for _, t in runs[1:])

    ours, t_ours = timed(nullcontext)
    ref, t_ref = timed(reference_only)
    err = assert_close_to(ours, [r.double() for r in ref], mode.dtype,
                          ["loss", "grad of the hidden states", "grad of the LM head weight"])
    return Row("lm_loss", "ok", f"{t_ours * 1e3:.1f} ms vs dense {t_ref * 1e3:.1f} ms",
               f"dispatch chose {chosen}: loss and grads equal the dense reference (max err {err:.1e}), "
               f"B={batch} T={seq} V={vocab}", {"chosen_ms": t_ours * 1e3, "dense_ms": t_ref * 1e3,
                                                "max_rel_err": err})


# --- famlab commands in subprocesses -------------------------------------------------------------------------------


@dataclass
class Done:
    """A finished ``famlab`` subprocess."""

    returncode: int
    output: str
    wall_s: float


def famlab(args: list[str], mode: Mode, cap_s: float) -> Done:
    """``python -m famlab <args>`` from the checkout, W&B off; its time is capped by ``cap_s`` on a GPU (the CPU
    smoke's shared cores give no time to plan on) and by what is left of the budget."""
    timeout = min(cap_s if mode.cuda else math.inf, mode.left())
    if timeout < 20:
        raise CheckSkipped(f"the time budget is spent ({mode.left():.0f} s left)")
    env = {**os.environ, "WANDB_MODE": "disabled", "WANDB_SILENT": "true", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("FAMLAB_RUN_DIR", None)
    t0 = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "famlab", *args, "wandb.mode=disabled"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise CheckFailed(f"famlab {args[0]} ran past {timeout:.0f} s") from e
    out = done.stdout + done.stderr
    if done.returncode != 0:
        last = [line for line in out.splitlines() if line.strip()][-1:] or ["(no output)"]
        raise CheckFailed(f"famlab {args[0]} exited {done.returncode}: {last[0].strip()[:200]}")
    return Done(done.returncode, out, time.monotonic() - t0)


def device_args(mode: Mode) -> list[str]:
    """Where a run trains: one GPU in bf16, or the CPU."""
    if mode.cuda:
        return ["trainer.accelerator=gpu", "trainer.precision=bf16-mixed"]
    return ["trainer.accelerator=cpu"]


def pretrain_args(family: str, mode: Mode, run_dir: Path, steps: int) -> list[str]:
    """``famlab pretrain`` at ``small`` shapes on the GPU (tiny on the CPU), ``steps`` steps, one validation."""
    shape = ["small", "trainer.log_every_n_steps=10"] if mode.cuda else [
        "tiny", "trainer.log_every_n_steps=1", "data.batch_size=8", "data.seq_len=32"]
    return ["pretrain", family, *shape, *device_args(mode), "trainer.devices=1", f"trainer.max_steps={steps}",
            f"trainer.val_check_interval={steps}", "trainer.limit_val_batches=2", "trainer.progress_bar=false",
            f"run_dir={run_dir}"]


def compile_args(mode: Mode, run_dir: Path, steps: int) -> list[str]:
    """``famlab pretrain gpt small trainer.compile=true`` for ``steps`` steps."""
    return [*pretrain_args("gpt", mode, run_dir, steps), "trainer.compile=true"]


def throughput(run_dir: Path, steps: int, skip: int) -> tuple[float, float]:
    """(tokens/s, MFU) of a finished run: medians of ``perf/*`` in its metrics.csv from step ``skip`` on; MFU NaN
    when the run logged none (no peak known for the device)."""
    result = json.loads((run_dir / "results.json").read_text())
    if result["steps"] != steps:
        raise CheckFailed(f"{run_dir.name} trained {result['steps']} steps, not {steps}")
    loss = result["final"].get("val/loss")
    if loss is None or not math.isfinite(loss):
        raise CheckFailed(f"{run_dir.name}: final val/loss {loss}")
    rows = [r for r in read_metrics(run_dir / "metrics.csv") if r.get("step", -1) >= skip]
    tok = [r["perf/tokens_per_sec"] for r in rows if "perf/tokens_per_sec" in r]
    mfu = [r["perf/mfu"] for r in rows if "perf/mfu" in r]
    if not tok:
        raise CheckFailed(f"{run_dir.name}/metrics.csv has no perf/tokens_per_sec from step {skip}")
    return statistics.median(tok), statistics.median(mfu) if mfu else math.nan


def pretrain_row(family: str, mode: Mode, measured: dict[str, float]) -> Row:
    """100 steps of ``famlab pretrain <family> small`` (4 tiny steps on the CPU): tokens/s and MFU."""
    steps, skip = (100, 20) if mode.cuda else (4, 1)
    run_dir = mode.workdir / f"pretrain-{family}"
    done = famlab(pretrain_args(family, mode, run_dir, steps), mode, cap_s=150)
    tok, mfu = throughput(run_dir, steps, skip)
    measured[family] = tok
    shape = "small, bf16-mixed" if mode.cuda else "tiny, fp32"
    return Row(f"pretrain.{family}", "ok", f"{tok:,.0f} tok/s, MFU {mfu:.1%}",
               f"famlab pretrain {family} ({shape}), {steps} steps in {done.wall_s:.0f} s; medians from step {skip}",
               {"tokens_per_sec": tok, "mfu": mfu, "wall_s": done.wall_s})


def compile_row(mode: Mode, measured: dict[str, float]) -> Row:
    """``trainer.compile=true`` on GPT ``small``: it trains, no eager fallback, and how its speed compares."""
    if not mode.cuda:
        raise CheckSkipped("no CUDA (CPU inductor takes minutes here; tests/experiments/test_compile.py covers it)")
    steps, skip = 40, 20
    run_dir = mode.workdir / "compile-gpt"
    done = famlab(compile_args(mode, run_dir, steps), mode, cap_s=240)
    log = (run_dir / "famlab.log").read_text(errors="replace") if (run_dir / "famlab.log").is_file() else ""
    fallback = [line for line in (done.output + log).splitlines() if "running eager" in line]
    if fallback:
        raise CheckFailed(f"torch.compile fell back to eager: {fallback[0].strip()[:200]}")
    tok, mfu = throughput(run_dir, steps, skip)
    eager = measured.get("gpt", math.nan)
    return Row("compile.gpt", "ok", f"{tok:,.0f} tok/s, x{tok / eager:.2f} eager", f"famlab pretrain gpt small "
               f"trainer.compile=true, {steps} steps in {done.wall_s:.0f} s (compiling included), MFU {mfu:.1%}",
               {"tokens_per_sec": tok, "speedup": tok / eager, "mfu": mfu, "wall_s": done.wall_s})


def small_task(path: Path) -> Path:
    """A 3-class task of 300 short sentences (CSV), so a fine-tune check spends its time training, not tokenizing."""
    rng = random.Random(0)
    words = {"animal": ["dog", "cat", "horse", "bird", "fish"], "colour": ["red", "blue", "green", "white"],
             "motion": ["run", "walk", "swim", "fly", "jump"]}
    lines = ["sentence,topic,split"]
    for i in range(300):
        topic, split = list(words)[i % 3], (["train"] * 8 + ["val", "test"])[i % 10]
        lines.append(f"a {' '.join(rng.choices(words[topic], k=4))} thing,{topic},{split}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def ddp_args(mode: Mode, run_dir: Path, task: Path) -> list[str]:
    """``famlab finetune gpt tiny init=scratch`` on two devices under DDP, 20 steps on ``task``."""
    return ["finetune", "gpt", "tiny", "init=scratch", f"data.task={task}", "data.text_column=sentence",
            "data.label_column=topic", *device_args(mode), "trainer.devices=2", "trainer.strategy=ddp",
            "finetune.max_steps=20", "finetune.val_every=10", "trainer.progress_bar=false", f"run_dir={run_dir}"]


def ddp_row(mode: Mode) -> Row:
    """A 2-rank DDP fine-tune from scratch on two GPUs (``trainer.strategy=ddp``)."""
    if not mode.cuda:
        raise CheckSkipped("no CUDA (CPU gloo DDP: tests/experiments/test_ddp.py)")
    if mode.cuda_count < 2:
        raise CheckSkipped("one GPU")
    run_dir = mode.workdir / "ddp-finetune"
    task = small_task(mode.workdir / "task.csv")
    done = famlab(ddp_args(mode, run_dir, task), mode, cap_s=180)
    result = json.loads((run_dir / "results.json").read_text())
    acc = statistics.mean(s["test/acc"] for s in result["seeds"].values())
    return Row("ddp.finetune", "ok", f"{done.wall_s:.0f} s", f"famlab finetune gpt tiny on 2 GPUs (ddp), 20 steps, "
               f"test/acc {acc:.3f} on a 3-class toy task", {"wall_s": done.wall_s, "test_acc": acc})


def overlap_s(status_dir: Path) -> tuple[float, int]:
    """(seconds during which at least two of a comparison's jobs ran at once, jobs that finished) from its job
    status files."""
    spans = []
    for path in sorted(status_dir.glob("*.json")):
        s = read_status(path)
        if s.get("state") == "done":
            spans.append((float(s["started"]), float(s["ended"])))
    both = sum(max(0.0, min(a[1], b[1]) - max(a[0], b[0])) for i, a in enumerate(spans) for b in spans[i + 1:])
    return both, len(spans)


def compare_args(mode: Mode, run_dir: Path) -> list[str]:
    """A tiny ``famlab compare`` of BERT and GPT in two workers: few steps, one seed, small task subsamples."""
    pre, fine = (60, 20) if mode.cuda else (4, 4)
    shape = [] if mode.cuda else ["data.batch_size=8", "data.seq_len=32"]
    return ["compare", "compare.families=[bert,gpt]", "compare.workers=2", "compare.tolerance=0.5", *shape,
            *device_args(mode), f"trainer.max_steps={pre}", f"trainer.val_check_interval={pre}",
            "trainer.limit_val_batches=2", f"finetune.max_steps={fine}", f"finetune.val_every={fine}",
            "compare.task_limit=128", "compare.task_eval_limit=64", "compare.seeds=[0]", "finetune.probe_seeds=[0]",
            "compare.bpb_docs=10", "compare.zero_shot_items=20", "trainer.progress_bar=false", f"run_dir={run_dir}"]


def compare_row(mode: Mode) -> Row:
    """A tiny ``famlab compare`` of two families with ``compare.workers=2``: both workers on the one device."""
    run_dir = mode.workdir / "compare"
    done = famlab(compare_args(mode, run_dir), mode, cap_s=240)
    if not (run_dir / "results.json").is_file():
        raise CheckFailed("famlab compare exited 0 without a results.json")
    both, jobs = overlap_s(run_dir / STATUS_DIR)
    if both <= 0:
        raise CheckFailed(f"no two of the {jobs} jobs ran at the same time (compare.workers=2)")
    where = "one GPU" if mode.cuda else "the CPU"
    return Row("workers.compare", "ok", f"{done.wall_s:.0f} s, {both:.0f} s overlapped",
               f"famlab compare bert,gpt (tiny) with 2 workers on {where}: {jobs} jobs, two at once for {both:.0f} s",
               {"wall_s": done.wall_s, "overlap_s": both, "jobs": float(jobs)})


# --- the table ------------------------------------------------------------------------------------------------------


def device_row(mode: Mode) -> Row:
    """What the checks ran on, and the peak MFU divides by."""
    peak, how = peak_flops(mode.device, size=1024)
    if mode.cuda:
        name = f"{torch.cuda.get_device_name()} x{mode.cuda_count}, CUDA {torch.version.cuda}"
    else:
        name = f"CPU, {os.cpu_count()} cores"
    return Row("device", "ok", f"peak {peak / 1e12:.3g} TFLOP/s", f"{name}, torch {torch.__version__}; peak: {how}",
               {"peak_flops": peak})


def checks(mode: Mode) -> Iterator[tuple[str, Callable[[], Row]]]:
    """(name, check) in the order they run: in-process kernel checks first, then the famlab commands."""
    measured: dict[str, float] = {}  # pretrain tokens/s per family, for the compiled run's speed-up
    yield "device", lambda: device_row(mode)
    yield "attn.flash_causal", lambda: flash_row(mode)
    yield "attn.t5_bias", lambda: biased_row("t5_bias", mode)
    yield "attn.alibi", lambda: biased_row("alibi", mode)
    yield "lm_loss", lambda: lm_loss_row(mode)
    for family in FAMILIES:
        yield f"pretrain.{family}", lambda family=family: pretrain_row(family, mode, measured)  # type: ignore[misc]
    yield "workers.compare", lambda: compare_row(mode)
    yield "compile.gpt", lambda: compile_row(mode, measured)
    yield "ddp.finetune", lambda: ddp_row(mode)


def run_check(name: str, check: Callable[[], Row]) -> Row:
    """The check's row; a failed property, an exception or a skip becomes a row too (with a one-line reason)."""
    try:
        return check()
    except CheckSkipped as e:
        return Row(name, f"skipped: {e}")
    except CheckFailed as e:
        return Row(name, f"FAIL: {e}")
    except Exception as e:  # noqa: BLE001 - a crashing check is a failed row; the next checks still run
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Row(name, f"FAIL: {type(e).__name__}: {first[:200]}")
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def table(rows: list[Row]) -> str:
    """The rows as one aligned text table (check, result, number, meaning)."""
    cells = [("check", "result", "number", "meaning")]
    for r in rows:  # the reason of a FAIL or a skip leads its meaning, so the result column stays narrow
        status, _, reason = r.result.partition(": ")
        cells.append((r.name, status, r.number, "; ".join(x for x in (reason, r.meaning) if x)))
    widths = [max(len(c[i]) for c in cells) for i in range(3)]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(3)) + "  " + c[3] for c in cells]
    return "\n".join([lines[0], "-" * min(len(lines[0]) + 40, 160), *lines[1:]])


def json_row(row: Row) -> dict[str, Any]:
    """A row as JSON: its fields, a value that is not a number (no peak known: MFU NaN) as null."""
    return asdict(row) | {"values": {k: v if math.isfinite(v) else None for k, v in row.values.items()}}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="the same checks at tiny shapes on the CPU")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    parser.add_argument("--only", default="", help="comma-separated check names or prefixes (e.g. attn,lm_loss)")
    parser.add_argument("--workdir", type=Path, help="run directories go here (default: a temporary directory)")
    parser.add_argument("--budget", type=float, default=GPU_BUDGET_S, help="seconds for the whole table on a GPU")
    return parser.parse_args(argv)


@contextmanager
def workdir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="famlab-gpu-check-") as tmp:
        yield Path(tmp)


def main(argv: list[str] | None = None) -> int:
    """Run the checks, print the table (and write the JSON); exit status 1 if a check failed, 2 without CUDA."""
    args = parse(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu_check: error: no CUDA device here; --cpu-smoke runs the same checks at tiny shapes on the CPU",
              file=sys.stderr)
        return 2
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    started = time.monotonic()
    rows: list[Row] = []
    with workdir(args.workdir) as root:
        budget = args.budget if not args.cpu_smoke else 3600.0
        mode = Mode(cuda=not args.cpu_smoke, workdir=root, deadline=started + budget,
                    cuda_count=torch.cuda.device_count() if not args.cpu_smoke else 0)
        for name, check in checks(mode):
            if wanted and not any(name.startswith(w) for w in wanted):
                continue
            rows.append(run_check(name, check))
            print(f"[{time.monotonic() - started:5.0f} s] {name}: {rows[-1].result}", file=sys.stderr, flush=True)
    print(table(rows))
    total = time.monotonic() - started
    print(f"{sum(r.ok for r in rows)}/{len(rows)} ok or skipped, {total:.0f} s")
    if args.json is not None:
        record = {"mode": "cpu-smoke" if args.cpu_smoke else "gpu", "torch": torch.__version__, "seconds": total,
                  "rows": [json_row(r) for r in rows]}
        args.json.write_text(json.dumps(record, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
