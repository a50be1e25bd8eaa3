"""A failure in a run of several processes, said in one line by the rank that saw it.

Under DDP every rank runs the command; an exception on one rank would print its whole traceback among the others'
output, and the other ranks would wait in their next collective until it times out. Lightning's launcher ends the
whole group once any rank exits non-zero, so the failing rank only has to say what happened and exit: one line
naming the rank, where its traceback is, and the command that resumes the run.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from famlab.experiments.plumbing.failures import one_line
from famlab.experiments.plumbing.launch_env import inherited_run_dir, launched_world
from famlab.experiments.plumbing.prepare_once import env_rank

FAILED_EXIT = 1
# how a collective fails on the ranks that survive one that died (gloo; NCCL reports a timeout or an abort)
PEER_GONE = ("closed by peer", "reset by peer", "remote worker", "NCCL communicator was aborted")
OBSERVER_S = 12.0  # Lightning's launcher checks its child ranks every 5 s and then ends rank 0 itself


def report_rank_failure(e: BaseException, command: str, args: list[str]) -> int:
    """Print ``famlab: rank r of W failed: <one line>`` (traceback in the run directory, resume command) and return
    the exit status; in a single process, re-raise (the traceback is the report)."""
    world = launched_world()
    if world == 1:
        raise e
    rank, run_dir = env_rank(), inherited_run_dir()
    if rank == 0 and any(p in str(e) for p in PEER_GONE):
        # another rank died and says why in its own line; Lightning's launcher ends this rank in a moment
        time.sleep(OBSERVER_S)
    where = "below"
    if run_dir is not None and Path(run_dir).is_dir():
        path = Path(run_dir) / f"rank{rank}-error.log"
        path.write_text("".join(traceback.format_exception(e)), encoding="utf-8")
        where = f"in {path}"
    else:
        traceback.print_exception(e, file=sys.stderr)
    kept = " ".join(a for a in args if not a.startswith(("run_dir=", "resume=")))
    resume = f"; resume with: famlab {command} {kept} run_dir={run_dir} resume=auto" if run_dir else ""
    print(f"famlab: rank {rank} of {world} failed: {one_line(e)} (traceback {where}){resume}", file=sys.stderr)
    return FAILED_EXIT
