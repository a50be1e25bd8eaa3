"""Where a comparison's jobs run: two axes, jobs side by side and devices per job.

- ``compare.workers``: jobs side by side, each worker a process of its own holding its own devices.
- ``trainer.devices`` (a count): devices per job, the job's own DDP world, launched by its worker as a child process
  group (:mod:`famlab.experiments.plumbing.process_group`), never by re-running ``famlab compare``. ``auto`` means
  one device per job in a comparison (a job that fits one GPU trains on one, the preset's global batch unchanged:
  :mod:`famlab.experiments.plumbing.world`).

On a node with N visible GPUs, worker ``i`` holds GPUs ``i*k .. i*k+k-1`` for ``k`` devices per job, and when the
user has not set ``compare.workers`` (on the command line or in a preset of their own) every preset gets
``N // k`` workers (:func:`famlab.experiments.steps.comparison.compose_base`). On a CPU the cores are shared out:
each rank of each worker gets ``cores // (workers * k)`` threads, at least one. ``famlab compare --dry-run`` prints
both axes.
"""

from __future__ import annotations

import dataclasses

from famlab.experiments.configuration.config import ConfigInputError, TrainerConfig
from famlab.experiments.configuration.plans import TrainerSetup
from famlab.experiments.configuration.run_files import LAST_CKPT

SHARDED = ("fsdp", "deepspeed")  # strategies whose checkpoints are directories of shards


@dataclasses.dataclass(frozen=True)
class Placement:
    """A comparison's workers and each job's devices on this machine."""

    workers: int
    devices_per_job: int
    gpus: tuple[str, ...] = ()  # visible CUDA GPUs; () = the CPU

    def worker_gpus(self, index: int) -> tuple[str, ...]:
        """The GPUs worker ``index`` (start order) holds: its own block of ``devices_per_job``; () on the CPU."""
        if not self.gpus:
            return ()
        blocks = max(1, len(self.gpus) // self.devices_per_job)
        start = (index % blocks) * self.devices_per_job
        return self.gpus[start:start + self.devices_per_job]

    def threads_per_rank(self, cores: int) -> int:
        """Torch threads of each rank of each worker on a CPU: the cores shared out, at least one."""
        return max(1, cores // (self.workers * self.devices_per_job))

    def lines(self) -> list[str]:
        """The two axes in words, for ``--dry-run`` and ``compare.log``."""
        k = self.devices_per_job
        per_job = "1 device per job (in the worker's process)" if k == 1 else (
            f"{k} devices per job (each job its own {k}-rank DDP world, a child process group of its worker)")
        if not self.gpus:
            side = f"{self.workers} side by side on the CPU" if self.workers > 1 else "1 at a time on the CPU"
            return [f"workers: {side}; {per_job}"]
        held = ", ".join(f"worker {i} on GPU {','.join(self.worker_gpus(i))}" for i in range(self.workers))
        return [f"workers: {self.workers} side by side, {k} GPU{'s' if k > 1 else ''} each: {held}; {per_job}"]


def devices_per_job(t: TrainerConfig, gpus: tuple[str, ...]) -> int:
    """A comparison job's devices from ``trainer.devices``: ``auto`` = 1, a count as given, ``-1`` = every visible GPU.
    Device ids, several nodes and sharded strategies are refused (a comparison places its jobs itself)."""
    text = str(t.devices).strip()
    if t.num_nodes > 1:
        raise ConfigInputError(f"trainer.num_nodes={t.num_nodes}: famlab compare runs each job on one node; train "
                               "across nodes with famlab pretrain under SLURM or torchrun (docs/scale.md)")
    if text == "auto":
        return 1
    if text == "-1":
        if not gpus:
            raise ConfigInputError("trainer.devices=-1 in famlab compare means every GPU, and there is none: "
                                   "give a count")
        return len(gpus)
    if not text.isdigit():
        raise ConfigInputError(f"trainer.devices={text}: famlab compare gives each worker its own devices; give a "
                               "count of devices per job (and compare.workers for jobs side by side), not device ids")
    return int(text)


def place(t: TrainerConfig, workers: int, gpus: list[str]) -> Placement:
    """The comparison's placement of ``workers`` jobs side by side, ``trainer.devices`` each (one-device jobs may share
    a GPU, round robin, when there are more workers than GPUs: small models leave a GPU idle otherwise).

    Raises:
        ConfigInputError: several devices per job and more GPUs asked for than visible, naming both keys.
    """
    k = devices_per_job(t, tuple(gpus))
    if gpus and k > 1 and workers * k > len(gpus):
        raise ConfigInputError(f"compare.workers={workers} x trainer.devices={k} needs {workers * k} GPUs and "
                               f"{len(gpus)} are visible: lower compare.workers or trainer.devices")
    return Placement(workers, k, tuple(gpus))


def check_strategy(t: TrainerSetup) -> None:
    """Sharded strategies are refused in one line: famlab's checkpoints and ``resume=auto`` read one ``last.ckpt``
    file, so a sharded checkpoint (a directory) would not resume; every preset up to ``base`` fits one 80 GB GPU
    under DDP."""
    if any(t.strategy.startswith(s) for s in SHARDED):
        raise ConfigInputError(
            f"trainer.strategy={t.strategy} is not supported: its checkpoints are sharded directories, which "
            f"famlab's resume (one {LAST_CKPT} file) cannot continue; every preset up to base fits one 80 GB GPU under "
            "DDP: use trainer.strategy=ddp (or auto)")
