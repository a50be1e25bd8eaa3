"""Checks of a composed config against the machine and the filesystem, before any data work.

Input files must exist, the tokenizer must have room for its special tokens, and the model must fit.
Training keeps, per parameter, the fp32 weight, its gradient and AdamW's two moments: 16 bytes (the
ZeRO paper's accounting, Rajbhandari et al. 2020, section 3.1), before any activation. A model whose
parameters alone need more than the machine's memory (the largest GPU's when training on CUDA, else
the RAM) cannot train here, so it is refused with the keys that set its size.
"""

from __future__ import annotations

import os
from pathlib import Path

from famlab.datamodules.bundled import BUNDLED_TASKS
from famlab.datamodules.suite import is_suite
from famlab.experiments.configuration.config import GPU_ACCELERATORS, ConfigInputError, DataConfig
from famlab.families.config import ModelConfig

BYTES_PER_PARAM = 16  # fp32 weight + gradient + AdamW exp_avg + exp_avg_sq


def approx_params(m: ModelConfig, tokenizer_vocab: int) -> int:
    """Parameter count from the model section alone (``tokenizer_vocab``: the vocabulary when ``model.vocab_size`` is
    0, taken from the tokenizer): embeddings plus attention and feed-forward weights per layer.

    An estimate (biases, norms and position tables are left out, so it errs low), good for a fit check only.
    """
    vocab = m.vocab_size or tokenizer_vocab
    head_dim = m.head_dim or m.dim // max(1, m.num_heads)
    kv_heads = m.num_kv_heads or m.num_heads
    attn = m.dim * head_dim * (2 * m.num_heads + 2 * kv_heads)  # q, o and k, v projections
    ffn_dim = m.ffn_dim or 4 * m.dim
    ffn = m.dim * ffn_dim * (3 if m.ffn.gated else 2)  # two up projections when gated (a registered kind says)
    layers = m.num_layers + (m.num_decoder_layers or 0)
    cross = (m.num_decoder_layers or 0) * attn  # T5's decoder cross-attention
    embed = vocab * m.dim * (1 if m.tie_embeddings else 2)
    return embed + layers * (attn + ffn) + cross


def machine_memory(accelerator: str) -> tuple[int, str]:
    """Bytes of memory one training process can use, and what it is (largest CUDA GPU, or physical RAM)."""
    import torch

    if accelerator in GPU_ACCELERATORS and torch.cuda.is_available():
        best = max(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))
        return best, "GPU memory"
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "RAM"
    except (ValueError, OSError, AttributeError):  # not POSIX: no check
        return 1 << 62, "RAM"


def check_fits_memory(m: ModelConfig, tokenizer_vocab: int, accelerator: str) -> None:
    """Refuse a model whose parameters and optimizer state alone exceed the machine's memory (``tokenizer_vocab``:
    ``data.tokenizer.vocab_size``, the vocabulary when ``model.vocab_size`` is 0; ``trainer.accelerator``)."""
    params = approx_params(m, tokenizer_vocab)
    need = params * BYTES_PER_PARAM
    have, what = machine_memory(accelerator)
    if need > have:
        raise ConfigInputError(
            f"model too large for this machine: ~{params / 1e9:.1f}B parameters need "
            f"~{need / 2**30:.0f} GiB to train, this machine has {have / 2**30:.0f} GiB of {what} "
            f"(model.dim={m.dim}, model.num_layers={m.num_layers}, model.ffn_dim={m.ffn_dim}, "
            f"vocabulary {m.vocab_size or tokenizer_vocab})"
        )


def exists(path: str, *, file: bool = False) -> bool:
    """``Path.exists`` / ``is_file`` that answers False for a name the filesystem refuses (too long, NUL)."""
    try:
        p = Path(path).expanduser()
        return p.is_file() if file else p.exists()
    except (OSError, ValueError):  # a name too long for the filesystem, a NUL byte
        return False


def is_suite_file(task: str) -> bool:
    """Whether ``data.task`` names a suite file (which must exist) rather than ``suite`` or a list of tasks."""
    return Path(task).suffix in (".yaml", ".yml")


def check_inputs(d: DataConfig, model_vocab: int) -> None:
    """Files named by the data section exist; the tokenizer's vocabulary (and ``model.vocab_size``, ``model_vocab``,
    when not 0) holds its special tokens and sentinels."""
    from famlab.datamodules.tokenizer import min_vocab_size

    if d.corpus != "wordnet" and not d.corpus.startswith("hf:") and not exists(d.corpus):
        raise ConfigInputError(f"data.corpus={d.corpus}: no such corpus file or directory (or wordnet, hf:<name>)")
    named = d.task in BUNDLED_TASKS or d.task.startswith("hf:") or (is_suite(d.task) and not is_suite_file(d.task))
    if not named and not exists(d.task, file=True):  # a suite's own tasks are checked when it is read
        raise ConfigInputError(f"data.task={d.task}: no such task file (or {', '.join(BUNDLED_TASKS)}, suite, "
                               "hf:<name>)")
    t = d.tokenizer
    if t.path is not None and not exists(t.path, file=True):
        raise ConfigInputError(f"data.tokenizer.path={t.path}: no such file")
    least = min_vocab_size(t.kind.value, t.num_sentinels)
    if t.path is None and t.vocab_size < least:
        raise ConfigInputError(f"data.tokenizer.vocab_size={t.vocab_size} is below {least}, the least a "
                               f"{t.kind.value} tokenizer with data.tokenizer.num_sentinels={t.num_sentinels} needs")
    if 0 < model_vocab < least:
        raise ConfigInputError(f"model.vocab_size={model_vocab} must be 0 (from the tokenizer) or >= {least}")
