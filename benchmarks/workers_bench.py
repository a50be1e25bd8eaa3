"""What ``compare.workers`` buys on this machine: two tiny pretraining runs side by side against one after the other.

A comparison's jobs are independent runs of small models, which use a CPU's cores poorly. This script times the
same pair of ``famlab pretrain <family> tiny`` runs two ways, alternately ``--pairs`` times:

- one after the other, each with every core (what ``compare.workers=1`` does);
- side by side, each in its own process with ``cores // 2`` torch threads (``compare.workers=2``);

and prints the median wall seconds of each and their ratio (above 1: side by side is faster). The runs write into a
temporary directory; W&B is off.

    python benchmarks/workers_bench.py [--family t5] [--steps 300] [--pairs 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from famlab.experiments.plumbing.workers import cores, threads_per_worker  # noqa: E402


def run_pair(family: str, steps: int, root: Path, tag: str, threads: int | None) -> float:
    """Wall seconds for two pretraining runs: side by side with ``threads`` each, or (None) one after the other."""
    env = {**os.environ, "WANDB_MODE": "disabled", "FAMLAB_CACHE": str(root / "cache")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)

    def start(i: int) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "famlab", "pretrain", family, "tiny", f"trainer.max_steps={steps}",
               f"trainer.val_check_interval={steps}", "trainer.progress_bar=false", f"run_dir={root / f'{tag}{i}'}"]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    t0 = time.perf_counter()
    if threads is None:
        procs = []
        for i in range(2):
            procs.append(start(i))
            procs[-1].wait()
    else:
        procs = [start(0), start(1)]
        for p in procs:
            p.wait()
    wall = time.perf_counter() - t0
    for p in procs:
        if p.returncode != 0:
            raise SystemExit(f"famlab pretrain failed ({p.returncode}): {p.stderr.read()[-2000:]}")
    return wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="t5", choices=("bert", "gpt", "t5"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--pairs", type=int, default=2, help="measurements of each way, alternating")
    args = ap.parse_args()
    threads = threads_per_worker(2)  # what compare.workers=2 gives each worker
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # the first run trains the cached tokenizer; it is not timed
        run_pair(args.family, 2, root, "warm", threads)
        seq, par = [], []
        for i in range(args.pairs):
            seq.append(run_pair(args.family, args.steps, root, f"seq{i}-", None))
            par.append(run_pair(args.family, args.steps, root, f"par{i}-", threads))
    s, p = statistics.median(seq), statistics.median(par)
    print(f"{cores()} cores, 2 x famlab pretrain {args.family} tiny trainer.max_steps={args.steps}, {args.pairs} pairs")
    print(f"one after the other, all cores each:      {s:.1f} s  ({', '.join(f'{x:.1f}' for x in seq)})")
    print(f"side by side, {threads} thread(s) each:          {p:.1f} s  ({', '.join(f'{x:.1f}' for x in par)})")
    print(f"ratio (one after the other / side by side): {s / p:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
