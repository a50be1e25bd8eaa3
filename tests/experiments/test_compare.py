"""A tiny real comparison run twice (the second in two workers, from a prepared directory): same seeds give the same
table (except time columns); budgets match."""

import json
import random
import shutil
from pathlib import Path

import famlab.experiments
import pytest
import yaml
from famlab.experiments.analysis.report import TIME_COLUMNS
from famlab.experiments.commands import cli
from famlab.experiments.commands import prepare as prepare_command


def tiny_inputs(root: Path) -> list[str]:
    """A small corpus and a 3-class task (own files, so the test trains its own small tokenizer quickly)."""
    rng = random.Random(0)
    words = {"animal": ["dog", "cat", "horse", "bird", "fish", "cow"], "colour": ["red", "blue", "green", "white"],
             "motion": ["run", "walk", "swim", "fly", "jump"]}
    docs = [" ".join(rng.choices(sum(words.values(), []), k=30)) for _ in range(400)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n")
    lines = ["sentence,topic,split"]
    for i in range(300):
        topic = list(words)[i % 3]
        split = (["train"] * 8 + ["val", "test"])[i % 10]
        lines.append(f"a {' '.join(rng.choices(words[topic], k=4))} thing,{topic},{split}")
    (root / "task.csv").write_text("\n".join(lines) + "\n")
    return [f"data.corpus={root / 'corpus.txt'}", f"data.task={root / 'task.csv'}", "data.text_column=sentence",
            "data.label_column=topic", "data.tokenizer.vocab_size=300", "data.tokenizer.num_sentinels=20",
            "data.seq_len=32", "data.batch_size=8",
            "data.max_len=32", "model.dim=32", "trainer.max_steps=12", "trainer.val_check_interval=6",
            "trainer.limit_val_batches=2", "finetune.max_steps=6", "finetune.val_every=3", "compare.task_limit=None",
            "compare.seeds=[0,1]", "wandb.mode=disabled", "trainer.progress_bar=false", "finetune.probe_seeds=[0,1,2]",
            "compare.workers=1"]


def run_compare(root: Path, *extra: str) -> Path:
    before = set((root / "runs").glob("compare-*")) if (root / "runs").exists() else set()
    assert cli.main(["compare", *tiny_inputs(root), *extra]) == 0
    (new,) = set((root / "runs").glob("compare-*")) - before
    return new


def compare_in_tmp(tmp_path_factory, name: str, *extra: str) -> Path:
    """One comparison run in a fresh directory of its own (cwd and FAMLAB_CACHE), for module fixtures."""
    root = tmp_path_factory.mktemp(name)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        return run_compare(root, *extra)


def strip_time_columns(table: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]
    drop = {i for i, name in enumerate(rows[0]) if name in TIME_COLUMNS}
    return [[c for i, c in enumerate(r) if i not in drop] for r in rows]


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("FAMLAB_CACHE", str(root / "cache"))
        grid = ["compare.families=[bert,gpt,t5]", "trainer.max_steps=30", "finetune.lr_grid=[1e-3,3e-3]"]
        first = run_compare(root, *grid)
        # the same jobs in two worker processes, from a `famlab prepare` directory whose raw text is gone
        shutil.copy(root / "corpus.txt", root / "raw.txt")
        assert prepare_command.main([], ["data.corpus=raw.txt", f"run_dir={root / 'prepared'}",
                                         *[o for o in tiny_inputs(root) if o.startswith("data.tokenizer.")]], []) == 0
        (root / "raw.txt").unlink()
        second = run_compare(root, *grid, "compare.workers=2", f"data.corpus={root / 'prepared'}")
    return first, second


@pytest.mark.slow
def test_same_seeds_reproduce_every_column_but_time(twice):
    """In one process or in two workers of one thread each (compare.workers=2): the jobs, their configs and their
    seeds are the same, and so are the results."""
    a, b = (json.loads((d / "results.json").read_text()) for d in twice)
    for name in ("pretrain", "finetune", "gains", "probe"):
        assert strip_time_columns(a["tables"][name]) == strip_time_columns(b["tables"][name])
    assert a["significance"] == b["significance"]
    pre = strip_time_columns(a["tables"]["pretrain"])
    assert [r[0] for r in pre[2:]] == ["bert", "gpt", "t5"]  # one row per family


@pytest.mark.slow
def test_flops_budget_is_matched_within_two_percent(twice):
    plan = json.loads((twice[0] / "plan.json").read_text())
    flops = {f: p["flops"] for f, p in plan["families"].items()}
    assert max(flops.values()) / min(flops.values()) - 1 <= 0.02
    logged = {json.loads((twice[0] / f"{f}-pretrain-s0" / "results.json").read_text())["budget"]["flops"]
              for f in flops}
    assert logged == set(flops.values())  # what the runs logged as budget/flops is the plan
    from famlab.experiments.analysis.report import read_metrics

    for family, p in plan["families"].items():  # the last validation is at the end of each family's budget
        rows = read_metrics(twice[0] / f"{family}-pretrain-s0" / "metrics.csv")
        val_steps = [r["step"] for r in rows if "val/loss" in r]
        assert val_steps[-1] == p["steps"] - 1, (family, val_steps)


@pytest.mark.slow
def test_runs_share_the_group_tokenizer_and_tags(twice):
    comp = twice[0]
    runs = [p for p in comp.iterdir() if (p / "config.yaml").is_file()]
    assert len(runs) == 12  # 3 families x (pretrain, probe, fine-tune, scratch)
    cfgs = [yaml.safe_load((p / "config.yaml").read_text()) for p in runs]
    assert {c["wandb"]["group"] for c in cfgs} == {comp.name}  # name + timestamp: one group per invocation
    assert {c["data"]["tokenizer"]["path"] for c in cfgs} == {str((comp / "tokenizer.json").resolve())}
    assert all({c["model"]["family"], "budget-flops"} <= set(c["wandb"]["tags"]) for c in cfgs)
    ft = json.loads((comp / "gpt-ft-s0" / "results.json").read_text())
    assert set(ft["seeds"]) == {"0", "1"}


@pytest.mark.slow
def test_report_states_what_pretraining_bought_and_rebuilds_the_same(twice, tmp_path):
    """Gain and probe tables with one row per family, the gain plot, the protocol and the wall-time split; the
    tables rebuilt by `famlab report` from the stored run directories are the same."""
    comp = twice[0]
    md = (comp / "report.md").read_text()
    results = json.loads((comp / "results.json").read_text())
    for table in ("gains", "probe"):
        rows = strip_time_columns(results["tables"][table])
        assert [r[0] for r in rows[2:]] == ["bert", "gpt", "t5"], table
    assert (comp / "pretraining_gain.png").stat().st_size > 10_000 and "pretraining_gain.png" in md
    assert "same grid of (body lr, head lr): (body 0.001, head 0.01), (body 0.003, head 0.03)" in md
    assert "the test split is read once" in md and "Wall time" in md and "pretraining" in results["wall"]["phases"]
    ft = json.loads((comp / "gpt-ft-s0" / "results.json").read_text())
    chosen = max(ft["grid"], key=lambda g: g["val_mean"])  # the selected point is the best on validation
    assert ft["selected"] == {"lr": chosen["lr"], "head_lr": chosen["head_lr"]}
    # the default selects on seed 0 (finetune.select_seeds=1): seed 1 trains at the selected point only
    assert len(ft["grid"]) == 2 and [set(g["val"]) for g in ft["grid"]].count({"0"}) == 1
    assert set(chosen["val"]) == {"0", "1"} and "of seed 0 (finetune.select_seeds=1" in ft["selection"]
    unselected = [g for g in ft["grid"] if g["lr"] != chosen["lr"]][0]
    assert not list((comp / "gpt-ft-s0" / f"lr{unselected['lr']:g}-head{unselected['head_lr']:g}").rglob("*.ckpt"))
    assert cli.main(["report", str(comp), f"--out={tmp_path}"]) == 0
    again = json.loads((tmp_path / "results.json").read_text())
    assert again["tables"] == results["tables"] and again["gains"] == results["gains"]


@pytest.mark.slow
def test_lr_grid_keeps_the_lr_with_the_lowest_validation_loss(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    comp = run_compare(tmp_path, "compare.families=[gpt]", "compare.lr_grid=[1e-4,3e-3]", "compare.seeds=[0]",
                       "compare.scratch_seeds=[]", "compare.pretrain_seeds=[0,1]", "compare.workers=2")
    plan = json.loads((comp / "plan.json").read_text())["families"]["gpt"]
    losses = {float(k): v for k, v in plan["lr_grid"].items()}
    assert plan["lr"] == min(losses, key=losses.get)
    # the second pretraining seed waits for the first, in another worker process, and runs at the chosen lr
    second = yaml.safe_load((comp / "gpt-pretrain-s1" / "config.yaml").read_text())
    assert (second["optim"]["lr"], second["optim"]["lr_scale"]) == (plan["lr"], 1.0) and second["seed"] == 1
    results = json.loads((comp / "results.json").read_text())["families"]["gpt"]
    seed1 = json.loads((comp / "gpt-pretrain-s1" / "results.json").read_text())["final"]["val/loss"]
    assert results["lr"] == pytest.approx(plan["lr"])
    assert results["val_loss"] == pytest.approx((min(losses.values()) + seed1) / 2)  # the mean over both seeds
    ft = yaml.safe_load((comp / "gpt-ft-s0" / "config.yaml").read_text())
    assert ft["init"].endswith(f"gpt-pretrain-s0-lr{plan['lr']:g}")  # fine-tuned from the chosen run


# --- compare.objectives: objectives as a comparison axis (arms = family x objective) ---------------------------

def test_arms_are_family_major_and_a_family_without_objective_keeps_its_preset():
    from famlab.experiments.steps.comparison import expand_arms

    arms, kept = expand_arms(["gpt", "t5"], ["span", "prefix_lm"])
    assert arms == [("gpt", "span"), ("gpt", "prefix_lm"), ("t5", "span"), ("t5", "prefix_lm")] and kept == []
    arms, kept = expand_arms(["bert", "gpt", "t5"], ["mlm", "span_mlm", "clm"])
    assert arms == [("bert", "mlm"), ("bert", "span_mlm"), ("gpt", "clm"), ("t5", None)] and kept == ["t5"]
    arms, _ = expand_arms(["gpt", "t5"], ["t5:ul2", "clm"])  # family:objective reaches that family only
    assert arms == [("gpt", "clm"), ("t5", "ul2")]
    assert expand_arms(["bert", "gpt"], []) == ([("bert", None), ("gpt", None)], [])


@pytest.mark.parametrize(
    ("families", "objectives", "problem"),
    [
        ("[gpt,t5]", "[foo]", "'foo' is not an objective"),
        ("[gpt,t5]", "[gpt:mlm]", "'gpt:mlm' is not a valid pair"),
        ("[gpt,t5]", "[mlm]", "no family in compare.families=['gpt', 't5'] can train 'mlm'"),
        ("[gpt]", "[t5:span]", "'t5:span' names 't5', which is not in compare.families=['gpt']"),
        ("[gpt,t5]", "[span,span]", "'span' repeats gpt:span"),
        ("[gpt,t5]", "[span,t5:span]", "'t5:span' repeats t5:span"),
        ("[gpt,t5]", "[gpt:span:x]", "cannot parse 'gpt:span:x'"),
    ],
)
def test_bad_compare_objectives_fail_with_one_line_naming_the_key(tmp_path, capsys, families, objectives, problem):
    args = ["compare", *tiny_inputs(tmp_path), f"compare.families={families}", f"compare.objectives={objectives}"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("famlab: error: compare.objectives: "), err
    assert problem in err and "valid pairs: bert x mlm" in err, err
    assert not (tmp_path / "runs").exists()  # refused before anything ran


def test_a_named_preset_keeps_its_keys_over_the_tiny_comparisons_defaults():
    """``famlab compare cpu``: cpu.yaml's trainer.max_steps and fine-tuning protocol win over the tiny defaults; the
    other defaults stay."""
    from famlab.experiments.configuration.compare_defaults import TINY_DEFAULTS
    from famlab.experiments.steps.comparison import compose_all

    default = dict(d.split("=", 1) for d in TINY_DEFAULTS)
    base, cfgs = compose_all(["cpu"], [])
    cpu = yaml.safe_load((Path(famlab.experiments.__file__).parent / "configs" / "cpu.yaml").read_text())
    assert base.trainer.max_steps == cpu["trainer"]["max_steps"] != int(default["trainer.max_steps"])
    assert base.finetune.max_steps == cpu["finetune"]["max_steps"] != int(default["finetune.max_steps"])
    assert base.finetune.select_seeds is None and default["finetune.select_seeds"] == "1"
    assert base.compare.task_limit == int(default["compare.task_limit"]) and base.size == "tiny"
    assert all(c.trainer.max_steps == cpu["trainer"]["max_steps"] for c in cfgs.values())
    over, _ = compose_all(["cpu"], ["trainer.max_steps=7"])  # the command line still wins over both
    assert over.trainer.max_steps == 7


def test_compose_all_builds_one_config_per_arm(capsys):
    from famlab.experiments.steps.comparison import compose_all

    _, cfgs = compose_all([], ["compare.families=[bert,gpt,t5]", "compare.objectives=[mlm,span_mlm,gpt:prefix_lm]"])
    assert {a: c.objective.name for a, c in cfgs.items()} == {
        "bert-mlm": "mlm", "bert-span_mlm": "span_mlm", "gpt-prefix_lm": "prefix_lm", "t5-span": "span"}
    assert [c.model.family.value for c in cfgs.values()] == ["bert", "bert", "gpt", "t5"]
    assert cfgs["bert-mlm"].optim.lr == 1e-4 and cfgs["gpt-prefix_lm"].optim.lr == 6e-4  # own presets
    assert "gives no objective to t5: kept the preset objective" in capsys.readouterr().out
    _, plain = compose_all([], ["compare.families=[gpt,t5]"])  # no compare.objectives: arms are the families
    assert {a: c.objective.name for a, c in plain.items()} == {"gpt": "clm", "t5": "span"}


def _ids(vocab_size: int = 2048, sentinels: int = 100):
    from famlab.objectives import TokenIds

    names = ("pad", "unk", "cls", "sep", "mask", "bos", "eos", "r", "x", "s")
    return TokenIds(vocab_size=vocab_size, sentinel_ids=range(vocab_size - 1, vocab_size - 1 - sentinels, -1),
                    **{n: i for i, n in enumerate(names)})


@pytest.mark.parametrize("match", ["flops", "tokens"])
def test_budget_is_matched_across_arms_from_each_arms_own_batch_shape(match):
    from famlab.experiments.configuration.budget import relative_spread
    from famlab.experiments.plumbing.data_cache import with_vocab
    from famlab.experiments.steps.compare_budget import plan_budget
    from famlab.experiments.steps.comparison import compose_all

    base, cfgs = compose_all([], ["compare.families=[gpt,t5]", "compare.objectives=[clm,span,prefix_lm]",
                                  f"compare.match={match}", "trainer.max_steps=300"])
    sized = {arm: with_vocab(cfg, 2048) for arm, cfg in cfgs.items()}
    plan, cfgs = plan_budget(base.compare, base.trainer, base.data, sized, _ids())
    arms = plan.arms
    assert list(arms) == ["gpt-clm", "gpt-span", "gpt-prefix_lm", "t5-span", "t5-prefix_lm"]
    assert {a: (p.family, p.objective) for a, p in arms.items()} == {
        a: (c.model.family.value, c.objective.name) for a, c in cfgs.items()}
    key = {"flops": "flops", "tokens": "corpus_tokens"}[match]
    totals = {a: float(getattr(p, key)) for a, p in arms.items()}
    assert relative_spread(totals) <= base.compare.tolerance and plan.achieved_spread == relative_spread(totals)
    for a, p in arms.items():  # the configs train the planned steps, and steps x per-step cost is the total
        assert cfgs[a].trainer.max_steps == p.steps and getattr(p, key) == p.steps * getattr(p, f"{key}_per_step")
    # T5's span and prefix-LM batches differ in encoder / decoder lengths: the per-step cost is the arm's own
    assert arms["t5-span"].batch_shape != arms["t5-prefix_lm"].batch_shape
    if match == "flops":
        assert arms["t5-span"].flops_per_step != arms["t5-prefix_lm"].flops_per_step
        assert arms["t5-span"].steps != arms["t5-prefix_lm"].steps


@pytest.fixture(scope="module")
def crossed(tmp_path_factory):
    """A tiny comparison of gpt and t5, each pretrained with span corruption and with prefix LM."""
    return compare_in_tmp(tmp_path_factory, "crossed", "compare.families=[gpt,t5]",
                          "compare.objectives=[span,prefix_lm]", "trainer.max_steps=50",
                          "trainer.val_check_interval=25", "compare.seeds=[0]", "compare.scratch_seeds=[0]",
                          "finetune.max_steps=4", "finetune.val_every=2")


ARMS = {"gpt-span": ("gpt", "span"), "gpt-prefix_lm": ("gpt", "prefix_lm"), "t5-span": ("t5", "span"),
        "t5-prefix_lm": ("t5", "prefix_lm")}


@pytest.mark.slow
def test_objectives_axis_end_to_end_one_report_row_per_arm(crossed, capsys):
    import math

    runs = sorted(p.name for p in crossed.iterdir() if (p / "config.yaml").is_file())
    per_arm = [f"{a}-{kind}-s0" for a in ARMS for kind in ("pretrain", "ft", "probe")]
    assert runs == sorted([*per_arm, "gpt-scratch", "t5-scratch"])  # the scratch baseline once per family
    plan = json.loads((crossed / "plan.json").read_text())
    assert {a: (p["family"], p["objective"]) for a, p in plan["families"].items()} == ARMS
    logged = {a: json.loads((crossed / f"{a}-pretrain-s0" / "results.json").read_text())["budget"]["flops"]
              for a in ARMS}
    assert max(logged.values()) / min(logged.values()) - 1 <= plan["tolerance"]
    for arm, (family, objective) in ARMS.items():
        for run in (f"{arm}-pretrain-s0", f"{arm}-ft-s0"):
            cfg = yaml.safe_load((crossed / run / "config.yaml").read_text())
            assert (cfg["model"]["family"], cfg["objective"]["name"]) == (family, objective)
            assert {family, objective, "budget-flops"} <= set(cfg["wandb"]["tags"])
    results = json.loads((crossed / "results.json").read_text())
    rows = results["families"]
    assert list(rows) == list(ARMS)
    for arm, (family, objective) in ARMS.items():
        assert (rows[arm]["family"], rows[arm]["objective"]) == (family, objective)
        assert math.isfinite(rows[arm]["bits_per_byte"]) and rows[arm]["bits_per_byte"] > 0
        assert "pll_bits_per_byte" not in rows[arm]
    pre = strip_time_columns(results["tables"]["pretrain"])
    causal, span = pre[0].index("causal bits/byte"), pre[0].index("one-span bits/byte")
    assert [tuple(r[:2]) for r in pre[2:]] == list(ARMS.values())  # one row per arm: family, objective
    for r in pre[2:]:  # each arm's figure sits in the column of the rule that scored it, the other cell empty
        scored, empty = (span, causal) if r[1] == "span" else (causal, span)
        assert math.isfinite(float(r[scored])) and r[empty] == "-"
    ft = [line.split("|")[1].strip() for line in results["tables"]["finetune"].splitlines()[2:]]
    assert ft[:6] == ["gpt-span pretrained", "gpt-prefix_lm pretrained", "gpt scratch",
                      "t5-span pretrained", "t5-prefix_lm pretrained", "t5 scratch"]
    # `famlab report` rebuilds the same tables from the run directories (arms from plan.json)
    (crossed / "results.json").unlink()
    assert cli.main(["report", str(crossed)]) == 0
    assert json.loads((crossed / "results.json").read_text())["tables"] == results["tables"]
    assert "between arms (family x objective)" in capsys.readouterr().out
