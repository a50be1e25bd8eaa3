"""A comparison is a directory of jobs: killed anywhere (SIGTERM, SIGKILL), it resumes to the report an uninterrupted
run writes; optional steps that fail are isolated and named in the report; settings that differ are refused."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.plumbing import faults
from famlab.experiments.steps import compare_jobs, comparison
from famlab.experiments.steps.compare_dir import write_settings
from test_compare import strip_time_columns, tiny_inputs

# test scale: two families (one encoder-decoder, one decoder) keep each comparison near a minute; a pretraining long
# enough (60 steps, checkpointed every 10) to be killed inside it
SETTINGS = ["compare.families=[gpt,t5]", "trainer.max_steps=60", "trainer.val_check_interval=10",
            "compare.bpb_docs=8", "compare.zero_shot_items=12", "finetune.probe_seeds=[0,1]"]
TABLES = ("pretrain", "finetune", "gains", "probe")
SLOW = pytest.mark.slow


def inputs(root: Path) -> list[str]:
    return [*tiny_inputs(root), *SETTINGS]


def tables(comp_dir: Path) -> dict[str, list[list[str]]]:
    data = json.loads((comp_dir / "results.json").read_text())
    return {name: strip_time_columns(data["tables"][name]) for name in TABLES}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """One directory (inputs and tokenizer cache) shared by the reference and every interrupted comparison."""
    return tmp_path_factory.mktemp("resume")


@pytest.fixture(scope="module")
def reference(root) -> dict[str, list[list[str]]]:
    """The tables of the comparison run once, uninterrupted."""
    env = famlab_env(root)
    done = subprocess.run(famlab(root, "run_dir=ref"), cwd=root, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return tables(root / "ref")


def famlab_env(root: Path) -> dict[str, str]:
    return {**os.environ, "FAMLAB_CACHE": str(root / "cache"), "WANDB_MODE": "disabled", "PYTHONUNBUFFERED": "1"}


def famlab(root: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "famlab", "compare", *inputs(root), *extra]


def kill_when(proc: subprocess.Popen, ready, sig: int, timeout: float = 600) -> None:
    """Send ``sig`` once ``ready()`` holds (polled), failing if the comparison ends first."""
    deadline = time.time() + timeout
    while not ready():
        assert proc.poll() is None, f"the comparison ended (exit {proc.returncode}) before the kill point"
        assert time.time() < deadline, "the kill point never came"
        time.sleep(0.05)
    os.kill(proc.pid, sig)


def inside_pretraining(comp_dir: Path, arm: str, delay: float):
    """Ready ``delay`` seconds after ``arm``'s pretraining wrote its first checkpoint, if it is still training."""
    run, seen = comp_dir / f"{arm}-pretrain-s0", []

    def ready() -> bool:
        if not (run / "checkpoints" / "last.ckpt").exists() or (run / "results.json").exists():
            return False
        seen.append(seen[0] if seen else time.time())
        return time.time() - seen[0] >= delay

    return ready


def between_jobs(out: Path, k: int):
    """Ready once the ``[k/N]`` progress line is printed: ``k`` jobs finished, the others not all."""
    return lambda: f"[{k}/" in out.read_text()


def inside_finetune(comp_dir: Path, run: str):
    """Ready once a job of the fine-tune ``run`` (a grid point x seed) wrote its first checkpoint, before the fine-tune
    wrote its results."""
    def ready() -> bool:
        return any((comp_dir / run).glob("**/checkpoints/last.ckpt")) and not (comp_dir / run / "results.json").exists()

    return ready


