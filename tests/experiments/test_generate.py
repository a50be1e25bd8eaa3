"""`famlab generate` / `famlab fill` on real (tiny, untrained) run directories of every family x objective."""

import shutil

import pytest
import torch
import yaml
from famlab.experiments.commands.cli import main
from famlab.experiments.steps.generate import _spans, fill_text, generate_text, load_run
from famlab.families import ModelConfig, build_network
from famlab.objectives.prefix import prefix_lm_mask

OPTS = {"max_new_tokens": 6, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0}
PAIRS = [
    ("bert", "mlm"),
    ("bert", "span_mlm"),
    ("gpt", "clm"),
    ("gpt", "prefix_lm"),
    ("gpt", "span"),
    ("gpt", "ul2"),
    ("t5", "span"),
    ("t5", "prefix_lm"),
    ("t5", "ul2"),
]


@pytest.fixture(scope="module")
def make_run(bundle, tmp_path_factory):
    """A run directory as `famlab pretrain` leaves it: config.yaml, tokenizer.json, checkpoints/last.ckpt."""

    def build(family: str, objective: str):
        run_dir = tmp_path_factory.mktemp(f"{family}-{objective}")
        model = dict(
            family=family, vocab_size=bundle.vocab_size, dim=32, num_layers=1, num_heads=2, max_seq_len=48, dropout=0.0
        )
        torch.manual_seed(0)
        net = build_network(ModelConfig(**model))
        config = {"model": model, "objective": {"name": objective}, "data": {"tokenizer": {"num_sentinels": 10}}}
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
        shutil.copyfile(bundle.path, run_dir / "tokenizer.json")
        (run_dir / "checkpoints").mkdir()
        torch.save(
            {"state_dict": {f"net.{k}": v for k, v in net.state_dict().items()}}, run_dir / "checkpoints" / "last.ckpt"
        )
        return run_dir, net

    return build


@pytest.mark.parametrize("family,objective", PAIRS)
def test_every_pair_fills_or_fails_clearly(make_run, family, objective):
    """Each [MASK] becomes one bracketed fill with the text around it kept; gpt x clm refuses with one line."""
    run_dir, _ = make_run(family, objective)
    run = load_run(str(run_dir))
    text = "the cat [MASK] on the mat" if objective != "prefix_lm" else "the cat sat on [MASK]"
    if objective == "clm":
        with pytest.raises(ValueError, match="cannot infill"):
            fill_text(run, text, OPTS)
        return
    filled = fill_text(run, text, OPTS)
    head, tail = text.split("[MASK]")
    assert filled.startswith(head + "[") and filled.endswith("]" + tail) and filled.count("[") == 1
    if family == "bert":  # one argmax token per mask, straight from the network
        ids = run.ids
        seq = [ids.cls] + run.encode(head) + [ids.mask] + run.encode(tail) + [ids.sep]
        with torch.no_grad():
            best = int(run.net(torch.tensor([seq])).logits[0, seq.index(ids.mask)].argmax())
        assert filled == f"{head}[{run.decode([best]).strip()}]{tail}"


@pytest.mark.parametrize("family,objective", [p for p in PAIRS if p[0] != "bert"])
def test_generate_is_deterministic_and_bert_refuses(make_run, family, objective):
    """Greedy generation repeats exactly; a bert run points to fill."""
    run = load_run(str(make_run(family, objective)[0]))
    first = generate_text(run, "the cat", OPTS)
    assert isinstance(first, str) and first == generate_text(run, "the cat", OPTS)
    bert = load_run(str(make_run("bert", "mlm")[0]))
    with pytest.raises(ValueError, match="famlab fill"):
        generate_text(bert, "the cat", OPTS)


