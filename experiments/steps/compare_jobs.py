"""What one job of a comparison does: pretrain an arm's seed (or tune its lr first), evaluate the pretrained model,
probe and fine-tune it on a task, fine-tune a family from scratch; and the comparison's end (:func:`finish`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from famlab.datamodules.tokenizer import TokenizerBundle
from famlab.experiments.analysis.report import build_report
from famlab.experiments.analysis.results import (
    ByteScore,
    FinetuneResult,
    PretrainResult,
    ProbeResult,
    StepFailure,
    ZeroShotResult,
    read_failures,
)
from famlab.experiments.configuration.compare_defaults import visible_gpus
from famlab.experiments.configuration.config import with_values
from famlab.experiments.configuration.placement import devices_per_job
from famlab.experiments.configuration.plans import ComparePlan
from famlab.experiments.plumbing import failures, process_group, workers
from famlab.experiments.plumbing.data_cache import token_ids
from famlab.experiments.plumbing.eval_device import eval_device
from famlab.experiments.plumbing.rundir import CompareDir, RunDir, write_json
from famlab.experiments.steps import compare_suite
from famlab.experiments.steps.compare_dir import log
from famlab.experiments.steps.comparison import STATUS_DIR, Comparison, PretrainedRun, scratch_configs
from famlab.experiments.steps.evaluate import BUNDLED, read_items, score_run
from famlab.experiments.steps.finetune import finetune
from famlab.experiments.steps.init import Init, load_network, parse_init
from famlab.experiments.steps.pretrain import pretrain
from famlab.experiments.steps.probe import probe
from famlab.experiments.tracking.wandb_dashboard import dashboard_step
from famlab.experiments.tracking.wandb_report import log_report_run, pretraining_dirs
from famlab.families.config import ModelConfig
from famlab.objectives.evaluation import byte_score

T = TypeVar("T")


def byte_scores(run_dir: Path, texts: list[str], bundle: TokenizerBundle, *, model: ModelConfig,
                objective: str | None, accelerator: str) -> ByteScore:
    """Bits per byte (GPT, T5) or pseudo-log-likelihood bits per byte (BERT) of the run's ``model`` trained with
    ``objective`` on ``texts`` (validation documents), on the device the run trained on (``trainer.accelerator``,
    :func:`eval_device`)."""
    ckpt = RunDir(run_dir).last_checkpoint
    net, _ = load_network(model, Init("run", run_dir=run_dir, checkpoint=ckpt))
    net.to(eval_device(accelerator)).eval()

    def encode(text: str) -> list[int]:
        return bundle.tokenizer.encode(text, add_special_tokens=False).ids

    score = byte_score(net, texts, encode, token_ids(bundle), objective=objective)
    if score.reason is not None:  # nothing scorable (every text empty or encoding to no tokens): say why
        raise ValueError(f"bits per byte: {score.reason}")
    return ByteScore(measure=score.measure, value=score.value, num_texts=score.num_texts, num_bytes=score.num_bytes,
                     num_skipped=score.num_skipped or None)


def _pretrain_one(
    c: Comparison, arm: str, seed: int, tags: list[str], suffix: str = "", changes: Mapping[str, object] | None = None,
    evaluate: Callable[[Path], ByteScore | None] | None = None,
) -> PretrainedRun:
    """One pretraining run of ``arm`` (its config in ``c.cfgs``, with ``changes``: a tried lr) with ``seed``, in
    ``<arm>-pretrain-s<seed><suffix>/``; read back when a resumed comparison finds it finished."""
    run_dir = c.comp_dir / f"{arm}-pretrain-s{seed}{suffix}"
    run = job_config(c.cfgs[arm], run_dir, c.group, tags, {**(changes or {}), "seed": seed})
    done = RunDir(run_dir)
    if run.resume == "auto" and done.is_finished():  # finished before this comparison was stopped: read back
        return PretrainedRun(PretrainResult.from_json(done.results_data()), run)
    return PretrainedRun(in_job_world(pretrain, run, comp_dir=c.comp_dir, evaluate=evaluate), run)


def job_config(cfg: ComparePlan, run_dir: Path, group: str, tags: list[str], changes: Mapping[str, object]
               ) -> ComparePlan:
    """``cfg`` as one job of the comparison: ``changes`` set, in ``run_dir`` and named after it, in the comparison's
    W&B group, ``tags`` added to ``wandb.tags``."""
    return with_values(cfg, {**changes, "run_dir": str(run_dir), "name": run_dir.name, "wandb.group": group,
                             "wandb.tags": list(dict.fromkeys([*cfg.wandb.tags, *tags]))})


def in_job_world(fn: Callable[..., T], cfg: ComparePlan, *args: object, comp_dir: Path,
                 evaluate: Callable[[Path], ByteScore | None] | None = None) -> T:
    """``fn(job, *args)`` (a step that fits: pretraining or a fine-tune; ``job`` is ``cfg`` given the job's devices)
    on its devices (:mod:`famlab.experiments.configuration.placement`): one device in this process; several as the
    job's own DDP world, a child process group (:mod:`famlab.experiments.plumbing.process_group`), so that Lightning's
    launcher re-runs the job, never ``famlab compare``. ``evaluate`` (scoring while the W&B run is open) runs in this
    process only; a job on several devices is scored afterwards (:func:`evaluate_pretrained`)."""
    k = devices_per_job(cfg.trainer, tuple(visible_gpus(cfg.trainer.accelerator)))
    one_rank_ddp = k == 1 and cfg.trainer.strategy.startswith("ddp")  # a one-rank world has nothing to synchronise
    job = with_values(cfg, {"trainer.devices": k, **({"trainer.strategy": "auto"} if one_rank_ddp else {})})
    if k == 1:
        return fn(job, *args, **({"evaluate": evaluate} if evaluate is not None else {}))
    threads = max(1, workers.cores() // (job.compare.workers * k))
    run = Path(str(job.run_dir)).resolve()  # a suite's tasks hold runs of the same name in folders of their own
    name = "__".join(run.relative_to(comp_dir.resolve()).parts) if run.is_relative_to(comp_dir.resolve()) else run.name
    spec = comp_dir / STATUS_DIR / "groups" / name
    return process_group.run(fn, job, *args, spec=spec, threads=threads, stop_requested=workers.stop_requested)


def arm_tags(c: Comparison, arm: str) -> list[str]:
    """The W&B tags of an arm's runs: its family and objective (which no tuned lr changes), the budget, "compare"."""
    cfg = c.cfgs[arm]
    return [cfg.model.family.value, str(cfg.objective.name), c.budget_tag, "compare"]


def tune_lr(c: Comparison, arm: str) -> tuple[PretrainedRun, ComparePlan]:
    """``compare.lr_grid``: pretrain the first seed at each lr and keep the lr with the lowest final validation
    loss (in ``plan.json``); returns the run at that lr, which stands for the first seed, and the arm's config with
    that lr."""
    cmp = c.base.compare
    tried = []
    for lr in cmp.lr_grid:
        r = c.clock.timed("pretraining", _pretrain_one, c, arm, cmp.pretrain_seeds[0], [*arm_tags(c, arm), "lr-tune"],
                          f"-lr{lr:g}", {"optim.lr": lr, "optim.lr_scale": 1.0})
        tried.append((r.result.final.get("val/loss", float("inf")), lr, r))
        c.clock.progress(f"lr {lr:g} {arm}: val/loss {r.result.final.get('val/loss')}")
    best_loss, best_lr, _ = min(tried, key=lambda t: t[0])
    c.plan.arms[arm].lr_grid = {f"{lr:g}": loss for loss, lr, _ in tried}
    c.plan.arms[arm].lr = best_lr
    log(f"{arm}: pretraining lr {best_lr:g} (val/loss {best_loss:.4f})")
    best = next(r for _, lr, r in tried if lr == best_lr)
    return best, with_values(c.cfgs[arm], {"optim.lr": best_lr, "optim.lr_scale": 1.0})


def pretrain_seed(c: Comparison, arm: str, seed: int) -> PretrainedRun:
    """Pretrain the arm with ``seed``, scoring bits per byte while its W&B run is open (an optional step)."""
    run = c.clock.timed("pretraining", _pretrain_one, c, arm, seed, arm_tags(c, arm),
                        evaluate=lambda run_dir: score_bytes(c, arm, seed, run_dir))
    c.clock.progress(f"pretrain {arm} seed {seed}: val/loss {run.result.final.get('val/loss')}")
    return run


def score_bytes(c: Comparison, arm: str, seed: int, run_dir: Path) -> ByteScore | None:
    """The arm's pretrained model in ``run_dir`` scored for bits per byte on the comparison's validation documents (an
    optional step: a failure is recorded, and None returned)."""
    cfg = c.cfgs[arm]  # its model and objective: what every run of the arm trains (a tuned lr changes neither)
    return failures.optional(c.comp_dir, StepFailure(step="evaluation", arm=arm, seed=seed), c.clock.timed,
                             "evaluation", byte_scores, run_dir, c.bpb_texts, c.bundle, model=cfg.model,
                             objective=cfg.objective.name, accelerator=cfg.trainer.accelerator, say=log)


def evaluate_pretrained(c: Comparison, arm: str, seed: int, run: PretrainedRun) -> None:
    """Bits per byte and the bundled zero-shot tasks of a pretrained model, into its ``eval.json`` (both optional:
    a failure is recorded and the comparison goes on; a resumed comparison retries only failed evaluations)."""
    steps = {"evaluation": "byte_score", "zero-shot": "zero_shot"}
    path = RunDir(run.run_dir).eval_file
    failed = {f.step for f in read_failures(c.comp_dir) if f.arm == arm and f.seed == seed and f.step in steps}
    evaluated = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if path.is_file() and not failed:
        return  # evaluated before this comparison was stopped
    if "byte_score" not in evaluated and not ("evaluation" in failed and not path.is_file()):  # not just failed
        score = run.result.byte_score or score_bytes(c, arm, seed, run.run_dir)
        evaluated["byte_score"] = score.to_json() if score is not None else None
    if "zero_shot" not in evaluated:
        tasks = failures.optional(
            c.comp_dir, StepFailure(step="zero-shot", arm=arm, seed=seed), c.clock.timed, "evaluation",
            zero_shot_scores, run.run_dir, limit=c.base.compare.zero_shot_items, say=log)
        evaluated["zero_shot"] = {t: r.to_json() for t, r in tasks.items()} if tasks is not None else None
    evaluated = {k: v for k, v in evaluated.items() if v is not None}
    for step, key in steps.items():  # a step whose result is kept (an earlier try of it failed) failed no longer
        if key in evaluated:
            failures.clear(c.comp_dir, StepFailure(step=step, arm=arm, seed=seed))
    write_json(path, evaluated)
    if "byte_score" in evaluated:
        log(f"{arm} seed {seed}: {evaluated['byte_score']['measure']} {evaluated['byte_score']['value']:.4f}")


def transfer_to(
    c: Comparison, task: compare_suite.SuiteTask | None, arm: str, seed: int, run: PretrainedRun, tags: list[str]
) -> None:
    """Probe (``compare.probe``, optional) and fine-tune (``compare.seeds``) one pretrained model on one task."""
    cmp = c.base.compare
    where, on = _task_place(c.comp_dir, task), _task_tag(task)
    on_task = {**compare_suite.task_values(task), "init": str(run.run_dir)}
    if cmp.probe:
        probe_dir = where / f"{arm}-probe-s{seed}"
        done = read_done(probe_dir)
        job = job_config(run.cfg, probe_dir, c.group, [*tags, *on, "probe"], on_task)
        r = done if isinstance(done, ProbeResult) else failures.optional(
            c.comp_dir, StepFailure(step="probe", arm=arm, seed=seed, task=task.spec.name if task else None),
            c.clock.timed, "probes", _probe, job, say=log)
        result = (f"test/acc {r.pretrained.test['test/acc']:.3f} vs random-init "
                  f"{r.random_mean['test/acc']:.3f}" if r is not None else "failed")
        c.clock.progress(f"probe {arm}{_task_note(task)} (pretrained seed {seed}): {result}")
    if cmp.seeds:
        job = job_config(run.cfg, where / f"{arm}-ft-s{seed}", c.group, [*tags, *on],
                         {**on_task, "finetune.seeds": list(cmp.seeds)})
        ft = c.clock.timed("fine-tuning", _finetune, job, c.comp_dir)
        c.clock.progress(f"fine-tune {arm}{_task_note(task)} (pretrained seed {seed}) seeds {list(cmp.seeds)}: "
                         f"test/acc {ft.mean['test/acc']:.3f}")


def read_done(run_dir: Path) -> PretrainResult | FinetuneResult | ProbeResult | None:
    """A finished run's ``results.json`` (a resumed comparison reads it back instead of running it again)."""
    done = RunDir(run_dir)
    return done.results() if done.is_finished() else None


def scratch_baseline(c: Comparison, family: str, task: compare_suite.SuiteTask | None) -> None:
    """Fine-tune the family's network from scratch on ``task`` (``compare.scratch_seeds``): the network of the
    family's first arm (:func:`~famlab.experiments.steps.comparison.scratch_configs`)."""
    cmp = c.base.compare
    cfg = scratch_configs(c.cfgs)[family]
    # the objective tag only where it is the family's single (preset) objective, as before arms existed
    objective_tag = [] if cmp.objectives else [str(cfg.objective.name)]
    seeds = list(cmp.scratch_seeds or ())
    job = job_config(cfg, _task_place(c.comp_dir, task) / f"{family}-scratch", c.group,
                     [family, *objective_tag, c.budget_tag, "compare", "scratch", *_task_tag(task)],
                     {**compare_suite.task_values(task), "init": "scratch", "finetune.seeds": seeds})
    ft = c.clock.timed("fine-tuning", _finetune, job, c.comp_dir)
    c.clock.progress(f"fine-tune {family} from scratch{_task_note(task)} seeds {seeds}: "
                     f"test/acc {ft.mean['test/acc']:.3f}")


def finish(c: Comparison, presets: list[str], overrides: list[str]) -> None:
    """``compare.json`` (wall time, and the jobs' time per phase summed over workers), the report and its W&B run."""
    wall = time.time() - c.clock.started
    n = c.base.compare.workers
    CompareDir(c.comp_dir).compare_file.write_text(
        json.dumps({"wall_s": round(wall, 1), "phases": {k: round(v, 1) for k, v in c.clock.phases.items()},
                    "workers": n, "threads": workers.threads_per_worker(n) if n > 1 else None,
                    "presets": presets, "overrides": overrides}, indent=2) + "\n"
    )
    build_report([c.comp_dir], c.comp_dir)
    failures.optional(c.comp_dir, StepFailure(step="W&B report"), log_report_run, c.base.wandb, c.comp_dir,
                      group=c.group, name=f"{c.comp_dir.name}-report", sources=pretraining_dirs(c.comp_dir), say=log)
    failures.optional(c.comp_dir, StepFailure(step="W&B dashboard"), dashboard_step, c.base.wandb, c.comp_dir, say=log)
    log(f"done in {time.time() - c.clock.started:.0f} s: {CompareDir(c.comp_dir).report_file}")


def _task_place(comp_dir: Path, task: compare_suite.SuiteTask | None) -> Path:
    """Where a task's fine-tunes and probes go: the compare directory (one task) or the task's folder."""
    return comp_dir if task is None else task.dir


def _task_tag(task: compare_suite.SuiteTask | None) -> list[str]:
    return [] if task is None else [f"task-{task.spec.name}"]


def _task_note(task: compare_suite.SuiteTask | None) -> str:
    return "" if task is None else f" on {task.spec.name}"


def _finetune(job: ComparePlan, comp_dir: Path) -> FinetuneResult:
    """A fine-tuning job (:func:`job_config`), read back when it finished before a stop, as pretraining and probes
    are (the comparison's settings were checked when it resumed; its paths may be another cwd's)."""
    done = read_done(Path(str(job.run_dir)))
    if isinstance(done, FinetuneResult):
        return done
    return in_job_world(finetune, job, parse_init(str(job.init)), comp_dir=comp_dir)


def _probe(job: ComparePlan) -> ProbeResult:
    """A probing job (:func:`job_config`)."""
    return probe(job, parse_init(str(job.init)))


def zero_shot_scores(run_dir: Path, limit: int | None = None) -> dict[str, ZeroShotResult]:
    """Both bundled tasks for one pretraining run: {task: results} (as ``famlab eval`` writes them)."""
    tasks = {name: read_items(path)[:limit] for name, path in BUNDLED.items()}
    return score_run(run_dir, tasks)
