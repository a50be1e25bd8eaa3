"""What the README, docs/*.md and `--help` claim is what the code does: the export example runs on a default
fine-tune, the numbers stated for presets are the composed configs', the report's sections are stated once and in
the report's order, `famlab presets` prints whole descriptions, `famlab eval --help` names every option eval parses,
every `famlab.<module>` the pages name exists, "arm" is defined once, and the install section names both torch
builds."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from famlab.experiments.commands import cli
from famlab.experiments.configuration.compose import compose, preset_names, preset_path, sweep_names, sweep_path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
FAMILIES = ("bert", "gpt", "t5")


def fenced_lines(text: str) -> list[str]:
    """The lines of a page's fenced code blocks, backslash continuations joined, comments cut."""
    lines, fenced, pending = [], False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            line = pending + line.strip()
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            pending = ""
            lines.append(re.split(r"(?:^|\s)#", line)[0].strip())
    return lines


def section(text: str, heading: str) -> str:
    """The body of the markdown section whose heading line starts with ``heading``, up to the next heading of the
    same or a higher level."""
    level = len(heading.split(" ", 1)[0])
    start = text.index("\n" + heading) + 1
    lines, fenced = [], False
    for line in text[start:].splitlines()[1:]:
        fenced ^= line.lstrip().startswith("```")
        if not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        lines.append(line)
    return "\n".join(lines)


# --- 1. the README's export example works on a default fine-tune ------------------------------------------------------

# `famlab export` and the model card's code need transformers (the [test] extra installs it); only these tests skip
needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="transformers is not installed (pip install -e '.[test]')")
TEXTS = ["the cat sat on the mat", "a dog looked at the cat and sat", "mat"]
LABELS = ["animal", "object", "place"]


@pytest.fixture(scope="module")
def task_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("task") / "task.csv"
    rows = [f"{t} {i},{LABELS[i % 3]}" for i, t in enumerate(TEXTS * 20)]
    path.write_text("text,label\n" + "\n".join(rows) + "\n")
    return path


def card_logits(out: Path, texts: list[str], monkeypatch) -> tuple[torch.Tensor, dict]:
    """Run the exported model card's Python on ``texts`` (from the folder's parent, as the card is written); its
    ``logits`` and ``batch``."""
    card = (out / "README.md").read_text()
    assert card.count("```") % 2 == 0, "the model card's code fences do not pair up"
    code = card.split("## Usage", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert '["an example sentence"]' in code
    monkeypatch.chdir(out.parent)
    scope: dict = {}
    exec(code.replace('["an example sentence"]', repr(texts)), scope)  # noqa: S102 - the card's own code
    return scope["logits"], dict(scope["batch"])


def famlab_logits(run_dir: Path, batch: dict, seed: str | None = None) -> torch.Tensor:
    """The fine-tuned classifier's logits, computed by famlab from the run's checkpoint."""
    from famlab.experiments.commands.export import build_hf_model, plan_export
    from famlab.objectives.classifier import pooled_features

    plan = plan_export(str(run_dir), str(run_dir.parent / "unused-export"), seed)
    _, (net, head) = build_hf_model(plan)
    batch = {**batch, "decoder_input_ids": torch.zeros(len(batch["input_ids"]), 1, dtype=torch.long)}
    with torch.no_grad():
        return head(pooled_features(net, plan.model.family.value, batch, plan.classifier["pooling"]))


@pytest.fixture
def classifier_run(tmp_path, task_csv):
    """A fine-tune's run directory as `famlab finetune` leaves it (random weights and head, no training)."""
    from famlab.datamodules import get_tokenizer, load_corpus
    from famlab.experiments.configuration.compose import family_settings
    from famlab.families import ModelConfig, build_network
    from famlab.objectives import ClassifierModule, OptimSettings

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(f"the cat number {i} sat on the mat and looked at the dog" for i in range(60)))
    bundle = get_tokenizer(load_corpus(str(corpus), val_fraction=0.1), kind="bpe", vocab_size=400, num_sentinels=10,
                           cache_dir=tmp_path / "tok")  # fmt: skip

    def build(family, pooling, standardize=True, **overrides):
        run_dir = tmp_path / f"{family}-{pooling}"
        (run_dir / "checkpoints").mkdir(parents=True)
        model = family_settings(family) | dict(vocab_size=bundle.vocab_size, dim=32, num_layers=2, num_heads=2,
                                              max_seq_len=48) | overrides  # fmt: skip
        torch.manual_seed(0)
        net = build_network(ModelConfig(**model))
        with torch.no_grad():  # off its init: attention far from uniform, so positions and padding show
            for p in net.parameters():
                p.add_(torch.randn_like(p), alpha=0.3)
        optim = OptimSettings(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, warmup_steps=0, max_steps=2)
        module = ClassifierModule(net, 3, optim, pooling=pooling, standardize=standardize)
        with torch.no_grad():  # a trained head: nonzero bias, batch-norm statistics away from (0, 1)
            module.head.classifier.bias.normal_(std=0.5)
            module.head.classifier.weight.normal_(std=0.3)
            if standardize:
                module.head.norm.running_mean.normal_()
                module.head.norm.running_var.uniform_(0.5, 2.0)
        shutil.copyfile(bundle.path, run_dir / "tokenizer.json")
        config = {"model": model, "objective": {"name": "x"},
                  "data": {"task": str(task_csv), "tokenizer": {"kind": "bpe", "num_sentinels": 10}}}
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
        (run_dir / "results.json").write_text(json.dumps({"job": "finetune", "mean": {"test/acc": 0.5}}))
        torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams)},
                   run_dir / "checkpoints" / "best-step2.ckpt")  # fmt: skip
        return run_dir

    return build


