"""GPU benchmark at base sizes: famlab vs Hugging Face, bf16-mixed, tokens/s and MFU (well under 5 minutes).

Families and shapes: GPT 124M-class (GPT-2 small: 768 wide, 12 layers, 12 heads, vocab 50304,
seq 512), BERT-base-class (768, 12, 12, vocab 30528, seq 128), T5-base-class (768, 12 + 12 layers, 12 heads,
d_ff 3072, vocab 32128, encoder 512, targets ~114 from span corruption). Each side trains on the same batch
with the same fused AdamW under ``torch.autocast(bfloat16)``; steps alternate famlab / HF as in ``famlab bench``
(see ``experiments/perf/bench.py``, which this script reuses). MFU is model FLOPs
(``famlab.families.flops.train_flops``) per second over the datasheet bf16 peak of the device
(``famlab.experiments.perf.hardware.GPU_PEAKS_BF16``).

    python benchmarks/gpu_bench.py                 # on a GPU
    python benchmarks/gpu_bench.py --tiny          # smoke test on CPU (tiny shapes, fp32, seconds)
    python benchmarks/gpu_bench.py --compile       # famlab side through torch.compile
    python benchmarks/gpu_bench.py --no-hf         # famlab only
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from famlab.experiments.perf.bench import BenchSettings, Side, build_sides, measure, quartiles  # noqa: E402
from famlab.experiments.perf.hardware import peak_flops  # noqa: E402

# family -> (settings overrides, batch size); sizes of the public base models
BASE = {
    "gpt": (dict(dim=768, layers=12, heads=12, ffn=3072, vocab=50304, seq=512), 16),
    "bert": (dict(dim=768, layers=12, heads=12, ffn=3072, vocab=30528, seq=128), 64),
    "t5": (dict(dim=768, layers=12, heads=12, ffn=3072, vocab=32128, seq=512), 16),
}
TINY = dict(dim=64, layers=2, heads=4, ffn=128, vocab=512, seq=32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default="gpt,bert,t5")
    parser.add_argument("--pairs", type=int, default=10, help="alternating famlab/HF timed pairs per family")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on CPU: a smoke test of this script")
    parser.add_argument("--compile", action="store_true", help="torch.compile famlab's network")
    parser.add_argument("--no-hf", action="store_true", help="skip the Hugging Face side")
    args = parser.parse_args(argv)

    device = torch.device("cpu" if args.tiny or not torch.cuda.is_available() else "cuda")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 leftovers outside autocast (optimizer, losses)
        torch.backends.cudnn.allow_tf32 = True
    peak, how = peak_flops(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"gpu_bench: device={name} precision={'bf16-mixed' if device.type == 'cuda' else 'fp32'} "
          f"peak={peak / 1e12:.3g} TFLOP/s ({how}) torch={torch.__version__}")
    started = time.perf_counter()
    for family in [f.strip() for f in args.families.split(",") if f.strip()]:
        shape, batch = BASE[family]
        if args.tiny:
            shape, batch = TINY, 2
        s = BenchSettings(families=family, batch=batch, pairs=args.pairs, warmup=args.warmup, data=False,
                          device=device.type, **shape)  # type: ignore[arg-type]
        ours, theirs, info = build_sides(family, s, device)
        if args.compile:
            from famlab.families.compile import compile_network

            compile_network(info["net"])
        if args.no_hf:
            for _ in range(s.warmup):
                ours.step()
            theirs = Side("hf", theirs.step, [float("nan")] * s.pairs)
            for _ in range(s.pairs):
                t0 = time.perf_counter()
                ours.step()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                ours.times.append(time.perf_counter() - t0)
        else:
            measure(ours, theirs, s, device)
        del info["ref"]
        line = f"{family:4s} [{info['shape']}, {info['params'] / 1e6:.0f}M params]"
        for side in (ours, theirs):
            t = statistics.median(side.times)
            line += f"  {side.name} {info['tokens'] / t:9.0f} tok/s MFU {info['flops'] / t / peak:6.1%}"
        if not args.no_hf:
            q1, ratio, q3 = quartiles([h / f for f, h in zip(ours.times, theirs.times, strict=True)])
            line += f"  ratio {ratio:.3f} [{q1:.3f}, {q3:.3f}]"
        print(line, flush=True)
        del ours, theirs, info
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