def test_prefix_lm_generation_reads_the_prompt_bidirectionally(make_run):
    """gpt x prefix_lm: the first greedy token is the argmax under the prefix mask, not the causal one."""
    run_dir, net = make_run("gpt", "prefix_lm")
    run = load_run(str(run_dir))
    prefix = [run.ids.eos] + run.encode("the cat sat on the")
    seq = torch.tensor([prefix])
    with torch.no_grad():
        logits = net(seq, attention_mask=prefix_lm_mask(torch.tensor([len(prefix)]), len(prefix))).logits[0, -1]
    out = generate_text(run, "the cat sat on the", dict(OPTS, max_new_tokens=1))
    assert out == run.decode([int(logits.argmax())])


def test_spans_parse_sentinel_output():
    """`s0 a b s1 c [missing s2]` -> [[a, b], [c], []]."""
    assert _spans([100, 1, 2, 99, 3], [100, 99, 98], 3) == [[1, 2], [3], []]


def test_cli_errors_exit_2_with_one_line(make_run, capsys):
    """Unknown option, missing prompt, and a middle [MASK] for prefix_lm fail with one line."""
    run_dir, _ = make_run("t5", "prefix_lm")
    assert main(["generate", str(run_dir), "promt=x"]) == 2
    assert main(["generate", str(run_dir)]) == 2
    assert main(["fill", str(run_dir), "text=a [MASK] b"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("famlab: error:") for line in err)
    assert "promt" in err[0] and "prompt=" in err[1] and "prefix_lm" in err[2]
    assert main(["generate", str(run_dir), "prompt=the cat", "max_new_tokens=3"]) == 0
    assert capsys.readouterr().out.startswith("the cat")


@pytest.mark.parametrize("sweep", ["objectives_x_family", "ul2_rates"])
def test_example_sweep_trials_compose(sweep):
    """Every grid point of the objective sweep files composes with its command's presets (valid pairs, known keys)."""
    import itertools
    from pathlib import Path

    from famlab.experiments.configuration.compose import compose

    root = Path(__file__).resolve().parents[2]
    spec = yaml.safe_load((root / "experiments/configs/sweeps" / f"{sweep}.yaml").read_text())
    presets = [t for t in spec["command"][2:] if not t.startswith("${")]
    params = spec["parameters"]
    keys = sorted(params)
    grids = [params[k]["values"] if "values" in params[k] else [params[k]["value"]] for k in keys]
    trials = list(itertools.product(*grids))
    assert len(trials) == {"objectives_x_family": 6, "ul2_rates": 10}[sweep]
    for values in trials:
        cfg = compose(presets, [f"{k}={v}" for k, v in zip(keys, values, strict=True)]).cfg
        assert cfg.objective.name in ("span", "prefix_lm", "ul2") and cfg.size == "tiny"


@pytest.mark.slow
@pytest.mark.parametrize("family,objective", [("gpt", "ul2"), ("t5", "prefix_lm"), ("bert", "span_mlm")])
def test_pretrain_a_new_pair_then_generate_and_fill(tmp_path, monkeypatch, capsys, family, objective):
    """`famlab pretrain <family> tiny objective.name=...` runs end to end and leaves a run `fill` / `generate` read."""
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"the cat number {i} sat on the mat and looked at the dog" for i in range(300)))
    run_dir = tmp_path / "run"
    args = [
        "pretrain",
        family,
        "tiny",
        f"objective.name={objective}",
        f"data.corpus={corpus}",
        "data.tokenizer.vocab_size=400",
        "data.tokenizer.num_sentinels=20",
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "trainer.limit_val_batches=1",
        "data.batch_size=4",
        "trainer.progress_bar=false",
        "wandb.mode=disabled",
        f"run_dir={run_dir}",
    ]
    assert main(args) == 0
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["objective"]["name"] == objective and "ul2_rates" in saved["objective"]
    capsys.readouterr()
    text = "the cat [MASK]" if objective == "prefix_lm" else "the [MASK] sat on the mat"
    assert main(["fill", str(run_dir), f"text={text}", "max_new_tokens=4"]) == 0
    assert capsys.readouterr().out.startswith("the ")
    expected = 2 if family == "bert" else 0
    assert main(["generate", str(run_dir), "prompt=the cat", "max_new_tokens=4"]) == expected
