"""famlab's streaming prepare against a plain ``tokenizers`` script, side by side, as whole subprocesses.

::

    python benchmarks/prepare_bench.py --mb 300                    # generate 300 MB of text, run both, report
    python benchmarks/prepare_bench.py --corpus my.txt --sample-mb 100
    python benchmarks/prepare_bench.py --mb 3000 --skip-plain      # famlab alone (+ its cached rerun)

Both sides train the same tokenizer kind (byte-level BPE by default, the same vocabulary size, famlab's special
tokens and sentinels) on a sample of the same size (famlab: its seeded sample of documents,
``data.tokenizer.sample_bytes``; the plain script: the first that many bytes of the file) and encode the whole file
into a uint16 token file with ``encode_batch`` on every core. famlab also holds out validation documents, writes
document offsets, the permuted train / validation streams and the manifest; the plain script writes one token file.

Each side runs as its own process; its wall time and peak RSS (``ru_maxrss`` of that child, from ``os.wait4``) are
measured from outside. Then famlab runs again on the same corpus (cached: no read, no hash) and the setup time of
that second run is reported. The machine's load average is printed with the results: on a shared machine the
throughputs move with it, the ratio less. Results go to stdout and ``--out``/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PLAIN = r'''
import sys, numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
path, out = sys.argv[1], sys.argv[2]
sample_bytes, vocab, sentinels = (int(a) for a in sys.argv[3:6])
specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[BOS]", "[EOS]", "[R]", "[X]", "[S]"]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=vocab - sentinels, special_tokens=specials,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
with open(path, encoding="utf-8") as f:
    sample = [d.strip() for d in f.read(sample_bytes).split("\n\n") if d.strip()]
tok.train_from_iterator(sample, trainer=trainer, length=len(sample))
del sample
tok.add_special_tokens([f"<extra_id_{i}>" for i in reversed(range(sentinels))])
with open(path, encoding="utf-8") as f, open(out, "wb") as o:
    while True:
        chunk = f.read(8 << 20) + f.readline()
        if not chunk:
            break
        docs = [d.strip() for d in chunk.split("\n\n") if d.strip()]
        for enc in tok.encode_batch(docs, add_special_tokens=False):
            np.array(enc.ids, dtype=np.uint16).tofile(o)
'''

FAMLAB = r'''
import sys
from famlab.experiments.commands.prepare import main
sys.exit(main([], sys.argv[1:], []))
'''


def generate(path: Path, mb: float, seed: int = 0) -> None:
    """Zipf-distributed pseudo-words (a 50k vocabulary), lines of ~12 words, documents of ~5 lines separated by
    blank lines; written in 8 MB blocks with numpy (no Python loop per word)."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", dtype=np.uint8)
    words = []
    for _ in range(50_000):
        n = 2 + int(rng.integers(0, 8))
        words.append(bytes(letters[np.minimum(rng.zipf(1.6, n) - 1, 25)]) + b" ")
    words += [b"\n ", b"\n\n "]  # line and document breaks, as "words"
    p = 1.0 / np.arange(1, 50_001) ** 1.05
    p = np.concatenate([p / p.sum() * (1 - 1 / 12 - 1 / 60), [1 / 12, 1 / 60]])
    buf = np.frombuffer(b"".join(words), dtype=np.uint8)
    lengths = np.array([len(w) for w in words])
    starts = np.cumsum(lengths) - lengths
    target = int(mb * 1e6)
    with open(path, "wb") as f:
        written = 0
        while written < target:
            idx = rng.choice(len(words), size=1_500_000, p=p)
            lens = lengths[idx]
            pos = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens) + np.repeat(starts[idx], lens)
            block = buf[pos].tobytes()[: target - written]
            f.write(block)
            written += len(block)
        f.write(b"\n")


def run(cmd: list[str], env: dict[str, str], size_mb: float) -> tuple[dict[str, float], str]:
    """Wall seconds, CPU seconds (user + system), throughputs and peak RSS in MB of the child; its stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read() if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"s": round(wall, 2), "mb_per_s": round(size_mb / wall, 2), "cpu_s": round(cpu, 1),
            "mb_per_cpu_s": round(size_mb / cpu, 3), "peak_rss_mb": round(usage.ru_maxrss / 1024),
            "load_1min": round(os.getloadavg()[0], 1)}, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, help="a text file (blank-line separated documents); default: generate")
    ap.add_argument("--mb", type=float, default=300.0, help="MB of text to generate")
    ap.add_argument("--sample-mb", type=float, default=20.0, help="tokenizer sample, MB (both sides)")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--sentinels", type=int, default=100)
    ap.add_argument("--out", type=Path, help="work directory (default: a temporary one)")
    ap.add_argument("--skip-plain", action="store_true", help="famlab only")
    args = ap.parse_args()
    work = args.out or Path(tempfile.mkdtemp(prefix="prepare-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = args.corpus
    if corpus is None:
        corpus = work / f"generated-{args.mb:g}MB.txt"
        if not corpus.exists():
            started = time.perf_counter()
            generate(corpus, args.mb)
            print(f"generated {corpus} in {time.perf_counter() - started:.1f} s")
    size_mb = corpus.stat().st_size / 1e6
    env = {**os.environ, "FAMLAB_CACHE": str(work / "cache"), "TOKENIZERS_PARALLELISM": "true"}
    sample = int(args.sample_mb * 1e6)
    results: dict[str, object] = {"corpus": str(corpus), "mb": round(size_mb, 1), "sample_mb": args.sample_mb,
                                  "cpus": os.cpu_count(), "load_before": os.getloadavg()}
    famlab_args = [f"data.corpus={corpus}", f"data.tokenizer.vocab_size={args.vocab}",
                   f"data.tokenizer.num_sentinels={args.sentinels}", f"data.tokenizer.sample_bytes={sample}"]
    if not args.skip_plain:  # first, so a machine getting busier does not favour it
        results["plain"], _ = run([sys.executable, "-c", PLAIN, str(corpus), str(work / "plain.bin"), str(sample),
                                   str(args.vocab), str(args.sentinels)], env, size_mb)
    results["famlab"], out = run([sys.executable, "-c", FAMLAB, *famlab_args], env, size_mb)
    prepared = Path(out.split("prepared: ")[1].split()[0])
    results["famlab"]["phases_s"] = json.loads((prepared / "manifest.json").read_text())["seconds"]  # type: ignore[index]
    results["famlab_cached"], _ = run([sys.executable, "-c", FAMLAB, *famlab_args], env, size_mb)
    if not args.skip_plain:
        f, p = results["famlab"], results["plain"]
        # wall time moves with the machine's load; CPU time (all cores) much less: both ratios are printed
        results["ratio_famlab_over_plain"] = round(f["mb_per_s"] / p["mb_per_s"], 2)  # type: ignore[index]
        results["cpu_ratio_famlab_over_plain"] = round(f["mb_per_cpu_s"] / p["mb_per_cpu_s"], 2)  # type: ignore[index]
    results["load_after"] = os.getloadavg()
    print(json.dumps(results, indent=1))
    (work / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
