"""Data preparation once per job under DDP: rank 0 prepares, the other ranks wait for its files, then load.

Tokenizer training is not bit-reproducible (tokenizers #1794), so ranks that each trained their own would
train on different token ids. Under torchrun and SLURM every rank starts the whole command at once, before
any process group exists, so the order is kept through the files themselves: rank 0 trains the tokenizer
and writes the token files (each written to a temporary name and renamed, so a file that exists is
complete); every other rank waits for those files and loads them. Lightning's own launcher
(``trainer.strategy=ddp`` on one machine) starts the other ranks only after rank 0 prepared, so they find
the files at once. Across nodes ``data.cache_dir`` must be on a filesystem every node shares.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

TIMEOUT_ENV = "FAMLAB_PREPARE_TIMEOUT"  # seconds a rank waits for rank 0's data preparation (default 2 h)


def env_rank() -> int:
    """This process's global rank from the launcher's environment (0 when not distributed).

    Known before ``torch.distributed`` starts: Lightning's launcher sets LOCAL_RANK / NODE_RANK for the
    ranks it starts, torchrun sets RANK, SLURM sets SLURM_PROCID.
    """
    for key in ("RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    local, node = os.environ.get("LOCAL_RANK", "0"), os.environ.get("NODE_RANK", "0")
    return int(local) + int(node) if local.isdigit() and node.isdigit() else 0


class PrepareTimeout(RuntimeError):
    """Rank 0's files did not appear in time (rank 0 failed, or the cache is not shared between nodes)."""


def wait_for_rank_zero(path: Path, what: str, *, rank: int, poll_s: float = 0.2) -> None:
    """On ranks other than 0, block until ``path`` exists (rank 0 wrote it); return at once on rank 0.

    Args:
        path: the file rank 0 writes last (complete once it exists).
        what: what is being prepared, for the timeout message.
        rank: this process's global rank (:func:`env_rank`).

    Raises:
        PrepareTimeout: after ``$FAMLAB_PREPARE_TIMEOUT`` seconds (default 7200) without the file.
    """
    if rank == 0:
        return
    timeout_s = float(os.environ.get(TIMEOUT_ENV, "7200"))
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise PrepareTimeout(
                f"rank {rank} waited {timeout_s:.0f} s for rank 0 to prepare {what} ({path}); did rank 0 fail, "
                "or is data.cache_dir not on a filesystem all nodes share?"
            )
        time.sleep(poll_s)