@needs_transformers
@pytest.mark.parametrize(
    ("family", "pooling", "overrides", "hf_class"),
    [
        ("bert", "mean", dict(pos="rope"), "RoFormerModel"),  # the tiny BERT's default fine-tune
        ("bert", "mean", {}, "BertModel"),
        ("bert", "cls", dict(pos="rope"), "RoFormerModel"),  # cls with the head's pooler (dense + tanh)
        ("bert", "last", {}, "BertModel"),
        ("gpt", "mean", {}, "GPT2Model"),
        ("gpt", "cls", {}, "GPT2Model"),
        ("t5", "mean", {}, "T5EncoderModel"),
        ("t5", "last", {}, "T5EncoderModel"),
        ("t5", "decoder", {}, "T5Model"),
    ],
)
def test_a_classifier_hf_has_no_class_for_exports_as_its_body_and_head(
    classifier_run, tmp_path, monkeypatch, caplog, family, pooling, overrides, hf_class
):
    """No Hugging Face sequence classifier pools by mean (the default) or as famlab's other poolings: the export is
    the body plus the head file, and the model card's own code loads it with no weight left at its init and gives
    famlab's logits within 1e-4."""
    run_dir = classifier_run(family, pooling, **overrides)
    out = tmp_path / "hf"
    assert cli.main(["export", str(run_dir), str(out)]) == 0
    assert {"config.json", "model.safetensors", "classifier_head.safetensors", "tokenizer.json", "README.md"} <= {
        p.name for p in out.iterdir()
    }
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [hf_class] and config["famlab_classifier"]["pooling"] == pooling
    assert config["id2label"] == {str(i): name for i, name in enumerate(LABELS)}
    with caplog.at_level("WARNING"):
        theirs, batch = card_logits(out, TEXTS, monkeypatch)
    assert "MISSING" not in caplog.text and "UNEXPECTED" not in caplog.text, caplog.text
    torch.testing.assert_close(theirs, famlab_logits(run_dir, batch), atol=1e-4, rtol=0)


def _readme_commands(command: str) -> list[list[str]]:
    """The arguments of every ``famlab <command>`` line of the README's code blocks."""
    return [shlex.split(line)[2:] for line in fenced_lines(README.read_text()) if line.startswith(f"famlab {command} ")]


