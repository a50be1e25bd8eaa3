"""Keep freed CPU memory mapped between training steps (glibc ``malloc``), so steps stop page-faulting.

PyTorch's CPU tensors come from the C library's ``malloc``. With glibc's defaults, each step's activations
(tens to hundreds of MiB) are freed at the end of backward, the heap top is trimmed back to the kernel
(``M_TRIM_THRESHOLD`` adapts to only twice the largest mmapped chunk seen) and the next forward faults
every page in again: the kernel zeroes each 4 KiB page on first touch. On a small CPU that makes a small
step markedly slower, and whether a process falls into it varies from run to run (measured: docs/results.md,
Speed). Raising the trim threshold and pinning the mmap threshold
(what ``MALLOC_TRIM_THRESHOLD_`` / ``MALLOC_MMAP_THRESHOLD_`` do at process start; PyTorch's CPU tuning
guide suggests jemalloc or tcmalloc for the same reason) keeps the pages of the step's peak mapped: the
process keeps its peak resident size, as a CUDA caching allocator does on GPU.

Only training steps gain from it, so it is applied where a run trains: ``make_trainer`` (every command that
fits) calls :func:`keep_freed_memory`, as ``famlab bench`` does for both of its sides; commands that only read,
print or report never change the allocator. ``FAMLAB_MALLOC_TUNING=0`` opts out.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD = 1 << 30  # keep up to 1 GiB of freed heap top mapped
MMAP_THRESHOLD = 32 << 20  # glibc's largest allowed value: requests below 32 MiB come from the heap
_applied: str | None = None


def keep_freed_memory() -> str:
    """Apply the settings once per process; returns what was done (``""`` when it does not apply).

    Not applied off Linux/glibc (``mallopt`` is glibc's), nor with ``FAMLAB_MALLOC_TUNING=0``.
    """
    global _applied
    if _applied is not None:
        return _applied
    _applied = ""
    if os.environ.get("FAMLAB_MALLOC_TUNING", "1").strip().lower() in ("0", "false", "no", "off"):
        return _applied
    if not sys.platform.startswith("linux"):
        return _applied
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return _applied
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1:
        _applied = f"glibc malloc: trim threshold {TRIM_THRESHOLD >> 20} MiB, mmap threshold {MMAP_THRESHOLD >> 20} MiB"
    return _applied
