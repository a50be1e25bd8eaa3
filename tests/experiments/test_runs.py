"""End to end: real Lightning runs of each family (tiny preset, a few steps) with real offline W&B runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.steps.init import compose_finetune
from famlab.families import family_defaults

FAMILIES = ("bert", "gpt", "t5")
FAST = ["trainer.max_steps=6", "trainer.log_every_n_steps=2", "trainer.val_check_interval=3",
        "trainer.limit_val_batches=2", "data.batch_size=8", "trainer.progress_bar=false"]


def wandb_records(run_dir: Path) -> list[dict]:
    """The records of the run's offline `.wandb` log, read with wandb's own reader (`wandb leet inspect`)."""
    files = list((run_dir / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(files[0])],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def env(tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("runs")
    monkeypatch_module.setenv("WANDB_DIR", str(root / "wandb-dir"))
    monkeypatch_module.setenv("FAMLAB_CACHE", str(root / "cache"))
    monkeypatch_module.delenv("WANDB_API_KEY", raising=False)
    return root


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def task_csv(env) -> Path:
    """A small 3-class CSV task with its own column names and string labels (no split column)."""
    import random

    words = {"animal": ["dog", "cat", "horse", "bird", "fish"], "colour": ["red", "blue", "green", "white", "black"],
             "motion": ["run", "walk", "swim", "fly", "jump"]}
    rng = random.Random(0)
    lines = ["sentence,topic"]
    for i in range(240):
        topic = list(words)[i % 3]
        lines.append(f"a {' '.join(rng.choices(words[topic], k=4))} thing,{topic}")
    path = env / "task.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def pretrained(env):
    """One tiny pretraining run per family (shared by the tests below)."""
    runs = {}
    for family in FAMILIES:
        run_dir = env / f"pre-{family}"
        args = ["pretrain", family, "tiny", *FAST, "wandb.mode=offline", "wandb.group=e2e", f"run_dir={run_dir}"]
        assert cli.main(args) == 0
        runs[family] = run_dir
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_pretrain_writes_the_run_directory(pretrained, family):
    """config.yaml with provenance, tokenizer.json, checkpoints, metrics.csv, results.json."""
    run_dir = pretrained[family]
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["model"]["family"] == family and cfg["model"]["vocab_size"] > 0
    prov = cfg["provenance"]
    assert prov["tokenizer_hash"] and prov["data_hash"] and prov["versions"]["torch"] and prov["python"]
    assert "commit" in prov["git"] and prov["hardware"]["cpu_count"] >= 1
    assert (run_dir / "tokenizer.json").is_file()
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert any(p.name.startswith("best-") for p in (run_dir / "checkpoints").iterdir())
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss", "val/loss", "val/unigram_loss"} <= set(header)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["steps"] == 6 and results["family"] == family
    assert results["final"]["val/loss"] > 0 and "val/loss" in results["first"]


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_pretrain_writes_a_real_offline_wandb_run(pretrained, family):
    """The offline W&B run has the flattened config, group, job type, tags, and logged history."""
    records = wandb_records(pretrained[family])
    run = next(r["run"] for r in records if r["type"] == "run")
    assert run["run_group"] == "e2e" and run["job_type"] == "pretrain"
    pos = yaml.safe_load((pretrained[family] / "config.yaml").read_text())["model"]["pos"]  # tiny's BERT: rope
    assert {family, family_defaults(family).objective, pos} <= set(run["tags"])
    config = run["config"]["update"]
    assert config["model.family"] == family and config["trainer.max_steps"] == 6
    assert "provenance.tokenizer_hash" in config
    assert not any(isinstance(v, dict) and v and k != "_wandb" for k, v in config.items())  # flat
    later = [r["config"]["update"] for r in records if r["type"] == "config"]
    assert not any(isinstance(v, dict) and v and k != "_wandb" for u in later for k, v in u.items())  # still flat
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    assert any("val/loss" in h for h in history) and any("train/loss" in h for h in history)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_finetune_from_the_pretraining_run(pretrained, env, task_csv, family):
    """A real fine-tune from each family's run: results.json holds the test scores and the majority baseline."""
    run_dir = env / f"ft-{family}"
    args = ["finetune", f"init={pretrained[family]}", "finetune.max_steps=4", "finetune.val_every=2",
            "data.batch_size=16", f"data.task={task_csv}", "data.text_column=sentence", "data.label_column=topic",
            "trainer.progress_bar=false", "wandb.mode=offline", f"run_dir={run_dir}", "finetune.seeds=[0,1]",
            "finetune.dropout=0.2"]
    assert cli.main(args) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert results["family"] == family and results["num_classes"] == 3
    assert sum(results["sizes"].values()) == 240
    assert set(results["seeds"]) == {"0", "1"}
    for scores in results["seeds"].values():
        assert set(scores) == {"test/acc", "test/f1", "test/mcc"}
        assert 0.0 <= scores["test/acc"] <= 1.0 and -1.0 <= scores["test/mcc"] <= 1.0
    accs = [s["test/acc"] for s in results["seeds"].values()]
    assert results["mean"]["test/acc"] == pytest.approx(sum(accs) / 2)
    assert results["majority"]["test/mcc"] == 0.0 and 0.2 < results["majority"]["test/acc"] < 0.5
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    # the run's model, fine-tuned with finetune.dropout in place of its pretraining dropout
    assert cfg["model"] == {**yaml.safe_load((pretrained[family] / "config.yaml").read_text())["model"], "dropout": 0.2}
    # the fine-tune's own config.yaml composes again over its init (its model.dropout is a training setting)
    again, _ = compose_finetune([str(run_dir / "config.yaml")], [f"init={pretrained[family]}", "finetune.dropout=null"])
    assert again.model.dropout == 0.2 and again.model.dim == cfg["model"]["dim"]
    run = next(r["run"] for r in wandb_records(run_dir / "seed-0") if r["type"] == "run")
    assert run["job_type"] == "finetune" and run["config"]["update"]["init"] == str(pretrained[family])