@pytest.mark.slow
@needs_transformers
def test_the_readme_export_examples_work_on_the_runs_the_readme_makes(tmp_path, monkeypatch, task_csv):
    """Every `famlab export` of the README runs on what the README's own commands leave (a tiny pretraining run, a
    default fine-tune of it), made here with fewer steps; a fine-tune's export gives famlab's logits."""
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"the cat number {i} sat on the mat and looked at the dog" for i in range(200)))
    fast = ["trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.limit_val_batches=1",
            "data.batch_size=8", "trainer.progress_bar=false", "wandb.mode=disabled"]  # fmt: skip
    exports = _readme_commands("export")
    assert exports, "the README shows no famlab export"
    runs: dict[str, Path] = {}  # README path -> the run made here

    def pretraining_run(name: str) -> Path:  # runs/<family>-<objective>-tiny-<time>: `famlab pretrain <family> tiny`
        family = name.split("/")[-1].split("-")[0]
        line = next((a for a in _readme_commands("pretrain") if a[:2] == [family, "tiny"]), [family, "tiny"])
        run_dir = tmp_path / name.replace("<time>", "t")
        assert cli.main(["pretrain", *line, *fast, f"data.corpus={corpus}", f"run_dir={run_dir}"]) == 0
        return run_dir

    def finetune_run(name: str) -> Path:  # the README fine-tune whose run_dir= it is
        line = next(a for a in _readme_commands("finetune") if f"run_dir={name}" in a)
        init = next(a.split("=", 1)[1] for a in line if a.startswith("init="))
        pre = runs.setdefault(init, pretraining_run(init))
        args = [a.replace(init, str(pre)).replace(f"run_dir={name}", f"run_dir={tmp_path / name}") for a in line]
        assert not any(a.startswith("finetune.pooling=") for a in args), "not a default fine-tune"
        assert cli.main(["finetune", *args, f"data.task={task_csv}", "finetune.max_steps=2", "finetune.val_every=1",
                         "finetune.seeds=[0]", "data.batch_size=8", "trainer.progress_bar=false",
                         "wandb.mode=disabled"]) == 0  # fmt: skip
        return tmp_path / name

    for source, target in exports:
        if source not in runs:
            runs[source] = pretraining_run(source) if "<time>" in source else finetune_run(source)
        out = tmp_path / target
        assert cli.main(["export", str(runs[source]), str(out)]) == 0
        assert (out / "config.json").is_file() and (out / "README.md").is_file()
    finetuned = [(s, t) for s, t in exports if "<time>" not in s]
    assert finetuned, "the README shows no export of a fine-tune"
    for source, target in finetuned:
        config = json.loads((tmp_path / target / "config.json").read_text())
        assert config["famlab_classifier"]["pooling"] == "mean"  # the default: no HF sequence classifier pools so
        theirs, batch = card_logits(tmp_path / target, TEXTS, monkeypatch)
        torch.testing.assert_close(theirs, famlab_logits(runs[source], batch), atol=1e-4, rtol=0)


# --- 2. the numbers stated for presets are the composed configs' ------------------------------------------------------

# what a phrase of prose states -> the config key it is about (first match in a piece of text)
STATED = [
    (r"\bdim (\d[\d,]*)", "model.dim"),
    (r"\b(\d+) layers", "model.num_layers"),
    (r"\b(\d+) heads", "model.num_heads"),
    (r"\b(?:sequence|seq) (\d+)", "data.seq_len"),
    (r"\bbatch (\d+)", "data.batch_size"),
    (r"\bvocabulary (\d[\d,]*)", "data.tokenizer.vocab_size"),
    (r"\b(\d[\d,]*k?) steps", "trainer.max_steps"),
    (r"\bwarmup (\d[\d,]*)\)", "optim.warmup_steps"),
    (r"\bfine-tuning (\d+) epochs", "finetune.epochs"),
    (r"\bepochs at (\d[\d.e-]*\d)", "finetune.lr"),
    (r"(?:Adam\(W\)|AdamW|AdamW equivalent here is) (\d[\d.e-]*\d)", "optim.lr"),
    (r"\bbetas (\([\d., ]+\))", "optim.betas"),
    (r"\beps (\d[\d.e-]*\d)", "optim.eps"),
    (r"\bweight decay (\d+(?:\.\d+)?)", "optim.weight_decay"),
    (r"\b(no) weight decay", "optim.weight_decay"),
]
KEY_VALUE = re.compile(r"`([a-z_]+(?:\.[a-z_]+)+)=([^`\s]+)`")


