"""``famlab prepare``: stream ``data.corpus`` once into a prepared dataset (token shards, tokenizer, split, manifest).

``famlab prepare [presets...] data.corpus=<spec> [data.tokenizer.*=...] [data.val_fraction=...] [data.seed=...]
[run_dir=<dir>]`` writes the prepared directory to ``run_dir`` when given, else into the cache
(``<cache>/prepared/``), where ``pretrain`` / ``compare`` / ``sweep`` with the same ``data.corpus`` and settings find
it; either directory can be passed as ``data.corpus=<dir>``. Progress (MB read, MB/s) goes to stderr every 2 s. See
``docs/data.md``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from famlab.experiments.configuration.compose import compose
from famlab.experiments.configuration.plans import PreparePlan
from famlab.experiments.plumbing.data_cache import ProgressLine, prepared_corpus


def main(presets: list[str], overrides: list[str], flags: list[str]) -> int:
    """CLI entry: ``famlab prepare [presets...] [key=value...]``; prints the prepared directory."""
    cfg: PreparePlan = compose(presets, overrides).cfg
    started = time.monotonic()
    progress = ProgressLine(stream=sys.stderr)
    out = Path(cfg.run_dir).expanduser() if cfg.run_dir else None
    try:
        prepared = prepared_corpus(cfg.data, out=out, progress=progress)
    finally:
        progress.close()
    m = prepared.manifest
    took = time.monotonic() - started
    split, tokens = m["split"], m["tokens"]
    print(f"prepared: {prepared.path}  {split['documents']:,} documents ({split['val_documents']:,} validation), "
          f"{tokens['total']:,} tokens ({tokens['dtype']}), {m['source_bytes'] / 1e6:,.1f} MB in {took:.1f} s "
          f"(prepared in {m.get('prepare_seconds', 0.0)} s)")
    print(f"use it: data.corpus={prepared.path}")
    return 0
