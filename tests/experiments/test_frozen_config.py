"""A composed config is frozen: no step changes it after validation. A step that needs a variant (an arm's budget,
a job's run directory, the tokenizer's vocabulary in the model section) builds one with ``with_values``, which
leaves the original as it was and runs the changed sections' own checks."""

from __future__ import annotations

import dataclasses

import pytest
from famlab.experiments.configuration.compose import compose
from famlab.experiments.configuration.config import with_values


def _sections(section: object) -> list[object]:
    """``section`` and every settings section below it (the model section is the block library's ``ModelConfig``)."""
    below = [getattr(section, f.name) for f in dataclasses.fields(section) if f.name != "model"]  # type: ignore[arg-type]
    return [section, *(s for value in below if dataclasses.is_dataclass(value) for s in _sections(value))]


def test_every_section_of_a_composed_config_refuses_an_assignment():
    cfg = compose(["gpt", "tiny"], []).cfg
    sections = _sections(cfg)
    assert len(sections) == 10  # Config, its eight settings sections and data.tokenizer
    for section in sections:
        field = dataclasses.fields(section)[0].name  # type: ignore[arg-type]
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(section, field, getattr(section, field))


def test_with_values_builds_a_new_config_and_leaves_the_original():
    cfg = compose(["gpt", "tiny"], []).cfg
    before = compose(["gpt", "tiny"], []).cfg
    arm = with_values(cfg, {"trainer.max_steps": 7, "optim.warmup_steps": 2, "data.tokenizer.path": "t.json",
                            "seed": 3})
    assert (arm.trainer.max_steps, arm.optim.warmup_steps, arm.data.tokenizer.path, arm.seed) == (7, 2, "t.json", 3)
    assert cfg == before  # the original is untouched, nested sections included
    assert arm.model is cfg.model and arm.wandb is cfg.wandb  # sections not named are shared, not copied
    assert arm.trainer.val_check_interval == cfg.trainer.val_check_interval  # keys not named keep their values


def test_with_values_runs_the_changed_sections_checks():
    cfg = compose(["gpt", "tiny"], []).cfg
    with pytest.raises(ValueError, match=r"seed=-1 must be in \[0, 4294967295\]"):
        with_values(cfg, {"seed": -1})
    with pytest.raises(TypeError, match="no_such_key"):
        with_values(cfg, {"trainer.no_such_key": 1})


def test_a_requeued_comparison_job_reads_resume_auto_in_every_config():
    """A job requeued by submitit (a timeout or a preemption) runs again with ``resume=auto`` in the comparison's,
    the arms', its own and its pretrained run's config, built anew: the comparison it was handed stays as it was."""
    from pathlib import Path

    from famlab.experiments.steps.comparison import Comparison, PretrainedRun
    from famlab.experiments.steps.schedule import Job, resume_everywhere

    cfg = compose(["gpt", "tiny"], []).cfg
    tuned = with_values(cfg, {"optim.lr": 0.002})
    c = Comparison(base=cfg, cfgs={"gpt": cfg}, comp_dir=Path("cmp"), bpb_texts=[], bundle=None, suite=[None],
                   plan=None, clock=None)  # type: ignore[arg-type]  # what resume_everywhere does not read
    job = Job("transfer", "gpt", run=PretrainedRun(result=None, cfg=cfg), cfg=tuned)  # type: ignore[arg-type]
    requeued, requeued_job = resume_everywhere(c, job)
    assert requeued_job.run is not None and requeued_job.cfg is not None
    configs = [requeued.base, *requeued.cfgs.values(), requeued_job.cfg, requeued_job.run.cfg]
    assert [c.resume for c in configs] == ["auto"] * 4
    assert requeued_job.cfg.optim.lr == 0.002 and (requeued.comp_dir, requeued_job.kind) == (Path("cmp"), "transfer")
    assert cfg.resume == tuned.resume == "never"