def number(text: str):
    """``2,048`` -> 2048, ``20k`` -> 20000, ``1e-4`` -> 0.0001, ``(0.9, 0.95)`` -> [0.9, 0.95], ``no`` -> 0."""
    text = text.replace(",", "") if not text.startswith("(") else text
    if text == "no":
        return 0
    if text.startswith("("):
        return [float(x) for x in text.strip("()").split(",")]
    return float(text[:-1]) * 1000 if text.endswith("k") else float(text)


def value_of(cfg, key: str):
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    value = getattr(value, "value", value)  # a str Enum
    return list(value) if isinstance(value, tuple) else value


def same(stated, actual) -> bool:
    if isinstance(stated, list):
        return isinstance(actual, list) and len(stated) == len(actual) and all(map(same, stated, actual))
    if isinstance(stated, (int, float)) and not isinstance(stated, bool) and isinstance(actual, (int, float)):
        return abs(stated - actual) <= 1e-9 * max(1.0, abs(actual))
    return str(stated).lower() == str(actual).lower()


def stated_numbers(text: str) -> dict[str, object]:
    found, text = {}, " ".join(text.split())  # a phrase may wrap
    for pattern, key in STATED:
        m = re.search(pattern, text)
        if m and key not in found:
            found[key] = number(m.group(1))
    return found


def mismatches(claims: dict[str, object], cfgs: dict[str, object], where: str) -> list[str]:
    """``where: key stated s, config has a`` for every claim some family's config contradicts."""
    wrong = []
    for key, stated in claims.items():
        for family, cfg in cfgs.items():
            actual = value_of(cfg, key)
            if not same(stated, actual):
                wrong.append(f"{where}: {key} stated {stated!r}, `famlab config {family} ...` has {actual!r}")
    return wrong


def key_values(text: str) -> dict[str, object]:
    """The backticked ``key=value`` pairs of ``text`` (``1e-3`` read as a number, as OmegaConf reads it)."""
    found = {}
    for key, raw in KEY_VALUE.findall(text):
        value = yaml.safe_load(raw)
        if isinstance(value, str) and re.fullmatch(r"\d[\d.]*e-?\d+", value):
            value = float(value)
        found[key] = value
    return found


def by_family_keys(preset: str) -> dict[str, set[str]]:
    """The keys a preset's ``by_family.<family>`` sets (they replace its top-level value for that family)."""

    def flat(node, prefix=""):
        return {k for key, v in node.items() for k in (flat(v, f"{prefix}{key}.") if isinstance(v, dict)
                                                         else {f"{prefix}{key}"})}  # fmt: skip

    data = yaml.safe_load(preset_path(preset).read_text()) or {}
    return {family: flat(node) for family, node in (data.get("by_family") or {}).items()}


def per_family(presets: list[str]) -> dict[str, object]:
    return {f: compose([f, *presets], []).cfg for f in FAMILIES}


def effective_lr(cfg) -> float:
    return cfg.optim.lr * cfg.optim.lr_scale