@pytest.mark.slow
def test_finetune_contradicting_override_names_the_keys(pretrained, capsys):
    """A preset/override that contradicts the loaded model config fails with the keys."""
    assert cli.main(["finetune", f"init={pretrained['gpt']}", "model.dim=128", "model.num_layers=2"]) == 2
    err = capsys.readouterr().err
    assert "model.dim=128" in err and "model.num_layers" not in err  # num_layers=2 agrees with the run



def test_finetune_of_a_run_checks_only_the_model_settings_the_user_states(tmp_path):
    """``famlab finetune init=<run>`` with no preset takes the run's size preset for its budget; that preset's model
    settings are not the user's, so a run pretrained with ``model.dim=32`` on ``tiny`` (dim 64) fine-tunes as it is,
    while ``tiny model.dim=64`` named on the command line still contradicts it."""
    from famlab.experiments.configuration.compose import compose, to_plain

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    (run / "tokenizer.json").write_text("{}")
    saved = to_plain(compose(["gpt", "tiny"], ["model.dim=32", "model.vocab_size=2048"]).cfg)
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    cfg, init = compose_finetune([], [f"init={run}"])
    tiny = compose(["gpt", "tiny"], []).cfg
    assert init.kind == "run" and cfg.model.dim == 32 and cfg.finetune.max_steps == tiny.finetune.max_steps
    for stated in (["tiny"], []), ([], ["model.dim=64"]):
        with pytest.raises(ConfigInputError, match="model.dim=64 \\(the model has 32\\)"):
            compose_finetune(stated[0], [*stated[1], f"init={run}"])


def _save_tiny_hf(family: str, tokenizer_file: Path, out: Path) -> None:
    """A tiny randomly initialised HF model + fast tokenizer saved to `out` (no download)."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size(with_added_tokens=True)
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file), pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", bos_token="[BOS]", eos_token="[EOS]",
    )
    if family == "bert":
        config = transformers.BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=128)
        model = transformers.BertForPreTraining(config)
    elif family == "gpt":
        config = transformers.GPT2Config(vocab_size=vocab, n_embd=32, n_layer=1, n_head=2, n_positions=128)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.T5Config(vocab_size=vocab, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_heads=2,
                                       decoder_start_token_id=0, pad_token_id=0)
        model = transformers.T5ForConditionalGeneration(config)
    model.save_pretrained(out)
    tok.save_pretrained(out)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_finetune_from_a_local_hf_model(pretrained, env, task_csv, family):
    """init=hf:<dir> loads HF weights through families.from_hf and the model's own tokenizer."""
    hf_dir = env / f"hf-{family}"
    _save_tiny_hf(family, pretrained[family] / "tokenizer.json", hf_dir)
    run_dir = env / f"ft-hf-{family}"
    args = ["finetune", f"init=hf:{hf_dir}", "finetune.max_steps=2", "data.batch_size=16", "data.max_len=64",
            f"data.task={task_csv}", "data.text_column=sentence", "data.label_column=topic",
            "trainer.progress_bar=false", "wandb.mode=disabled", f"run_dir={run_dir}"]
    assert cli.main(args) == 0
    results = json.loads((run_dir / "results.json").read_text())
    assert results["family"] == family and set(results["seeds"]["0"]) == {"test/acc", "test/f1", "test/mcc"}
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["model"]["dim"] == 32 and cfg["init"] == f"hf:{hf_dir}"