# (signal, where, workers), every kill point named: inside each family's pretraining, inside a fine-tune (the
# scratch baseline's, which starts while the other family pretrains), between jobs
CASES = [
    (signal.SIGTERM, "pretraining gpt", 1),
    (signal.SIGKILL, "pretraining t5", 1),
    (signal.SIGTERM, "fine-tune t5-scratch", 2),
    (signal.SIGKILL, "between jobs 2", 1),
    (signal.SIGTERM, "between jobs 3", 2),
]


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "where", "workers"), CASES, ids=[f"{s.name}-{w}-{n}w" for s, w, n in CASES])
def test_killed_comparison_resumes_to_the_uninterrupted_report(root, reference, sig, where, workers):
    """Killed at a named point, the comparison resumes with the command it printed (or the same command plus
    run_dir and resume=auto after SIGKILL) and its tables equal the uninterrupted run's."""
    name = f"cmp-{sig.name}-{where.replace(' ', '-')}-{workers}"
    comp_dir, out = root / name, root / f"{name}.out"
    args = [f"run_dir={name}", f"compare.workers={workers}"]
    with out.open("w") as stdout:
        # every training step sleeps 50 ms (the test hook; no effect on the numbers): a pretraining outlasts its
        # kill point by over two seconds, and jobs by the poll, however fast the machine
        env = famlab_env(root) | {"FAMLAB_FAULT_STEP_SLEEP": "0.05"}
        proc = subprocess.Popen(famlab(root, *args), cwd=root, env=env, stdout=stdout, stderr=subprocess.PIPE,
                                text=True)
        kind, at = where.rsplit(" ", 1)
        if kind == "pretraining":
            ready = inside_pretraining(comp_dir, at, 0.5)
        elif kind == "fine-tune":
            ready = inside_finetune(comp_dir, at)
        else:
            ready = between_jobs(out, int(at))
        kill_when(proc, ready, sig)
        _, err = proc.communicate(timeout=600)
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        command = famlab(root, *args, "resume=auto")
    else:  # stopped at a step boundary with a checkpoint; the last line is the resume command
        assert proc.returncode == 3, err[-3000:]
        last = err.strip().splitlines()[-1]
        assert last.startswith("famlab: resume with: famlab compare "), last
        assert f"run_dir={comp_dir} " in last and last.endswith("resume=auto")  # absolute: resumes from anywhere
        command = [sys.executable, "-m", *shlex.split(last.removeprefix("famlab: resume with: "))]
    assert not (comp_dir / "report.md").exists()
    resumed = subprocess.run(command, cwd=root, env=famlab_env(root), capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert tables(comp_dir) == reference


@pytest.mark.slow
def test_finished_jobs_are_read_back_not_rerun(root, reference):
    """Resuming a finished comparison trains nothing: every run directory's files are untouched, the tables equal."""
    comp_dir = root / "ref"
    stamps = {p: p.stat().st_mtime_ns for p in comp_dir.rglob("*.ckpt")}
    stamps |= {p: p.stat().st_mtime_ns for p in comp_dir.glob("*/results.json")}
    done = subprocess.run(famlab(root, "run_dir=ref", "resume=auto"), cwd=root, env=famlab_env(root),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert stamps and {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert tables(comp_dir) == reference



@pytest.mark.slow
def test_a_comparison_resumes_from_another_working_directory(root, reference):
    """Started with ``run_dir=ref`` (relative), resumed from another directory with the comparison's absolute path:
    the finished jobs are found and read back, not rerun, and a fine-tune left without its ``results.json`` (as a
    stop leaves it) continues: the paths its stored config records (``init``, the pretrained run) are absolute."""
    comp_dir, elsewhere = root / "ref", root / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    unfinished = comp_dir / "gpt-ft-s0" / "results.json"
    unfinished.unlink()
    assert Path(yaml.safe_load((unfinished.parent / "config.yaml").read_text())["init"]).is_absolute()
    stamps = {p: p.stat().st_mtime_ns for p in comp_dir.glob("*/results.json")}
    done = subprocess.run(famlab(root, f"run_dir={comp_dir}", "resume=auto"), cwd=elsewhere, env=famlab_env(root),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert stamps and {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert unfinished.is_file()
    assert tables(comp_dir) == reference


def test_resume_refuses_other_settings_naming_the_key(tmp_path, monkeypatch, capsys):
    """A stored comparison resumed with another trainer.max_steps: exit 2, one line naming the key, nothing run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    base, cfgs = comparison.compose_all([], [*tiny_inputs(tmp_path), "trainer.max_steps=30"])
    (tmp_path / "cmp").mkdir()
    write_settings(tmp_path / "cmp", cfgs, [], [])
    before = sorted((tmp_path / "cmp").iterdir())
    assert cli.main(["compare", *tiny_inputs(tmp_path), "trainer.max_steps=40", "run_dir=cmp", "resume=auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trainer.max_steps=40 (stored 30)" in err[0]
    assert sorted((tmp_path / "cmp").iterdir()) == before


@pytest.mark.parametrize(("extra", "message"), [
    (["resume=auto"], "resume=auto needs run_dir="),
    (["run_dir=full"], "exists and is not empty; pass resume=auto"),
    (["run_dir=full", "resume=auto"], "holds no famlab comparison"),
    (["run_dir=x", "resume=full/notes.txt"], "a comparison resumes as a whole"),
])
def test_compare_reads_run_dir_and_resume(tmp_path, monkeypatch, capsys, extra, message):
    """run_dir and resume are read: a bad combination is refused on one line before anything runs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert cli.main(["compare", *tiny_inputs(tmp_path), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert (tmp_path / "full" / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_failed_optional_steps_are_isolated_and_named(tmp_path, monkeypatch, capsys):
    """A failure injected into gpt's zero-shot step and t5's probe: the comparison completes (exit 0), the report
    names both failed cells with their reasons, the log keeps the tracebacks, everything else is reported."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    real_zero_shot, real_probe = compare_jobs.zero_shot_scores, compare_jobs._probe

    def zero_shot(run_dir, limit=None):
        if Path(run_dir).name.startswith("gpt-"):
            raise IndexError("too many indices for tensor of dimension 1")
        return real_zero_shot(run_dir, limit)

    def probe(job):
        if Path(job.run_dir).name.startswith("t5-"):
            raise RuntimeError("injected probe failure")
        return real_probe(job)

    monkeypatch.setattr(compare_jobs, "zero_shot_scores", zero_shot)
    monkeypatch.setattr(compare_jobs, "_probe", probe)
    settings = [s for s in SETTINGS if not s.startswith(("trainer.max_steps", "trainer.val_check"))]
    assert cli.main(["compare", *tiny_inputs(tmp_path), *settings, "trainer.max_steps=30", "run_dir=cmp"]) == 0
    report = (tmp_path / "cmp" / "report.md").read_text()
    assert "## Steps that failed" in report
    assert "**zero-shot of gpt seed 0**: IndexError: too many indices for tensor of dimension 1" in report
    assert "**probe of t5 seed 0**: RuntimeError: injected probe failure" in report
    assert "| gpt (seed 0) | failed: IndexError" in report  # the zero-shot table's gpt row
    assert "| t5 (seed 0) | failed: RuntimeError" in report  # the probe table's t5 row
    assert "| t5 |" in report.split("## Zero-shot")[1].split("##")[0]  # t5's zero-shot still scored
    log = (tmp_path / "cmp" / "compare.log").read_text()
    assert "Traceback" in log and "injected probe failure" in log and "too many indices" in log
    results = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert {(f["step"], f["arm"]) for f in results["failed"]} == {("zero-shot", "gpt"), ("probe", "t5")}
    assert "gpt" in results["tables"]["gains"] and "t5" in results["tables"]["gains"]


@pytest.mark.slow
def test_a_failed_required_step_stops_with_the_resume_command(tmp_path, monkeypatch, capsys):
    """A fine-tune that raises: exit 1, one line naming the failure, finished pretraining kept, the last line the
    resume command; resuming (the failure gone) completes from the kept jobs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    real = compare_jobs._finetune

    def finetune(job, comp_dir):
        if job.init != "scratch":
            raise RuntimeError("injected fine-tuning failure")
        return real(job, comp_dir)

    monkeypatch.setattr(compare_jobs, "_finetune", finetune)
    settings = [s for s in SETTINGS if not s.startswith(("trainer.max_steps", "trainer.val_check"))]
    args = [*tiny_inputs(tmp_path), *settings, "compare.families=[gpt]", "trainer.max_steps=30", "run_dir=cmp"]
    assert cli.main(["compare", *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("famlab: resume with: famlab compare ")
    assert err[-1].endswith(f"run_dir={tmp_path / 'cmp'} resume=auto")
    assert not any(line.startswith("Traceback") for line in err)
    ckpt = tmp_path / "cmp" / "gpt-pretrain-s0" / "results.json"
    assert ckpt.is_file() and "injected fine-tuning failure" in (tmp_path / "cmp" / "compare.log").read_text()
    stamp = ckpt.stat().st_mtime_ns
    monkeypatch.setattr(compare_jobs, "_finetune", real)
    assert cli.main(["compare", *args, "resume=auto"]) == 0
    assert ckpt.stat().st_mtime_ns == stamp and (tmp_path / "cmp" / "report.md").is_file()


def test_a_key_famlab_added_since_reads_as_its_default(tmp_path, monkeypatch):
    """comparison.yaml written before a config key existed: resuming with that key at its default is accepted, at
    another value refused (the stored runs ran with the default)."""
    import yaml
    from famlab.experiments.configuration.config import ConfigInputError
    from famlab.experiments.steps.compare_dir import check_settings

    monkeypatch.chdir(tmp_path)
    _, cfgs = comparison.compose_all([], [*tiny_inputs(tmp_path), "trainer.max_steps=30"])
    write_settings(tmp_path, cfgs, [], [])
    path = tmp_path / "comparison.yaml"
    stored = yaml.safe_load(path.read_text())
    for flat in stored["arms"].values():
        del flat["compare.finetune_lr_points"]
    path.write_text(yaml.safe_dump(stored))
    check_settings(path, cfgs)
    _, other = comparison.compose_all([], [*tiny_inputs(tmp_path), "trainer.max_steps=30",
                                          "compare.finetune_lr_points=3"])
    with pytest.raises(ConfigInputError, match="compare.finetune_lr_points=3 \\(stored 2\\)"):
        check_settings(path, other)


def test_a_retried_evaluation_clears_the_failure_of_a_step_whose_result_is_kept(tmp_path, monkeypatch):
    """A resumed comparison retries a failed zero-shot step; the byte score kept in ``eval.json`` from a later try of
    the evaluation step had left that step's older failure record behind: both records go, so the report lists
    neither step as failed, and ``eval.json`` keeps the byte score and gains the zero-shot results."""
    from types import SimpleNamespace

    from famlab.experiments.analysis.results import StepFailure, read_failures
    from famlab.experiments.plumbing import failures

    run_dir = tmp_path / "gpt-pretrain-s0"
    run_dir.mkdir()
    kept = {"byte_score": {"measure": "bits_per_byte", "value": 1.5}}
    (run_dir / "eval.json").write_text(json.dumps(kept))
    for step in ("evaluation", "zero-shot"):
        failures.record(tmp_path, StepFailure(step=step, arm="gpt", seed=0, reason="RuntimeError"), RuntimeError())
    monkeypatch.setattr(compare_jobs, "zero_shot_scores", lambda run_dir, limit=None: {})
    c = SimpleNamespace(comp_dir=tmp_path, base=SimpleNamespace(compare=SimpleNamespace(zero_shot_items=4)),
                        clock=SimpleNamespace(timed=lambda name, fn, *a, **k: fn(*a, **k)))
    run = SimpleNamespace(run_dir=run_dir, result=SimpleNamespace(byte_score=None), cfg=None)
    compare_jobs.evaluate_pretrained(c, "gpt", 0, run)
    assert read_failures(tmp_path) == []
    assert json.loads((run_dir / "eval.json").read_text()) == {**kept, "zero_shot": {}}


# (family, fit, step): the fit of the comparison's process that is stopped after that step - fit 1 is the family's
# pretraining (8 steps), fit 2 the first job of its scratch baseline's fine-tune (2 steps; jobs run in this order
# with one worker)
STOPS = [pytest.param("gpt", 1, 3, id="gpt-pretraining"),
         pytest.param("bert", 1, 3, id="bert-pretraining", marks=SLOW),
         pytest.param("t5", 1, 3, id="t5-pretraining", marks=SLOW),
         pytest.param("gpt", 2, 1, id="gpt-finetune", marks=SLOW)]


@pytest.mark.parametrize(("family", "fit", "step"), STOPS)
def test_a_comparison_stopped_inside_a_fit_resumes_to_the_uninterrupted_tables(tmp_path, monkeypatch, capsys, family,
                                                                               fit, step):
    """Comparison resume inside each family's pretraining and inside a fine-tune (gpt's pretraining in the fast loop):
    one family at the generated-data budget with dropout on (so the resumed fit must restore the RNG too), SIGTERM
    after a step of the named fit (the test hook, in this process), exit 3; ``resume=auto`` finishes it with the
    tables of the comparison that was not stopped."""
    from test_generated_compare import BUDGET

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    args = ["compare", *tiny_inputs(tmp_path), *BUDGET, f"compare.families=[{family}]", "model.dropout=0.1"]
    assert cli.main([*args, "run_dir=ref"]) == 0
    monkeypatch.setenv("FAMLAB_FAULT_SIGTERM_STEP", str(step))
    monkeypatch.setenv("FAMLAB_FAULT_SIGTERM_FIT", str(fit))
    monkeypatch.setattr(faults, "FITS_STARTED", [0])  # count this comparison's fits only
    assert cli.main([*args, "run_dir=cut"]) == 3
    assert "famlab: resume with: famlab compare " in capsys.readouterr().err
    assert not (tmp_path / "cut" / "report.md").exists()
    stopped_in = f"{family}-pretrain-s0" if fit == 1 else f"{family}-scratch"
    (checkpoint,) = [p for p in (tmp_path / "cut" / stopped_in).glob("**/checkpoints/last.ckpt")
                     if not (p.parent.parent / "job.json").exists()]  # the one job that did not finish
    assert torch.load(checkpoint, weights_only=True)["global_step"] == step
    for knob in ("FAMLAB_FAULT_SIGTERM_STEP", "FAMLAB_FAULT_SIGTERM_FIT"):
        monkeypatch.delenv(knob)
    assert cli.main([*args, "run_dir=cut", "resume=auto"]) == 0
    assert tables(tmp_path / "cut") == tables(tmp_path / "ref")