def test_the_numbers_protocol_states_for_each_preset_are_the_composed_configs():
    """Every number docs/protocol.md states for a preset (dim, layers, heads, sequence, batch, vocabulary, steps,
    warmup, rates, and each `key=value` of the preset's section, `by_family.<family>` ones for that family only)
    is what `famlab config <family> <preset>` composes."""
    text = (ROOT / "docs" / "protocol.md").read_text()
    presets = section(text, "## The presets")
    wrong = []
    for family in FAMILIES:  # family presets: the optimiser
        family_presets = section(presets, "### Family presets")
        bullet = re.search(rf"^- \*\*{family}\*\* — (.*?)(?=^- |\Z)", family_presets, re.M | re.S)
        claims = {k: v for k, v in stated_numbers(bullet.group(1)).items() if k.startswith("optim.")}
        assert "optim.lr" in claims and "optim.betas" in claims, f"protocol.md states no {family} optimiser"
        wrong += mismatches(claims, {family: compose([family], []).cfg}, f"protocol.md {family}")
    tiny = section(presets, "### `tiny`")
    cfgs = per_family(["tiny"])
    shape = tiny.strip().split("\n\n")[0]
    assert len(stated_numbers(shape)) >= 7, shape
    wrong += mismatches(stated_numbers(shape), cfgs, "protocol.md tiny")
    context, own = dict(cfgs), by_family_keys("tiny")
    for line in tiny.splitlines():
        if m := re.match(r"^- `by_family\.(\w+)`", line):
            context = {m.group(1): cfgs[m.group(1)]}
        elif line.startswith("- "):
            context = dict(cfgs)
        for key, value in key_values(line).items():  # a top-level value holds where no by_family replaces it
            scope = {f: c for f, c in context.items() if len(context) == 1 or key not in own.get(f, set())}
            wrong += mismatches({key: value}, scope, "protocol.md tiny")
    for name in ("small", "base"):
        bullet = re.search(rf"^- \*\*{name}\*\* — (.*?)(?=^- |\Z)", section(presets, "### `small` and `base`"),
                           re.M | re.S).group(1)  # fmt: skip
        assert len(stated_numbers(bullet)) >= 9, bullet
        wrong += mismatches({**stated_numbers(bullet), **key_values(bullet)}, per_family([name]), f"protocol.md {name}")
    tiny = " ".join(tiny.split())  # the phrases below may wrap
    m = re.search(r"\(BERT (\S+), GPT (\S+)\)", tiny)  # each family's own rate, times tiny's lr_scale
    assert m, "protocol.md no longer states tiny's BERT and GPT rates"
    for family, stated in (("bert", m.group(1)), ("gpt", m.group(2))):
        lr = effective_lr(cfgs[family])
        assert same(number(stated), lr), f"protocol.md: tiny {family} lr stated {stated}, composed {lr:g}"
    m = re.search(r"BERT at (\S+) and batch (\d+)", tiny)
    assert m and same(number(m.group(1)), effective_lr(cfgs["bert"])), f"tiny BERT lr: {m and m.group(0)}"
    assert int(m.group(2)) == cfgs["bert"].data.batch_size, f"tiny BERT batch: {m.group(0)}"
    m = re.search(r"capped at (\S+?),", tiny)  # T5's Adafactor
    assert m and same(number(m.group(1)), effective_lr(cfgs["t5"])), f"tiny T5 lr: {m and m.group(0)}"
    assert not wrong, "\n".join(wrong)


def test_the_comparison_defaults_the_docs_state_are_what_famlab_compare_composes(monkeypatch):
    """docs/protocol.md's default-comparison table and `cpu` section, and the README's and docs' "2.6 times", are
    what `famlab compare` and `famlab compare cpu` compose on a CPU (the table's machine)."""
    from famlab.experiments.steps.comparison import compose_all

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # with several GPUs, compare.workers is one per GPU

    text = (ROOT / "docs" / "protocol.md").read_text()
    _, default = compose_all([], [])
    _, cpu = compose_all(["cpu"], [])
    table = section(text, "## The default comparison")
    assert len(key_values(table)) >= 10, table
    wrong = mismatches(key_values(table), default, "protocol.md default comparison")
    wrong += mismatches(key_values(section(text, "### `cpu`")), cpu, "protocol.md cpu")
    ratio = cpu["t5"].trainer.max_steps / default["t5"].trainer.max_steps
    for page in (README, ROOT / "docs" / "protocol.md"):
        said = r"(\d+(?:\.\d+)?) times (?:the default comparison's |the )?pretraining"
        for times in re.findall(said, page.read_text()):
            assert f"{ratio:.1f}" == times, f"{page.name}: {times} times the pretraining; cpu / default is {ratio:.2f}"
    assert not wrong, "\n".join(wrong)