def test_finetune_init_pointing_at_nothing_fails(tmp_path, capsys):
    assert cli.main(["finetune", f"init={tmp_path / 'missing'}"]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert cli.main(["finetune", f"init=hf:{tmp_path / 'nothing-here'}", "wandb.mode=disabled",
                     f"run_dir={tmp_path / 'r'}"]) == 2
    assert "cannot be loaded" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_scores_every_family_on_the_bundled_tasks(pretrained, capsys):
    """famlab eval on the three pretraining runs: results.json per run and task (chance, three normalisations
    with CIs, per-group results, the bigram floor), one table row per model, and an offline W&B eval run that
    names the model's run directory."""
    dirs = [str(pretrained[f]) for f in FAMILIES]
    assert cli.main(["eval", *dirs, "data.eval=wordnet", "limit=30", "wandb.mode=offline"]) == 0
    out = capsys.readouterr().out
    for family in FAMILIES:
        for task, chance, groups in (("wordnet-reverse-dictionary", 0.2, {"noun", "adj"}),
                                     ("wordnet-minimal-pairs", 0.5, {"subject_verb_agreement",
                                                                     "determiner_noun_agreement",
                                                                     "determiner_noun_order"})):
            r = json.loads((pretrained[family] / "eval" / task / "results.json").read_text())
            assert r["family"] == family and r["num_items"] == 30 and r["chance"] == pytest.approx(chance)
            for block in (r, r["bigram"]):
                for norm in ("raw", "per_token", "per_byte"):
                    assert 0 <= block[norm]["low"] <= block[norm]["acc"] <= block[norm]["high"] <= 1
            assert groups <= set(r["groups"]) and sum(g["num_items"] for g in r["groups"].values()) == 30
            assert r["model_run_dir"] == str(pretrained[family].resolve())
            records = wandb_records(pretrained[family] / "eval" / task)
            run = next(rec["run"] for rec in records if rec["type"] == "run")
            assert run["job_type"] == "eval" and run["run_group"] == "e2e"
            assert run["config"]["update"]["model_run_dir"] == r["model_run_dir"]
        assert out.count(f"| pre-{family} | {family} | 30 |") == 2
    assert out.count("| add-k bigram") == 2


@pytest.mark.slow
def test_compare_zero_shot_step_fills_the_report_table_and_the_wandb_report_run(pretrained, tmp_path):
    """compare's zero-shot step on the tiny GPT and BERT runs scores the items (no skip for learned positions); the
    report's table holds the headline accuracies, and the W&B report run logs that table and
    `zero_shot/<task>/<arm>` summary scalars. (test_eval_scores_every_family_on_the_bundled_tasks scores T5.)"""
    arms = ("bert", "gpt")  # each run costs a bigram fit on the corpus: two arms keep the test cheap
    from famlab.experiments.analysis.zeroshot_table import (
        zero_shot_rows,
        zero_shot_section,
        zero_shot_summary,
    )
    from famlab.experiments.configuration.compose import compose
    from famlab.experiments.steps.compare_jobs import zero_shot_scores
    from famlab.experiments.steps.evaluate import BUNDLED
    from famlab.experiments.tracking.wandb_report import log_report_run
    from famlab.objectives.zeroshot import headline

    from tests.experiments.record_helpers import pretrain_record

    scores = {f: zero_shot_scores(pretrained[f], limit=8) for f in arms}
    written = {f: {"zero_shot": {t: r.to_json() for t, r in z.items()}} for f, z in scores.items()}  # as eval.json
    rows = zero_shot_rows({f: [pretrain_record(f, eval=e)] for f, e in written.items()})
    assert set(rows) == {*arms, "chance", "bigram", "length"}
    for f in arms:
        for task in BUNDLED:
            assert rows[f][task] == scores[f][task].accuracy(headline(task)).acc and scores[f][task].num_items == 8
    assert rows["chance"]["wordnet-reverse-dictionary"] == pytest.approx(0.2)
    assert rows["chance"]["wordnet-minimal-pairs"] == pytest.approx(0.5)
    section = zero_shot_section({f: [pretrain_record(f, eval=e)] for f, e in written.items()})
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "report.md").write_text("# comparison\n\n" + "\n".join(section))
    (out / "results.json").write_text(json.dumps({"zero_shot": rows, "wandb_summary": zero_shot_summary(rows)}))
    run_id = log_report_run(compose([], ["wandb.mode=offline"]).cfg.wandb, out, group="zs", name="zs-report")
    recs = [json.loads(line) for line in subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(next((out / "wandb").glob(f"*{run_id}")))],
        capture_output=True, text=True, timeout=120, check=True).stdout.splitlines() if line.strip()]
    summary = {k: v for r in recs if r["type"] == "summary" for k, v in r["summary"].get("update", {}).items()}
    for arm, row in rows.items():
        for column, value in row.items():
            if column != "seeds":
                assert summary[f"zero_shot/{column}/{arm}"] == pytest.approx(value)
    table = next((out / "wandb").glob("offline-run-*/files/media/table/tables/zero_shot_*.table.json"))
    logged = {r[0]: r[1:] for r in json.loads(table.read_text())["data"]}
    first = rows["gpt"][sorted(c for c in rows["gpt"] if c != "seeds")[0]]
    assert str(logged["gpt"][0]).split()[0] == f"{first:.3f}"  # the accuracy (then its CI, where one was stored)
    assert set(logged) == {*arms, "chance", "add-k bigram", "length only (shortest)"}
