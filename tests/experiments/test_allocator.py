"""experiments.allocator: freed memory stays mapped, so a step that re-allocates its activations stops faulting."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from famlab.experiments.perf import allocator

# A step's worth of "activations" (MiB: 8 x 1, 4 x 8, 8 x 2) taken from malloc, as torch's CPU allocator takes
# them, touched and freed last-first at the end of the "step"; the probe prints the minor page faults of one
# later step. Raw malloc through ctypes, so no small interleaved allocation decides whether the heap top can
# shrink: with glibc's defaults it is trimmed back to the kernel after every step and faults in again.
SIZES_MIB = [1] * 8 + [8] * 4 + [2] * 8
PROBE = textwrap.dedent(
    """
    import ctypes, resource
    from famlab.experiments.perf.allocator import keep_freed_memory
    keep_freed_memory()
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    def step():
        blocks = [libc.malloc(n << 20) for n in SIZES]
        for block, n in zip(blocks, SIZES):
            libc.memset(block, 1, n << 20)
        for block in reversed(blocks):
            libc.free(block)
    step(); step()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        step()
    print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5)
    """
)


def _faults_per_step(tuning: str) -> int:
    env = {**os.environ, "FAMLAB_MALLOC_TUNING": tuning}
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    probe = f"SIZES = {SIZES_MIB}\n" + PROBE
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_tuning_stops_the_refaulting_of_freed_activations() -> None:
    if not allocator.keep_freed_memory():
        pytest.skip("no glibc mallopt here")
    untuned, tuned = _faults_per_step("0"), _faults_per_step("1")
    pages = sum(SIZES_MIB) * (1 << 20) // 4096
    assert untuned > pages // 2, f"glibc's defaults should re-fault the freed pages ({untuned} faults/step)"
    assert tuned < pages // 20, f"freed memory should stay mapped ({tuned} faults/step vs {untuned} untuned)"


def test_opt_out_and_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_applied", None)
    monkeypatch.setenv("FAMLAB_MALLOC_TUNING", "0")
    assert allocator.keep_freed_memory() == ""
    monkeypatch.setenv("FAMLAB_MALLOC_TUNING", "1")
    assert allocator.keep_freed_memory() == ""  # decided once per process


WHERE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from famlab.experiments.commands import cli
    from famlab.experiments.configuration.compose import compose
    from famlab.experiments.perf import allocator
    from famlab.experiments.plumbing.trainer import make_trainer
    assert cli.main(["config", "gpt", "tiny"]) == 0
    after_config = allocator._applied
    tmp = Path(sys.argv[1])
    cfg = compose(["gpt", "tiny"], ["trainer.progress_bar=false"]).cfg
    make_trainer(cfg.trainer, tmp, [], seed=cfg.seed, grad_clip=cfg.optim.grad_clip,
                 checkpoint_dir=tmp / "checkpoints", monitor="val/loss", mode="min")
    print(repr(after_config), "|", repr(allocator._applied))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's")
def test_only_training_tunes_the_allocator(tmp_path) -> None:
    """A command that only prints (``famlab config``) leaves malloc alone; building a training Trainer tunes it."""
    if not allocator.keep_freed_memory():
        pytest.skip("no glibc mallopt here")
    env = {k: v for k, v in os.environ.items() if k != "FAMLAB_MALLOC_TUNING"}
    done = subprocess.run([sys.executable, "-c", WHERE, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    after_config, after_trainer = done.stdout.strip().splitlines()[-1].split(" | ")
    assert after_config == "None"
    assert "glibc malloc" in after_trainer