# --- 3. the report's sections: stated once, as the report names them --------------------------------------------------


def test_the_report_sections_are_listed_once_and_named_as_the_report_names_them():
    readme = README.read_text()
    listed = re.findall(r"^\d+\. \*\*(.+?)\*\*", section(readme, "## What the report tells you"), re.M)
    assert listed[0] == "Header" and listed[-1] == "Plots" and len(listed) == 8, listed
    code = "\n".join(p.read_text() for p in (ROOT / "experiments" / "analysis").glob("*.py"))
    headings = set(re.findall(r"[\"']#{2,3} ([^\"'{]+)", code)) | {
        h.replace("{between}", "families") for h in re.findall(r"f[\"']## ([^\"']+)", code)
    }
    bold = re.findall(r"\*\*(.+?)\*\*", section(readme, "## What the report tells you").split("\n\n")[1])
    missing = [b for b in [*listed[1:], *bold] if b != "Header" and not any(h.startswith(b) for h in headings)]
    assert not missing, f"the README names report sections the report does not have: {missing}"
    for page in DOCS:  # the order is stated in one place: the other pages link to it
        assert not re.search(r"^\d+\. \*\*Plots\*\*", page.read_text(), re.M), f"{page.name} lists the sections again"
    assert "README.md#what-the-report-tells-you" in (ROOT / "docs" / "protocol.md").read_text()


# --- 4. `famlab presets` prints whole descriptions --------------------------------------------------------------------

CONNECTORS = {"a", "an", "and", "or", "the", "of", "to", "in", "on", "for", "with", "by", "at", "from", "vs", "x"}


def test_famlab_presets_prints_each_description_whole(capsys):
    """Each line is the file's whole first comment line (not cut), a complete phrase: balanced brackets, no
    trailing connector or comma, and the file's next comment line (if any) starts a new sentence."""
    assert cli.main(["presets"]) == 0
    out = capsys.readouterr().out
    files = [(n, preset_path(n)) for n in preset_names()] + [(n, sweep_path(n)) for n in sweep_names()]
    for name, path in files:
        comments = [line.lstrip("#").strip() for line in path.read_text().splitlines() if line.startswith("#")]
        first = comments[0]
        assert re.search(rf"^  {re.escape(name)} +{re.escape(first)}$", out, re.M), f"{name}: not printed whole"
        assert first.count("(") == first.count(")") and first.count("[") == first.count("]"), first
        last_word = re.findall(r"[\w%]+|[,;:(]$", first)[-1]
        assert last_word.lower() not in CONNECTORS and last_word not in ",;:(", f"{name}: ends mid-phrase: {first!r}"
        if len(comments) > 1 and comments[1]:
            assert not comments[1][0].islower(), f"{name}: its description runs on into the next line: {comments[1]!r}"
    for name in preset_names():  # numbers in a preset's description are the preset's
        line = re.search(rf"^  {name} +(.*)$", out, re.M).group(1)
        if name in ("tiny", "small", "base"):
            assert not mismatches(stated_numbers(line), per_family([name]), f"presets {name}"), line


# --- 5. `famlab eval --help` names every option eval parses -----------------------------------------------------------


