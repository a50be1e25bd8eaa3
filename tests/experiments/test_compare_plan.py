"""What ``famlab compare`` will run is visible before it runs, a preset means one thing in every command, and the
comparison's workers use the GPUs they find (simulated here: nothing needs a GPU).

- ``famlab compare --dry-run``: the composed config with compare's own defaults marked, the budget plan and the
  job list; nothing written, no tokenizer, corpus or W&B run; bad settings still exit 2 on one line.
- ``cpu`` extends ``tiny`` in its file: ``famlab config``, ``famlab pretrain`` and ``famlab compare`` build one model.
- N visible GPUs: the tiny comparison defaults to N workers, worker i sees GPU i alone (``CUDA_VISIBLE_DEVICES``).
"""

import os
import types
from pathlib import Path

import pytest
from famlab.experiments.commands import cli, compare
from famlab.experiments.configuration import compare_defaults
from famlab.experiments.configuration.compare_defaults import visible_gpus
from famlab.experiments.configuration.compose import compose
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.configuration.placement import Placement
from famlab.experiments.steps import compare_jobs, comparison, schedule


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """An empty cwd and cache; the real run's first steps (directory, corpus, tokenizer, W&B) fail if reached."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def reached(*args, **kwargs):
        raise AssertionError("--dry-run started the comparison")

    for module, name in ((compare, "run_compare"), (compare, "open_dir"), (comparison, "prepared_corpus"),
                         (comparison, "get_bundle"), (compare_jobs, "log_report_run")):
        monkeypatch.setattr(module, name, reached)
    return tmp_path


def dry_run(capsys, *args: str) -> str:
    assert cli.main(["compare", "--dry-run", *args]) == 0
    return capsys.readouterr().out


def test_dry_run_on_defaults_prints_the_composed_config_the_plan_and_the_jobs(workspace, capsys):
    out = dry_run(capsys)
    for line in ("presets: tiny", "trainer.max_steps: 4500  # famlab compare default; per arm: the budget plan",
                 "compare.workers: 2  # famlab compare default", "compare.task_limit: 1000  # famlab compare default",
                 "model.dim: 64", "trainer.log_every_n_steps: 10", "workers: 2 side by side on the CPU",
                 "budget plan (compare.match=flops: trainer.max_steps=4500 steps of the median-cost family",
                 "jobs (12, compare.workers=2 at a time", "1. pretrain t5 seed 0: 4500 steps, ~", " -> t5-pretrain-s0/",
                 "fine-tune bert from scratch: seeds [0, 1, 2]", "probe gpt-pretrain-s0: frozen features vs 5",
                 "fine-tune gpt-pretrain-s0: seeds [0, 1, 2]", "4 fine-tunes of 150 steps -> gpt-ft-s0/"):
        assert line in out, line
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("  bert ", "  gpt "))}
    assert set(rows) == {"bert", "gpt"} and all(r[1].isdigit() and r[1] != "4500" for r in rows.values())
    assert "gpt: model.family=gpt" in out and "objective.name=clm" in out  # the keys that differ between arms
    assert list(workspace.iterdir()) == []  # no run directory, cache, tokenizer or W&B files


def test_dry_run_shows_overrides_and_an_explicit_run_dir_without_making_it(workspace, capsys):
    out = dry_run(capsys, "compare.families=[gpt]", "trainer.max_steps=300", f"run_dir={workspace / 'cmp'}")
    assert "  trainer.max_steps: 300  # per arm: the budget plan\n" in out  # the user's value, not a default
    assert f"runs go to: run_dir={workspace / 'cmp'}" in out and "jobs (4," in out
    assert list(workspace.iterdir()) == []


def test_name_names_the_comparison_directory(workspace, capsys):
    """``name=`` is the comparison directory's name (``runs/compare-<name>-<time>``); unset, the families and size."""
    from famlab.experiments.steps.compare_dir import make_compare_dir

    assert "runs go to: runs/compare-ablation-<YYYYmmdd-HHMMSS>/" in dry_run(capsys, "name=ablation")
    base, cfgs = comparison.compose_all([], ["compare.families=[gpt,t5]"])
    named = make_compare_dir(base.compare, cfgs, name="ablation", size="tiny")
    unnamed = make_compare_dir(base.compare, cfgs, name=None, size="tiny")
    assert named.parent == unnamed.parent == workspace / "runs"
    assert named.name.startswith("compare-ablation-2") and unnamed.name.startswith("compare-gpt-t5-tiny-2")


