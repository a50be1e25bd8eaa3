"""`famlab finetune finetune.mode=probe` reaches the probe through the finetune command's entry (suite.main)."""

from famlab.experiments.commands import cli


def test_finetune_mode_probe_runs_the_probe(tmp_path, capsys):
    """The probe's own check answers (a scratch init has no body to probe): one line, exit 2, no fine-tuning run."""
    code = cli.main(["finetune", "tiny", "init=scratch", "finetune.mode=probe", "data.task=wordnet-supersense",
                     "wandb.mode=disabled", f"run_dir={tmp_path / 'runs'}"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == ("famlab: error: probe: init=scratch has no trained body to probe; give a run directory, "
                           "a checkpoint or hf:<name> (random-init bodies are probed alongside it anyway)")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