def test_eval_help_names_every_option_eval_parses(capsys):
    from famlab.experiments.commands.evaluate import _options
    from famlab.experiments.steps.evaluate import EvalInputError
    from famlab.objectives.zeroshot import NORMS

    with pytest.raises(EvalInputError) as info:
        _options(["data.eval=wordnet", "no_such_option=1"])
    parsed = [k.strip() for k in str(info.value).split("options:", 1)[1].split(",")]
    assert {"data.eval", "rule", "limit", "headline", "bigram"} <= set(parsed), parsed
    assert cli.main(["eval", "--help"]) == 0
    usage = capsys.readouterr().out.splitlines()[0]
    missing = [k for k in parsed if f"{k}=" not in usage]
    assert not missing, f"famlab eval --help's usage line omits {missing}: {usage}"
    for value in (*NORMS, "full", "span"):
        assert value in usage, f"famlab eval --help omits the value {value}"


# --- 6. every module and file the pages name exists -------------------------------------------------------------------

FILE_SUFFIX = (".log", ".json", ".yaml", ".md", ".txt", ".csv", ".png", ".ckpt", ".safetensors")


def _resolves(dotted: str) -> bool:
    """``famlab.a.b[:f]`` or ``a.b.C``: a module, or a name a module defines (imported to find out)."""
    import importlib

    module, _, func = dotted.partition(":")
    parts = (module if module.startswith("famlab.") else f"famlab.{module}").split(".")
    for cut in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for name in [*parts[cut:], *([func] if func else [])]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_module_and_source_file_a_page_names_exists(page):
    text = page.read_text()
    named = set(re.findall(r"(?<![\w/.])famlab(?:\.[A-Za-z_]\w*)+(?::\w+)?", text))
    named |= set(re.findall(r"`((?:families|objectives|datamodules|experiments)(?:\.[A-Za-z_]\w*)+(?::\w+)?)", text))
    missing = sorted(n for n in named if not n.endswith(FILE_SUFFIX) and not _resolves(n))
    files = set(re.findall(r"(?<![\w/.-])((?:families|objectives|datamodules|experiments|tests|scripts|benchmarks)"
                           r"/[\w/.-]*\w\.(?:py|yaml|md|csv|jsonl|json|txt))", text))  # fmt: skip
    missing += sorted(f for f in files if not (ROOT / f).exists())
    assert not missing, f"{page.name} names modules or files that do not exist: {missing}"


# --- 7. "arm" has one meaning, defined once ---------------------------------------------------------------------------


def test_arm_is_defined_once_and_used_with_that_meaning():
    definitions = [(p.name, line) for p in PAGES for line in p.read_text().splitlines()
                   if re.search(r"\*\*[Aa]rms?\*\*", line)]  # fmt: skip
    assert len(definitions) == 1 and definitions[0][0] == "protocol.md", definitions
    words = section((ROOT / "docs" / "protocol.md").read_text(), "## Words")
    assert "**Arm**: one (family, objective) pair of a comparison" in words
    assert "docs/protocol.md#words" in README.read_text()
    for page in PAGES:  # not a side (pretrained / scratch) nor a treatment group of a test
        bad = re.findall(r"\b(?:scratch|baseline|two|pretrained and scratch) arms?\b", page.read_text(), re.I)
        assert not bad, f"{page.name} uses 'arm' for a side: {bad}"


# --- 8. the install section names the CPU and the CUDA build ----------------------------------------------------------


def test_the_install_section_says_how_to_get_each_torch_build():
    pin = re.search(r"pip install -q (torch==[\d.]+)", (ROOT / ".ci" / "run").read_text()).group(1)
    install = [line for line in fenced_lines(section(README.read_text(), "## Install")) if "torch" in line]
    text = section(README.read_text(), "## Install")
    cpu = f"pip install {pin} --index-url https://download.pytorch.org/whl/cpu"
    assert any(line.startswith(cpu) for line in install), f"no CPU line `{cpu}`: {install}"
    assert f"pip install {pin}    # Linux, CUDA build" in text, "the public index's (CUDA) line is missing"
    assert re.search(r"--index-url https://download\.pytorch\.org/whl/cu12", text), "no CUDA index URL"