@pytest.mark.parametrize("bad", ["trainer.max_stepz=3", "compare.workers=0", "finetune.seeds=[0,1]"])
def test_a_bad_setting_in_a_dry_run_is_the_usual_one_line_exit_2(workspace, capsys, bad):
    assert cli.main(["compare", "--dry-run", bad]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("famlab: error: ")
    assert list(workspace.iterdir()) == []


def test_compare_help_names_the_defaults_it_adds(capsys):
    assert cli.main(["compare", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(default in out for default in compare_defaults.TINY_DEFAULTS) and "--dry-run" in out
    assert cli.main(["compare", "--dry-runn"]) == 2  # an unknown flag is refused before anything runs


# --- a preset means one thing in every command --------------------------------------------------------------------

MODEL_KEYS = ("dim", "num_layers", "num_heads", "ffn_dim", "max_seq_len")


def test_cpu_extends_tiny_in_config_pretrain_and_compare(workspace, capsys, monkeypatch):
    from famlab.experiments.commands import pretrain

    tiny, cpu = compose(["gpt", "tiny"], []).cfg, compose(["gpt", "cpu"], []).cfg
    assert [getattr(cpu.model, k) for k in MODEL_KEYS] == [getattr(tiny.model, k) for k in MODEL_KEYS]
    assert (cpu.trainer.max_steps, cpu.size, cpu.finetune.max_steps) == (11690, "tiny", 200)
    assert cli.main(["config", "gpt", "cpu"]) == 0
    shown = capsys.readouterr().out
    assert "  dim: 64\n" in shown and "  max_steps: 11690\n" in shown
    seen = []

    def captured(cfg, **kwargs):
        seen.append(cfg)
        raise ConfigInputError("captured")

    monkeypatch.setattr(pretrain, "pretrain", captured)
    assert cli.main(["pretrain", "gpt", "cpu"]) == 2 and seen[0].model == cpu.model
    out = dry_run(capsys, "cpu")
    assert "presets: tiny cpu" in out and "trainer.max_steps: 11690  # per arm" in out
    assert all(f"model.{k}: {getattr(cpu.model, k)}\n" in out for k in MODEL_KEYS)
    _, cfgs = comparison.compose_all(["cpu"], [])
    assert [getattr(cfgs["gpt"].model, k) for k in MODEL_KEYS] == [getattr(cpu.model, k) for k in MODEL_KEYS]


def test_small_is_the_same_in_compare_and_pretrain():
    """A size preset adds no defaults in compare: its model and budget are the preset's in every command."""
    base, cfgs = comparison.compose_all(["small"], [])
    small = compose(["gpt", "small"], []).cfg
    assert cfgs["gpt"].model == small.model and base.trainer.max_steps == small.trainer.max_steps == 20000
    assert compare_defaults.comparison_presets(["small"], [])[1] == []


@pytest.mark.parametrize(("presets", "message"), [
    (["small", "cpu"], "preset cpu extends tiny (size tiny); it cannot be combined with preset small (size small)"),
    (["loop_a"], "extends chain"),
])
def test_an_impossible_extends_is_refused_naming_the_preset(tmp_path, monkeypatch, presets, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop_a.yaml").write_text("extends: loop_b.yaml\n")
    (tmp_path / "loop_b.yaml").write_text("extends: loop_a.yaml\n")
    presets = [p if p in ("small", "cpu") else f"{p}.yaml" for p in presets]
    with pytest.raises(ConfigInputError) as refused:
        compose(presets, [])
    assert message in str(refused.value)


def test_a_user_preset_may_extend_a_bundled_one(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: cpu\ntrainer:\n  max_steps: 7\n")
    cfg = compose(["t5", str(mine)], []).cfg
    assert (cfg.model.dim, cfg.finetune.max_steps, cfg.trainer.max_steps) == (64, 200, 7)


# --- N GPUs -> N jobs side by side, one GPU each ------------------------------------------------------------------

def test_worker_gpus_are_blocks_of_devices_per_job_round_robin():
    gpus = ("0", "1", "2", "3")
    assert [Placement(4, 1, gpus).worker_gpus(i) for i in range(6)] == [("0",), ("1",), ("2",), ("3",), ("0",), ("1",)]
    assert [Placement(2, 2, gpus).worker_gpus(i) for i in range(2)] == [("0", "1"), ("2", "3")]
    assert Placement(2, 1, ("5", "7")).worker_gpus(0) == ("5",) and Placement(2, 1).worker_gpus(3) == ()


@pytest.fixture
def four_gpus(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_visible_gpus_follow_cuda_visible_devices_and_the_accelerator(four_gpus, monkeypatch):
    assert visible_gpus("auto") == ["0", "1", "2", "3"] and visible_gpus("cpu") == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,5,7")
    assert visible_gpus("gpu") == ["2", "3", "5", "7"]


def test_the_default_on_four_gpus_runs_four_workers_one_gpu_each(four_gpus, monkeypatch):
    base, cfgs = comparison.compose_all([], [])
    assert base.compare.workers == 4 and all(c.compare.workers == 4 for c in cfgs.values())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # restored after the test
    c = types.SimpleNamespace(base=base, placement=Placement(4, 1, ("0", "1", "2", "3")), started_workers=_counter())
    placed = []
    for _ in range(4):  # what each worker process does as it starts
        placed.append((schedule.place_worker(c), os.environ["CUDA_VISIBLE_DEVICES"]))
    assert placed == [(("0",), "0"), (("1",), "1"), (("2",), "2"), (("3",), "3")]


def test_explicit_workers_on_four_gpus_take_the_first_ones(four_gpus, workspace, capsys):
    base, _ = comparison.compose_all([], ["compare.workers=2"])
    assert base.compare.workers == 2
    assert ("workers: 2 side by side, 1 GPU each: worker 0 on GPU 0, worker 1 on GPU 1; 1 device per job (in the "
            "worker's process)\n") in dry_run(capsys, "compare.workers=2")
    cpu, _ = comparison.compose_all([], ["trainer.accelerator=cpu"])
    assert cpu.compare.workers == 2  # the CPU keeps its default


@pytest.mark.parametrize("preset", ["small", "base"])
def test_every_preset_on_four_gpus_runs_four_one_gpu_workers(four_gpus, workspace, capsys, preset):
    """Not only the tiny default: a size preset with no compare.workers of the user's gets one worker per GPU."""
    assert comparison.compose_all([preset], [])[0].compare.workers == 4
    assert "compare.workers: 4  # famlab compare default" in dry_run(capsys, preset)


def test_two_devices_per_job_on_four_gpus_is_two_workers_of_two(four_gpus, workspace, capsys):
    out = dry_run(capsys, "trainer.devices=2")
    assert ("workers: 2 side by side, 2 GPUs each: worker 0 on GPU 0,1, worker 1 on GPU 2,3; 2 devices per job (each "
            "job its own 2-rank DDP world, a child process group of its worker)") in out
    assert "each of a job's 2 rank(s) loads 16 and 16 per micro-batch" in out  # tiny: global batch 32


@pytest.mark.parametrize(("args", "message"), [
    (["compare.workers=3", "trainer.devices=2"], "compare.workers=3 x trainer.devices=2 needs 6 GPUs and 4 are"),
    (["trainer.devices=0,1"], "give a count of devices per job"),
    (["trainer.num_nodes=2"], "famlab compare runs each job on one node"),
    (["trainer.devices=2", "data.batch_size=31"], "data.batch_size=31 is the global batch"),
])
def test_a_placement_the_machine_cannot_give_is_one_line(four_gpus, workspace, capsys, args, message):
    assert cli.main(["compare", "--dry-run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def _counter():
    import multiprocessing as mp

    return mp.get_context("spawn").Value("i", 0)


def _visible(_):
    return os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES")


@pytest.mark.slow
def test_spawned_workers_each_see_their_own_gpu(tmp_path):
    """Through the real worker start (``workers.executor`` -> ``schedule._start_worker``): two processes, GPUs 3, 5."""
    from famlab.experiments.plumbing import workers

    base = types.SimpleNamespace(compare=types.SimpleNamespace(workers=2))
    c = types.SimpleNamespace(base=base, placement=Placement(2, 1, ("3", "5")), started_workers=_counter(),
                              comp_dir=Path(tmp_path))
    pool = workers.executor(2, schedule._start_worker, c)
    try:
        seen = dict(f.result(timeout=120) for f in [pool.submit(_visible, i) for i in range(6)])
    finally:
        pool.shutdown(wait=True)
    assert set(seen.values()) <= {"3", "5"} and len(set(seen.values())) == len(seen)  # one GPU per process
    assert c.started_workers.value == 2  # each worker took the next index as it started
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != "3"  # the comparison's own process is not placed


def test_a_comparison_job_is_placed_named_grouped_and_tagged_on_top_of_the_users_tags(tmp_path):
    """One place makes every job's config (pretraining, fine-tunes, probes): the job's directory and its name, the
    comparison's W&B group, the user's ``wandb.tags`` first and then the job's, each once, and the job's changes."""
    cfg = compose(["gpt", "tiny"], ["wandb.tags=[mine,compare]", "wandb.group=theirs"]).cfg
    job = compare_jobs.job_config(cfg, tmp_path / "gpt-probe-s1", "compare-x", ["gpt", "compare", "probe"],
                                  {"seed": 1, "init": str(tmp_path / "gpt-pretrain-s1")})
    assert (job.run_dir, job.name, job.wandb.group) == (str(tmp_path / "gpt-probe-s1"), "gpt-probe-s1", "compare-x")
    assert list(job.wandb.tags) == ["mine", "compare", "gpt", "probe"]
    assert (job.seed, job.init) == (1, str(tmp_path / "gpt-pretrain-s1"))
    assert list(cfg.wandb.tags) == ["mine", "compare"] and cfg.wandb.group == "theirs"  # the arm's config as it was
