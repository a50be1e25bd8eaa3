"""``famlab bench``: train-step throughput and MFU of famlab's families against Hugging Face, side by side.

For each family, famlab's network with its objective's loss and the equivalent Hugging Face model
(``BertForMaskedLM`` / ``GPT2LMHeadModel`` / ``T5ForConditionalGeneration``, built by ``famlab.families.to_hf`` with
the same random weights, SDPA attention, labels passed to the model so HF computes its own loss) train on
the same batch: forward + backward + the same torch AdamW step, dropout 0, fp32 on CPU and ``bf16-mixed`` on
GPU. Steps are timed alternately in one process (pair i runs famlab first when i is even, HF first when odd,
so a drift in machine load hits both sides) after warm-up. Printed per family: median tokens/s per side, the
median of the per-pair ratios famlab / HF with its interquartile range, MFU of both sides and a verdict
against the targets in docs/scale.md. Also measured: a peak fp32 matmul rate (CPU, the MFU denominator,
``experiments/perf/hardware.py``), the bundled
corpus's tokenization time and the share of step time the real data loader + collator would take.

Usage: ``famlab bench [--families=bert,gpt,t5] [--pairs=20] [--dim=256] [--layers=4] [--heads=4] [--ffn=1024]
[--vocab=8192] [--batch=16] [--seq=128] [--threads=N] [--no-data] [--profile]``; ``key=value`` works too.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypedDict

import torch
from famlab.experiments.libraries.internals import hf_attention_implementation
from famlab.experiments.perf.breakdown import ROUNDS, TrainStep, breakdown, format_breakdown
from famlab.experiments.perf.hardware import peak_flops
from famlab.families import ModelConfig, Network, build_network, family_model_settings, registry, to_hf
from famlab.families.flops import batch_shape, train_flops
from famlab.families.formats import Arch
from famlab.objectives import Objective, TokenIds, make_objective
from famlab.objectives.optim import decay_groups
from famlab.objectives.registry import default_objective
from torch import nn

if TYPE_CHECKING:
    from transformers import PreTrainedModel

TARGETS = {"bert": 1.4, "gpt": 1.05, "t5": 1.10}  # minimum median ratio famlab / HF (docs/scale.md)


def benchable() -> list[str]:
    """The registered families with a Hugging Face equivalent (``FamilySpec.hf``): the ones the bench compares."""
    return [name for name in registry.family_names() if registry.family(name).hf is not None]


def target(family: str) -> float:
    """The minimum median ratio famlab / HF for ``family``: :data:`TARGETS`, parity for a family without one."""
    return TARGETS.get(family, 1.0)

class BenchError(ValueError):
    """Bad bench option (names the flag)."""


@dataclass
class BenchSettings:
    """Shapes and measurement settings; every field is a ``--name=value`` flag."""

    families: str = field(default_factory=lambda: ",".join(benchable()))  # default: each with an HF equivalent
    dim: int = 256
    layers: int = 4  # T5: this many encoder and decoder layers each
    heads: int = 4
    ffn: int = 1024
    vocab: int = 8192
    batch: int = 16
    seq: int = 128  # tokens per sequence (T5: encoder inputs; targets ~ 1/4 of that, from span corruption)
    pairs: int = 20
    warmup: int = 3  # untimed steps per side before the pairs
    steps: int = 1  # optimiser steps per timed sample
    threads: int = 0  # torch threads; 0 = leave torch's default
    data: bool = True  # measure the real loader's share of step time and the corpus tokenization time
    profile: bool = False  # where each side's step time goes (CPU: experiments/perf/breakdown.py; CUDA: torch.profiler)
    device: str = "auto"  # auto | cpu | cuda
    peak_size: int = 2048  # n of the n x n x n fp32 matmul whose rate is the CPU peak
    seed: int = 0

    def family_list(self) -> list[str]:
        names = [f.strip() for f in self.families.split(",") if f.strip()]
        bad = [f for f in names if f not in benchable()]
        if bad or not names:
            raise BenchError(f"--families={self.families}: each must be one of {', '.join(benchable())}")
        return names


@dataclass
class Side:
    """One side of the comparison: its train step and its timings (seconds per step)."""

    name: str
    step: TrainStep
    times: list[float] = field(default_factory=list)


def parse_flags(presets: list[str], overrides: list[str], flags: list[str]) -> BenchSettings:
    """``BenchSettings`` from ``--key=value`` / ``key=value`` tokens and bare ``--flag`` / ``--no-flag``."""
    known = {f.name: f for f in fields(BenchSettings)}
    values: dict[str, Any] = {}
    for given in [*overrides, *flags, *presets]:
        token = given.removeprefix("--")
        key, eq, raw = token.partition("=")
        key = key.replace("-", "_")
        if not eq:
            key, raw = (key[3:], "false") if key.startswith("no_") else (key, "true")
        if key not in known:
            raise BenchError(f"unknown bench option {given}; options: {', '.join(known)}")
        kind = type(getattr(BenchSettings(), key))
        try:
            values[key] = raw.lower() in ("1", "true", "yes") if kind is bool else kind(raw)
        except ValueError:
            raise BenchError(f"--{key}={raw} is not a valid {kind.__name__}") from None
    settings = BenchSettings(**values)
    for key in ("dim", "layers", "heads", "ffn", "batch", "pairs", "steps"):
        if getattr(settings, key) < 1:
            raise BenchError(f"--{key}={getattr(settings, key)} must be >= 1")
    if settings.seq < 8 or settings.vocab < 256:
        raise BenchError(f"--seq={settings.seq} must be >= 8 and --vocab={settings.vocab} >= 256")
    settings.family_list()
    return settings


def token_ids(vocab_size: int, num_sentinels: int = 100) -> TokenIds:
    """famlab's fixed special-id layout (docs/interfaces.md) with sentinels at the top of the vocabulary."""
    names = ("pad", "unk", "cls", "sep", "mask", "bos", "eos", "r", "x", "s")
    sentinels = [vocab_size - 1 - i for i in range(num_sentinels)]
    return TokenIds(vocab_size=vocab_size, sentinel_ids=sentinels, **{n: i for i, n in enumerate(names)})


