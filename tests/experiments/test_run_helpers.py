"""Run-assembly helpers: W&B mode resolution, run directories, provenance, cache location."""

import re

import pytest
from famlab.experiments.configuration.compose import compose
from famlab.experiments.configuration.config import CompareMatch, ConfigInputError
from famlab.experiments.plumbing.data_cache import cache_dir
from famlab.experiments.plumbing.provenance import provenance
from famlab.experiments.plumbing.rundir import make_run_dir, pretrain_run_name, task_run_name
from famlab.experiments.tracking.wandb_guard import wandb_mode


def test_wandb_auto_mode_follows_credentials(monkeypatch, tmp_path):
    """auto -> offline without credentials, online with WANDB_API_KEY or a ~/.netrc entry for api.wandb.ai."""
    cfg = compose(["gpt", "tiny"], ["wandb.mode=auto"]).cfg
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert wandb_mode(cfg.wandb) == "offline"
    (tmp_path / "netrc").write_text("machine api.wandb.ai\n  login user\n  password x\n")
    assert wandb_mode(cfg.wandb) == "online"
    (tmp_path / "netrc").write_text("machine example.com\n")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode(cfg.wandb) == "online"
    assert wandb_mode(compose(["gpt"], ["wandb.mode=disabled"]).cfg.wandb) == "disabled"


def test_default_run_dir_is_readable_and_timestamped(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    cfg = compose(["t5", "tiny"], []).cfg
    name = pretrain_run_name(cfg.name, cfg.model.family.value, str(cfg.objective.name), cfg.size)
    assert name == "t5-span-tiny"
    path = make_run_dir(cfg.run_dir, cfg.resume, name)
    assert re.fullmatch(r"t5-span-tiny-\d{8}-\d{6}", path.name) and path.parent.name == "runs"
    assert make_run_dir(cfg.run_dir, cfg.resume, name) != path  # rerunning never collides


def test_a_probe_and_a_fine_tune_are_named_after_their_task_not_the_pretraining_run():
    assert pretrain_run_name(None, "gpt", "clm", "tiny") == "gpt-clm-tiny"
    assert pretrain_run_name(None, "gpt", "clm", None) == "gpt-clm-custom"
    assert task_run_name(None, "gpt", "finetune", "tasks/wordnet-pairs.jsonl") == "gpt-ft-wordnet-pairs"
    assert task_run_name(None, "gpt", "probe", "wordnet-pairs") == "gpt-probe-wordnet-pairs"
    assert task_run_name(None, "gpt", "probe", "glue:sst2") == "gpt-probe-glue-sst2"
    assert task_run_name("mine", "gpt", "probe", "wordnet-pairs") == "mine"
    assert pretrain_run_name("mine", "gpt", "clm", "tiny") == "mine"


def test_explicit_nonempty_run_dir_without_resume_fails(tmp_path):
    (tmp_path / "config.yaml").write_text("x: 1\n")
    cfg = compose(["gpt"], [f"run_dir={tmp_path}"]).cfg
    with pytest.raises(ConfigInputError, match="exists and is not empty"):
        make_run_dir(cfg.run_dir, cfg.resume, "x")


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "env"))
    assert cache_dir(compose(["gpt"], []).cfg.data) == tmp_path / "env"
    assert cache_dir(compose(["gpt"], [f"data.cache_dir={tmp_path / 'cfg'}"]).cfg.data) == tmp_path / "cfg"
    monkeypatch.delenv("FAMLAB_CACHE")
    assert cache_dir(compose(["gpt"], []).cfg.data).parts[-2:] == (".cache", "famlab")


def test_provenance_records_versions_git_and_hashes():
    prov = provenance(tokenizer_hash="abc", data_hash="def")
    assert prov["tokenizer_hash"] == "abc" and prov["data_hash"] == "def"
    assert prov["versions"]["torch"] and prov["versions"]["lightning"] and prov["python"].count(".") == 2
    assert set(prov["git"]) == {"commit", "dirty"} and prov["hardware"]["cpu_count"] >= 1


def test_csv_logger_keeps_metrics_and_does_not_claim_to_delete(tmp_path):
    """A fresh run's directory already holds config.yaml: no "will be deleted" warning; an existing metrics.csv
    (a resumed run) is kept and appended to."""
    import warnings

    from famlab.experiments.plumbing.loggers import make_loggers

    (tmp_path / "config.yaml").write_text("x: 1\n")
    (tmp_path / "metrics.csv").write_text("step,train/loss\n0,1.5\n")
    cfg = compose(["gpt"], ["wandb.mode=disabled"]).cfg
    (csv,) = make_loggers(cfg.wandb, tmp_path, job_type="pretrain", name="x", config={}, tags=[], resume="auto",
                          match=CompareMatch.flops)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        csv.log_metrics({"train/loss": 1.25}, step=1)
        csv.save()
    assert not [w for w in caught if "will be deleted" in str(w.message)]
    assert (tmp_path / "metrics.csv").read_text().splitlines() == ["step,train/loss", "0,1.5", "1,1.25"]
    assert (tmp_path / "config.yaml").read_text() == "x: 1\n"
