"""A run's data and tokenizer: the corpus prepared once and the tokenizer trained once, both cached under
:func:`cache_dir` (rank 0 makes them under DDP, the other ranks wait); what a run takes from the tokenizer (token ids,
``model.vocab_size``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeVar

from famlab.experiments.configuration.config import ConfigInputError, with_values
from famlab.experiments.configuration.plans import Cached, CorpusData, ModelPlan, TokenizerData
from famlab.experiments.configuration.run_files import RunFiles
from famlab.experiments.plumbing.console import heartbeat_seconds
from famlab.experiments.plumbing.launch_env import env_vars
from famlab.experiments.plumbing.prepare_once import env_rank, wait_for_rank_zero

if TYPE_CHECKING:
    from famlab.datamodules.prepare import PreparedDataset, PrepareSettings, Progress
    from famlab.datamodules.tokenizer import TokenizerBundle, TrainingDocuments
    from famlab.objectives import TokenIds

Planned = TypeVar("Planned", bound=ModelPlan)


def cache_dir(data: Cached) -> Path:
    """``data.cache_dir``, else ``$FAMLAB_CACHE``, else ``~/.cache/famlab``."""
    path = data.cache_dir or os.environ.get("FAMLAB_CACHE") or "~/.cache/famlab"
    return Path(path).expanduser()


class ProgressLine:
    """``prepare: encode 812 / 3,000 MB (27 %), 31.2 MB/s`` on stderr at most every ``every_s`` seconds, the first
    after ``every_s`` (a small corpus prints nothing); rewritten in place on a terminal, plain lines otherwise, at
    most one a minute (``FAMLAB_HEARTBEAT_S``) so a log file holds no more than a heartbeat's worth."""

    def __init__(self, every_s: float = 2.0, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.every_s = every_s if tty else max(every_s, heartbeat_seconds())
        self.started = self.last = time.monotonic()
        self.phase, self.phase_started, self.printed = "", self.started, False

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = time.monotonic()
        if phase != self.phase:
            self.phase, self.phase_started = phase, now
        if now - self.last < self.every_s or now - self.phase_started < 0.5:
            return
        self.last = now
        rate = done / 1e6 / max(now - self.phase_started, 1e-9)
        of = f" / {total / 1e6:,.0f} MB ({100 * done / total:.0f} %)" if total else " MB"
        line = f"prepare: {phase} {done / 1e6:,.0f}{of}, {rate:.1f} MB/s"
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.stream.write(f"\r{line}\033[K" if tty else line + "\n")
        self.stream.flush()
        self.printed = True

    def close(self) -> None:
        """End a line rewritten in place."""
        if self.printed and getattr(self.stream, "isatty", lambda: False)():
            self.stream.write("\n")


def prepare_settings(data: CorpusData) -> PrepareSettings:
    """``datamodules.PrepareSettings`` from ``data.*`` (``data.val_fraction`` None: 0.05)."""
    from famlab.datamodules.prepare import PrepareSettings

    t = data.tokenizer
    return PrepareSettings(
        kind=t.kind.value, vocab_size=t.vocab_size, num_sentinels=t.num_sentinels, tokenizer_path=t.path,
        sample_bytes=t.sample_bytes, seed=data.seed,
        val_fraction=data.val_fraction if data.val_fraction is not None else 0.05,
    )


@contextlib.contextmanager
def parallel_tokenizers() -> Iterator[None]:
    """Let the Rust tokenizer use every core while preparing data, then restore ``TOKENIZERS_PARALLELISM``.

    ``tokenizers`` reads the variable at each batch call; ``false`` (set by the tests, and for sweep workers)
    would encode on one core. Preparing forks nothing, and tokenizers itself turns its pool off in a process
    forked after using it (a DataLoader worker), so turning it on here is safe.
    """
    with env_vars({"TOKENIZERS_PARALLELISM": "true"}):
        yield


def prepared_corpus(data: CorpusData, out: Path | None = None, progress: Progress | None = None) -> PreparedDataset:
    """``data.corpus`` as a ``datamodules.PreparedDataset``: a prepared directory opened as it is, a raw spec
    prepared once into the cache (``cache_dir/prepared/``, keyed by its files' identity and ``data.*``) or ``out``.

    Under DDP rank 0 prepares; the other ranks wait for its manifest and open the same directory, reading no raw
    text (they only ``stat`` the source files to find the directory).
    """
    from famlab.datamodules.prepare import MANIFEST, is_prepared_dir, open_prepared, prepare_corpus, prepared_location

    spec, cache = data.corpus, cache_dir(data)
    if is_prepared_dir(spec):
        return open_prepared(spec)
    settings = prepare_settings(data)
    target = out or prepared_location(spec, settings, cache)
    wait_for_rank_zero(target / MANIFEST, "the prepared corpus", rank=env_rank())
    if env_rank() != 0:
        return open_prepared(target)
    line = progress or ProgressLine()
    try:
        with parallel_tokenizers():
            return prepare_corpus(spec, settings, cache_dir=cache, out=out, progress=line)
    finally:
        if isinstance(line, ProgressLine):
            line.close()


def get_bundle(data: TokenizerData, corpus: TrainingDocuments | None, run_dir: Path | None = None) -> TokenizerBundle:
    """The run's tokenizer: a prepared dataset's own (``corpus`` from :func:`prepared_corpus`), else trained once per
    corpus + settings and cached, or ``data.tokenizer.path``.

    Under DDP rank 0 trains it; the other ranks wait for its cached file (``experiments.prepare_once``).

    Copies ``tokenizer.json`` into ``run_dir`` so a later fine-tune or comparison can reuse it.
    """
    from famlab.datamodules import get_tokenizer
    from famlab.datamodules.prepare import PreparedDataset
    from famlab.datamodules.tokenizer import cache_file

    t, cache = data.tokenizer, cache_dir(data)
    if isinstance(corpus, PreparedDataset) and t.path is None:
        bundle = corpus.bundle(t.num_sentinels)
    else:
        if t.path is None and corpus is not None:  # the other DDP ranks load the tokenizer rank 0 trained
            file = cache_file(corpus, kind=t.kind.value, vocab_size=t.vocab_size, num_sentinels=t.num_sentinels,
                              cache_dir=cache, sample_bytes=t.sample_bytes, seed=data.seed)
            wait_for_rank_zero(file, "the tokenizer", rank=env_rank())
        bundle = get_tokenizer(
            corpus,
            kind=t.kind.value,
            vocab_size=t.vocab_size,
            num_sentinels=t.num_sentinels,
            path=t.path,
            cache_dir=cache,
            **({} if t.path else {"sample_bytes": t.sample_bytes, "seed": data.seed}),  # training settings only
        )
    if run_dir is not None and env_rank() == 0:
        shutil.copyfile(bundle.path, RunFiles(run_dir).tokenizer_file)
    return bundle


def token_ids(bundle: TokenizerBundle) -> TokenIds:
    """``objectives.TokenIds`` from a ``datamodules.TokenizerBundle`` (docs/interfaces.md)."""
    from famlab.objectives import TokenIds

    return TokenIds(vocab_size=bundle.vocab_size, sentinel_ids=bundle.sentinel_ids, **bundle.special_ids)


def with_vocab(cfg: Planned, vocab_size: int) -> Planned:
    """``cfg`` with ``model.vocab_size`` from the tokenizer (0 = unset); a different explicit value is an error."""
    if cfg.model.vocab_size not in (0, vocab_size):
        raise ConfigInputError(
            f"model.vocab_size={cfg.model.vocab_size} does not match the tokenizer's {vocab_size} tokens "
            "(data.tokenizer); set model.vocab_size=0 to take it from the tokenizer"
        )
    return with_values(cfg, {"model.vocab_size": vocab_size})  # reruns ModelConfig's checks