def model_config(family: str, s: BenchSettings) -> ModelConfig:
    """famlab ``ModelConfig`` of ``family`` at the bench shapes (faithful family settings, dropout 0)."""
    return ModelConfig(**{
        **family_model_settings(family), "vocab_size": s.vocab, "dim": s.dim,
        "num_layers": s.layers, "num_heads": s.heads, "ffn_dim": s.ffn, "max_seq_len": max(512, s.seq + 1),
        "dropout": 0.0,  # a deterministic comparison
    })


def hf_batch(family: str, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same batch in Hugging Face's form: labels passed to the model, which computes its own loss.

    A causal LM (GPT-2) shifts inside its loss, so it gets the CLM inputs as its labels (famlab's collator already
    shifted); T5 derives ``decoder_input_ids`` from the labels (shift right behind the start id 0), as famlab's
    collator.
    """
    if registry.family(family).arch is Arch.DECODER:
        return {"input_ids": batch["input_ids"], "labels": batch["input_ids"]}
    return {"input_ids": batch["input_ids"], "labels": batch["labels"]}


def make_batch(objective: Objective, s: BenchSettings, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """A batch from the objective's own collator on random raw blocks of non-special tokens."""
    raw = torch.randint(10, s.vocab - 100, (s.batch, objective.raw_block_len), generator=generator)
    return objective.collate(list(raw))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_step(
    model: nn.Module | Network, loss_fn: Callable[[], torch.Tensor], device: torch.device, lr: float = 1e-4
) -> TrainStep:
    """A train step (forward + loss, backward, AdamW with famlab's weight-decay groups) that returns the loss."""
    # fused AdamW on both sides (torch has a fused CPU kernel too): the same, fastest implementation for both
    opt = torch.optim.AdamW(decay_groups(model, 0.01), lr=lr, fused=True)
    return TrainStep(loss_fn, opt, device)


class SideInfo(TypedDict):
    """What the report needs of a family's two sides (:func:`build_sides`), and what keeps them alive."""

    tokens: int  # tokens per step (the objective's count)
    flops: int  # training matmul FLOPs per step
    shape: str
    hf_attn: str | None  # the attention implementation HF runs
    params: int
    net: Network
    ref: PreTrainedModel
    objective: Objective
    batch: dict[str, torch.Tensor]
    ref_batch: dict[str, torch.Tensor]


def build_sides(family: str, s: BenchSettings, device: torch.device) -> tuple[Side, Side, SideInfo]:
    """famlab and HF train steps for ``family`` on one shared batch, plus what the report needs."""
    torch.manual_seed(s.seed)
    cfg = model_config(family, s)
    net = build_network(cfg).to(device).train()
    ref = to_hf(net)  # same weights
    try:
        ref.set_attn_implementation("sdpa")
    except (ValueError, AttributeError):
        pass  # the report prints what HF runs
    ref = ref.to(device).train()  # type: ignore[arg-type]  # transformers' @wraps(nn.Module.to) hides the bound self
    objective = make_objective(default_objective(family), token_ids(s.vocab), seq_len=s.seq, family=family,
                               generator=torch.Generator().manual_seed(s.seed))
    batch = {k: v.to(device) for k, v in make_batch(objective, s, torch.Generator().manual_seed(s.seed)).items()}
    ref_batch = hf_batch(family, batch)
    ours = Side("famlab", make_step(net, lambda: objective.loss(net, batch).loss, device))
    theirs = Side("hf", make_step(ref, lambda: ref(**ref_batch).loss, device))
    _, dec_len, labels = batch_shape(cfg, batch)
    info: SideInfo = {
        "tokens": objective.tokens_in(batch),
        "flops": train_flops(cfg, batch_size=s.batch, seq_len=batch["input_ids"].shape[1], dec_len=dec_len,
                             num_label_tokens=labels),
        "shape": f"B={s.batch} S={batch['input_ids'].shape[1]}" + (f" T={dec_len}" if dec_len else ""),
        "hf_attn": hf_attention_implementation(ref.config),
        "params": sum(p.numel() for p in net.parameters()),
        "net": net, "ref": ref, "objective": objective, "batch": batch, "ref_batch": ref_batch,
    }
    return ours, theirs, info


def _timed(side: Side, steps: int, device: torch.device) -> None:
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        side.step()
    _sync(device)
    side.times.append((time.perf_counter() - t0) / steps)


def measure(ours: Side, theirs: Side, s: BenchSettings, device: torch.device) -> list[float]:
    """Warm up both sides, then time ``s.pairs`` alternating pairs; returns the per-pair ratios HF time / ours."""
    for _ in range(s.warmup):
        ours.step()
        theirs.step()
    for i in range(s.pairs):
        for side in (ours, theirs) if i % 2 == 0 else (theirs, ours):
            _timed(side, s.steps, device)
    return [h / f for f, h in zip(ours.times, theirs.times, strict=True)]  # famlab tokens/s over HF tokens/s


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(25th percentile, median, 75th percentile); inclusive method, so two values already work."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def loader_share(family: str, s: BenchSettings, step_s: float, workdir: str) -> tuple[float, float, float]:
    """(corpus tokenization s, loader s/batch, loader share of step time) on the bundled corpus.

    The real ``PretrainDataModule`` with the objective's real collator. The tokenizer is trained once under
    ``workdir``; each family tokenizes into a fresh directory of its own, so the tokenization is timed.
    """
    from pathlib import Path

    from famlab.datamodules import PretrainDataModule, get_tokenizer, load_corpus  # imports Lightning

    corpus = load_corpus("wordnet")
    bundle = get_tokenizer(corpus, vocab_size=s.vocab, cache_dir=workdir)
    ids = TokenIds(vocab_size=bundle.vocab_size, sentinel_ids=bundle.sentinel_ids, **bundle.special_ids)
    objective = make_objective(default_objective(family), ids, seq_len=s.seq, family=family)
    dm = PretrainDataModule(corpus, bundle, block_len=objective.raw_block_len, batch_size=s.batch,
                            collate_fn=objective.collate, separator_id=objective.separator_id,
                            cache_dir=Path(workdir) / family)
    t0 = time.perf_counter()
    dm.prepare_data()
    tokenize_s = time.perf_counter() - t0
    dm.setup("fit")
    n, t0 = 0, time.perf_counter()
    for _ in dm.train_dataloader():
        n += 1
        if n >= 50:
            break
    per_batch = (time.perf_counter() - t0) / max(n, 1)
    return tokenize_s, per_batch, per_batch / (per_batch + step_s)


def profile_step(side: Side, label: str, out: Callable[[str], None], rows: int = 12) -> None:
    """Print the ops taking the most self device time over three steps of ``side`` (CUDA; see ``--profile``)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            side.step()
        torch.cuda.synchronize()
    out(f"--- profile: {label} (3 steps, self device time) ---")
    out(prof.key_averages().table(sort_by="self_device_time_total", row_limit=rows))


def run_bench(s: BenchSettings, out: Callable[[str], None] = print) -> dict[str, dict[str, float]]:
    """Run the whole benchmark, printing the report line by line; returns the numbers per family."""
    import os

    from famlab.experiments.perf.allocator import keep_freed_memory

    allocator = keep_freed_memory() or "default"  # both sides share it: one process
    if s.threads:
        torch.set_num_threads(s.threads)
    use_cuda = s.device == "cuda" or (s.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if use_cuda else "cpu")
    precision = "bf16-mixed" if use_cuda else "fp32"
    peak, how = peak_flops(device, size=s.peak_size)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    out(f"famlab bench: device={device.type} precision={precision} threads={torch.get_num_threads()} "
        f"load1={load:.2f} torch={torch.__version__}")
    out(f"allocator: {allocator} (both sides)")
    out(f"shapes: dim={s.dim} layers={s.layers} heads={s.heads} ffn={s.ffn} vocab={s.vocab} batch={s.batch} "
        f"seq={s.seq}; pairs={s.pairs} warmup={s.warmup} steps/sample={s.steps}")
    out(f"peak: {peak / 1e9:.1f} GFLOP/s ({how}; measured again after each family, the highest is used)")
    results: dict[str, dict[str, float]] = {}
    workdir = tempfile.TemporaryDirectory(prefix="famlab-bench-")  # tokenizer + token files of --data
    for family in s.family_list():
        ours, theirs, info = build_sides(family, s, device)
        ratios = measure(ours, theirs, s, device)
        if device.type == "cpu":  # a busy neighbour during the first measurement would inflate every MFU
            peak = max(peak, peak_flops(device, size=s.peak_size)[0])
        q1, ratio, q3 = quartiles(ratios)
        t_ours, t_hf = statistics.median(ours.times), statistics.median(theirs.times)
        r = {"famlab_tok_s": info["tokens"] / t_ours, "hf_tok_s": info["tokens"] / t_hf, "ratio": ratio,
             "ratio_q1": q1, "ratio_q3": q3, "famlab_mfu": info["flops"] / t_ours / peak,
             "hf_mfu": info["flops"] / t_hf / peak, "famlab_step_s": t_ours, "hf_step_s": t_hf}
        results[family] = r
        out(f"{family} [{info['shape']}, {info['params'] / 1e6:.2f}M params, HF attn={info['hf_attn']}, "
            f"{info['flops'] / 1e9:.2f} GFLOP/step]")
        out(f"  peak {peak / 1e9:.1f} GFLOP/s")
        out(f"  famlab {r['famlab_tok_s']:10.0f} tok/s  step {t_ours * 1e3:7.1f} ms  MFU {r['famlab_mfu']:.1%}")
        out(f"  hf     {r['hf_tok_s']:10.0f} tok/s  step {t_hf * 1e3:7.1f} ms  MFU {r['hf_mfu']:.1%}")
        verdict = "PASS" if ratio >= target(family) else "FAIL"
        out(f"  ratio famlab/hf median {ratio:.3f}  IQR [{q1:.3f}, {q3:.3f}]  target >= {target(family):.2f}  "
            f"{verdict}")
        if s.profile and device.type == "cpu":
            out(f"  profile (ms per step, medians of {ROUNDS} steps per side; see experiments/perf/breakdown.py):")
            for line in format_breakdown(breakdown({"famlab": ours.step, "hf": theirs.step})):
                out(line)
        elif s.profile:
            profile_step(ours, f"{family} famlab", out)
            profile_step(theirs, f"{family} hf", out)
        if s.data:
            tok_s, per_batch, share = loader_share(family, s, t_ours, workdir.name)
            r.update(tokenize_s=tok_s, loader_s=per_batch, loader_share=share)
            out(f"  data: bundled corpus tokenized in {tok_s:.2f} s (target < 10 s); loader + collator "
                f"{per_batch * 1e3:.2f} ms/batch = {share:.2%} of step time")
        del ours, theirs, info
    workdir.cleanup()
    verdicts = [f"{f} {r['ratio']:.2f} {'>=' if r['ratio'] >= target(f) else '<'} {target(f):.2f}"
                for f, r in results.items()]
    ok = all(r["ratio"] >= target(f) for f, r in results.items())
    out(f"verdict: {'PASS' if ok else 'FAIL'} ({'; '.join(verdicts)})")
    return results


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab bench [--key=value...]``; exit status 0 (the verdict is printed, not enforced)."""
    run_bench(parse_flags(presets, overrides, flags))
    return 0


if __name__ == "__main__":
    import sys

    from famlab.experiments.configuration.compose import split_args

    sys.exit(main(*split_args(sys.argv[1:])))
