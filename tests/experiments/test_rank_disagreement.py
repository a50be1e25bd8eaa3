"""Ranks that disagree: a NaN, a stop signal or a failure on one rank of two, through the real ``famlab pretrain`` /
``famlab finetune`` commands on two CPU processes (gloo, Lightning's DDP launcher, as on GPUs); the validation loss
of two ranks against one process on the same checkpoint; and Ctrl-C pressed twice.

The faults come from the fault hook (``experiments/plumbing/faults.py``): ``FAMLAB_FAULT_RANKS=1`` puts them on rank 1
only. Every command runs in its own session with a timeout far below the collective timeout (30 minutes), and the
whole session is killed on a timeout, so a rank left waiting in a collective fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest
import torch
from famlab.experiments.plumbing.reliability import PREEMPTED_EXIT, RNG_KEY

from tests.experiments.reliability_helpers import fast_args, losses, step_rows, write_corpus
from tests.experiments.test_ddp_finetune import _task_csv

ROOT = Path(__file__).resolve().parents[2]
DDP = ["trainer.devices=2", "trainer.accelerator=cpu", "trainer.strategy=ddp"]
TIMEOUT_S = 300  # a tiny 2-rank run takes ~30 s on 2 busy cores; gloo's collective timeout is 1800 s


def _env(root: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, "FAMLAB_CACHE": str(root / "cache"), "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "TOKENIZERS_PARALLELISM": "false", **extra}
    for key in [k for k in env if k.startswith("FAMLAB_FAULT_") and k not in extra] + ["FAMLAB_RUN_DIR"]:
        env.pop(key, None)
    return env


def _run(args: list[str], root: Path, module: str = "famlab", **extra: str) -> subprocess.CompletedProcess:
    """``python -m <module> <args>`` in its own session; on a timeout the session (every rank) is killed and the
    test fails saying so."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=_env(root, extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"hung: `{module} {' '.join(args[:3])}` still running after {TIMEOUT_S} s\n{err[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def _skipped(run_dir: Path) -> dict[int, float]:
    return {step: float(row["train/skipped_steps"]) for step, row in step_rows(run_dir, "train/skipped_steps").items()}


# --- a NaN on one rank ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_nan_on_one_rank_is_skipped_by_both_as_if_every_rank_saw_it(tmp_path):
    """Optimizer step 3's gradient is NaN on rank 1 only (after DDP's gradient all-reduce, so rank 0's is finite):
    both ranks skip step 3 and train on. The run equals one where both ranks saw the NaN at step 3, exactly (the
    same operations in the same order: bit-for-bit equal weights and per-step losses), and rank 0 counts the skip.
    A rank that decided alone would update on step 3 while the other does not, and the replicas would part."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    one, every = tmp_path / "nan-rank1", tmp_path / "nan-every"
    done = _run([*fast_args(corpus, one, 8), *DDP], tmp_path, FAMLAB_FAULT_NAN_STEPS="3", FAMLAB_FAULT_RANKS="1")
    assert done.returncode == 0, done.stderr[-3000:]
    reference = _run([*fast_args(corpus, every, 8), *DDP], tmp_path, FAMLAB_FAULT_NAN_STEPS="3")
    assert reference.returncode == 0, reference.stderr[-3000:]

    assert _skipped(one) == _skipped(every) == {s: float(s >= 2) for s in range(8)}  # metrics step 2 = step 3
    assert json.loads((one / "results.json").read_text())["steps"] == 8
    assert losses(one) == losses(every) and all(torch.isfinite(torch.tensor(list(losses(one).values()))))
    ours, theirs = _weights(one), _weights(every)
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=0, msg=name)


# --- a stop signal on one rank -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_stop_signal_on_one_rank_stops_both_at_one_step_and_resumes_to_the_uninterrupted_losses(tmp_path):
    """SIGTERM reaches rank 1 only, during optimizer step 3: both ranks stop after step 3 with one checkpoint (both
    ranks' RNG states in it: a save every rank took part in), exit 3 with the resume command once; resume=auto
    then trains steps 4-8 and the per-step losses equal an uninterrupted 2-rank run's."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir, plan, cut = tmp_path / "stopped", 8, 3
    args = [*fast_args(corpus, run_dir, plan), *DDP]
    first = _run(args, tmp_path, FAMLAB_FAULT_SIGTERM_STEP=str(cut), FAMLAB_FAULT_RANKS="1")
    assert first.returncode == PREEMPTED_EXIT, first.stderr[-3000:]
    assert first.stderr.count("famlab: got SIGTERM") == 1  # rank 1's handler; rank 0 learned it from the all-reduce
    hints = [line for line in first.stderr.splitlines() if "Resume with:" in line]
    assert len(hints) == 1 and hints[0].endswith(f"run_dir={run_dir} resume=auto"), first.stderr[-3000:]
    assert f"preempted at step {cut}" in hints[0] and "Traceback" not in first.stderr
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == cut and len(ckpt[RNG_KEY]) == 2

    second = _run([*args, "resume=auto"], tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    reference = _run([*fast_args(corpus, tmp_path / "reference", plan), *DDP], tmp_path)
    assert reference.returncode == 0, reference.stderr[-3000:]
    resumed, straight = losses(run_dir), losses(tmp_path / "reference")
    assert sorted(resumed) == list(range(plan))
    torch.testing.assert_close(torch.tensor([resumed[s] for s in range(plan)]),
                               torch.tensor([straight[s] for s in range(plan)]), rtol=0, atol=0)


# --- a rank that dies in a fine-tune -------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_rank_that_dies_in_a_finetune_is_one_line_and_nothing_hangs(tmp_path):
    """Rank 1 of a 2-rank fine-tune raises after step 2: the command ends (well inside TIMEOUT_S, where a rank
    left in a collective would wait 1800 s) with one line naming rank 1, its error and the resume command."""
    corpus, task, run_dir = write_corpus(tmp_path / "corpus.txt"), _task_csv(tmp_path / "task.csv"), tmp_path / "ft"
    args = ["finetune", "gpt", "tiny", "init=scratch", f"data.corpus={corpus}", f"data.task={task}",
            "data.text_column=sentence", "data.label_column=topic", "model.dim=32", "model.num_layers=2",
            "data.tokenizer.vocab_size=512", "data.max_len=32", "data.batch_size=8", "finetune.max_steps=6",
            "finetune.val_every=3", "trainer.progress_bar=false", "wandb.mode=disabled", f"run_dir={run_dir}", *DDP]
    done = _run(args, tmp_path, FAMLAB_FAULT_RAISE_STEP="2", FAMLAB_FAULT_RANKS="1")  # fails the test if it hangs
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("famlab: rank")]
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("famlab: rank 1 of 2 failed: RuntimeError: injected failure after step 2")
    assert "resume with: famlab finetune gpt tiny init=scratch" in lines[0]
    assert f"run_dir={run_dir.resolve()} resume=auto" in lines[0]
    assert "FAMLAB_FAULT_RAISE_STEP" in (run_dir / "rank1-error.log").read_text()
    assert "Traceback" not in done.stderr


# --- validation on two ranks ---------------------------------------------------------------------------------------

SPLIT = ["data.val_fraction=0.19"]  # 27 validation blocks of this corpus: an odd number, batches of 8 and of 4


def _validate(corpus: Path, ckpt: Path, run_dir: Path, root: Path, world: int) -> list[dict]:
    """Every rank's ``validate-rank<r>.json`` of validating ``ckpt`` on the whole validation split (validate_script)."""
    args = [a for a in fast_args(corpus, run_dir, 6) if not a.startswith("trainer.limit_val_batches")]
    devices = DDP if world == 2 else ["trainer.accelerator=cpu", "trainer.devices=1"]
    done = _run([*args, *SPLIT, "trainer.limit_val_batches=100", *devices], root,
                module="tests.experiments.validate_script", FAMLAB_TEST_VALIDATE=str(ckpt))
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((run_dir / f"validate-rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.slow
def test_two_ranks_validate_a_checkpoint_to_one_processs_loss_on_uneven_shards(tmp_path):
    """The last checkpoint of an 8-step run, validated on the whole validation split by 1 process and by 2 gloo ranks
    through ``make_trainer`` / ``Trainer.validate`` (the pretraining module's metrics, its validation loader): the
    same loss and perplexity. The split has an odd number of blocks, so the ranks' shards are uneven; together they
    hold every block once (no duplicate padding, docs/scale.md). Tolerance: the loss is a token-weighted sum of
    per-batch losses, computed over other batch boundaries and summed across ranks in another order, float32
    rounding about 1e-7 relative per operation (measured: equal to the last digit); padding rank 1's shard with one
    duplicated block (a ``DistributedSampler``) moved it by 1e-4 relative (measured)."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    trained = tmp_path / "trained"
    done = _run([*fast_args(corpus, trained, 8), *SPLIT, "trainer.accelerator=cpu"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = trained / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, map_location="cpu", weights_only=True)["global_step"] == 8
    (single,) = _validate(corpus, ckpt, tmp_path / "val1", tmp_path, world=1)
    ranks = _validate(corpus, ckpt, tmp_path / "val2", tmp_path, world=2)

    blocks = [r["blocks"] for r in ranks]
    assert single["blocks"] % 2 == 1 and sorted(blocks) == [single["blocks"] // 2, single["blocks"] // 2 + 1]
    assert ranks[0]["metrics"] == ranks[1]["metrics"]  # synced: every rank logs the global value
    for key in ("val/loss", "val/ppl", "val/unigram_loss"):
        torch.testing.assert_close(ranks[0]["metrics"][key], single["metrics"][key], rtol=1e-6, atol=0, msg=key)
    # and it is this checkpoint's: validating the untrained network gives another loss
    assert abs(single["metrics"]["val/loss"] - json.loads((trained / "results.json").read_text())["first"][
        "val/loss"]) > 1e-2


# --- Ctrl-C twice ----------------------------------------------------------------------------------------------------

def _read_lines(stream: IO[str], lines: list[str], seen: threading.Event, marker: str) -> None:
    for line in stream:
        lines.append(line)
        if marker in line:
            seen.set()


@pytest.mark.slow
def test_ctrl_c_twice_interrupts_at_once_and_the_run_directory_still_resumes(tmp_path):
    """One process, 3 s a step. Inside step 5, a first SIGINT asks for a checkpoint at the end of the step; a second
    one, sent once the first is acknowledged, interrupts at once: exit 1 (Lightning's KeyboardInterrupt exit) before
    the step would end, no preemption message, no checkpoint of step 5. The contract after that: the run directory
    keeps its last good ``last.ckpt`` (step 4's, written before the first SIGINT), so resume=auto finishes the plan.
    (Had it ignored the second SIGINT, the run would have checkpointed step 5 and exited 3.) The second waits for
    the first's message because signals that arrive before Python ran the first's handler count once."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    run_dir, plan = tmp_path / "ctrl-c", 12
    args = [*fast_args(corpus, run_dir, plan), "trainer.accelerator=cpu"]
    proc = subprocess.Popen([sys.executable, "-m", "famlab", *args], cwd=ROOT,
                            env=_env(tmp_path, {"FAMLAB_FAULT_STEP_SLEEP": "3"}), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    err: list[str] = []
    got = threading.Event()
    reader = threading.Thread(target=_read_lines, args=(proc.stderr, err, got, "famlab: got SIGINT"), daemon=True)
    reader.start()
    try:
        last = run_dir / "checkpoints" / "last.ckpt"
        deadline = time.monotonic() + TIMEOUT_S
        while not last.is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # step 4's checkpoint written, step 5 sleeping (its signals land there, not inside a save)
        assert proc.poll() is None, "".join(err)[-3000:]
        assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 4
        proc.send_signal(signal.SIGINT)
        assert got.wait(timeout=2), "".join(err)[-3000:]
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(timeout=10)
    text = "".join(err)
    assert proc.returncode == 1, text[-3000:]
    assert "preempted" not in text and "Resume with" not in text
    assert took < 30, took
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 4

    done = _run([*args, "resume=auto"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((run_dir / "results.json").read_text())["steps"] == plan
    assert sorted(step_rows(run_dir)) == list(range(plan))
