"""An objective owns how a network it trained is read afterwards (``ObjectiveRules``): scoring, bits per byte,
generation, filling and the report's label all ask it through the registry, never its name.

Two test-only objectives are registered from outside famlab (``register_objective``, removed after each test): one
that declares its own causal rules (continued after ``[BOS]``, which no built-in uses), and one that declares none.
The built-ins' rules are checked against what each objective's own batches put first (its mode token or separator)
and against the conditioning ``objectives/evaluation.py`` documents.
"""

import math
import shutil

import lightning as L
import pytest
import torch
import yaml
from famlab.experiments.analysis.report import bpb_rule
from famlab.experiments.analysis.zeroshot_table import zero_shot_markdown, zero_shot_rows, zero_shot_summary
from famlab.experiments.commands.cli import main
from famlab.experiments.configuration.config import ConfigInputError
from famlab.experiments.plumbing.data_cache import token_ids
from famlab.experiments.steps.generate import Run, fill_text, generate_text, load_run
from famlab.families import ModelConfig, build_network
from famlab.families.formats import Arch, Reading, Rule
from famlab.families.registry import family
from famlab.objectives import OptimSettings, PretrainModule, make_objective
from famlab.objectives.evaluation import byte_score
from famlab.objectives.objective import CausalLM, MaskedLM, ObjectiveRules
from famlab.objectives.registry import Entry, register_objective, rules_of, unregister_objective
from famlab.objectives.zeroshot import Item, Scorer, not_scored
from torch.utils.data import DataLoader

from tests.experiments.record_helpers import pretrain_record

OPTS = {"max_new_tokens": 5, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "seed": 0}
PROMPT = "the cat sat on the"
ITEM = Item("the cat ___ on the mat", ("sat", "dog", "looked"), 0)
TEXTS = ["the cat sat on the mat", "the dog looked at the cat"]


class BosCausal(CausalLM):
    """A causal LM from outside famlab that declares its own rules: scored after ``[EOS]`` as GPT's clm, but continued
    causally after ``[BOS]`` (no built-in objective generates after ``[BOS]``)."""

    name = "bos_causal"
    rules = ObjectiveRules(text=Rule(Reading.CAUSAL, ("[EOS]",)), cloze=Rule(Reading.CAUSAL, ("[EOS]",)),
                           generate=Rule(Reading.CAUSAL, ("[BOS]",)))


class Unruled(CausalLM):
    """A causal LM from outside famlab that declares no rule at all."""

    name = "unruled"
    rules = ObjectiveRules()


@pytest.fixture
def toys():
    """Both toy objectives registered for the decoder architecture (gpt), removed afterwards."""
    added = []
    try:
        for cls in (BosCausal, Unruled):
            register_objective(Arch.DECODER, cls.name, Entry(cls, (), lambda ids, n, g, s, cls=cls: cls(ids, n, g)))
            added.append(cls.name)
        yield
    finally:
        for name in added:
            unregister_objective(Arch.DECODER, name)


MODEL = dict(family="gpt", dim=32, num_layers=2, num_heads=2, max_seq_len=48, dropout=0.0)


@pytest.fixture(scope="module")
def gpt(bundle):
    torch.manual_seed(0)
    return build_network(ModelConfig(**MODEL, vocab_size=bundle.vocab_size)).eval()


def _run(bundle, net, objective: str) -> Run:
    return Run(net, bundle.tokenizer, token_ids(bundle), "gpt", objective)


def _greedy(run: Run, context: list[int]) -> list[int]:
    """Greedy tokens after ``context`` up to [EOS], the whole sequence recomputed under the causal mask each step."""
    seq, out = list(context), []
    with torch.no_grad():
        for _ in range(OPTS["max_new_tokens"]):
            token = int(run.net(torch.tensor([seq])).logits[0, -1].argmax())
            if token == run.ids.eos:
                break
            out.append(token)
            seq.append(token)
    return out


def test_generate_continues_by_the_objectives_own_causal_rule_not_as_a_prefix_lm(toys, bundle, gpt):
    """bos_causal declares a causal continuation after [BOS]: the network first reads exactly `[BOS] prompt` under
    its causal mask (no prefix-LM mask, which every unnamed decoder objective used to get after [EOS]), and the text
    is the greedy causal continuation."""
    run = _run(bundle, gpt, "bos_causal")
    tokens = run.encode(PROMPT)
    calls: list[tuple[list[int], object]] = []

    def record(module, args, kwargs):
        calls.append((args[0][0].tolist(), kwargs.get("attention_mask")))

    handle = gpt.register_forward_pre_hook(record, with_kwargs=True)
    try:
        out = generate_text(run, PROMPT, OPTS)
    finally:
        handle.remove()
    assert calls[0] == ([run.ids.bos, *tokens], None)
    assert all(mask is None for _, mask in calls)
    assert out == run.decode(_greedy(run, [run.ids.bos, *tokens]))


def _run_dir(tmp_path, bundle, net, objective: str):
    """A run directory as ``famlab pretrain`` leaves it (config.yaml, tokenizer.json, checkpoints/last.ckpt)."""
    model = dict(MODEL, vocab_size=bundle.vocab_size)
    config = {"model": model, "objective": {"name": objective}, "data": {"tokenizer": {"num_sentinels": 10}}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    shutil.copyfile(bundle.path, tmp_path / "tokenizer.json")
    (tmp_path / "checkpoints").mkdir()
    torch.save({"state_dict": {f"net.{k}": v for k, v in net.state_dict().items()}},
               tmp_path / "checkpoints" / "last.ckpt")
    return tmp_path


def test_generate_and_fill_refuse_an_objective_without_rules_in_one_line(toys, bundle, gpt, tmp_path, capsys):
    """unruled declares no generation or fill rule: `famlab generate` and `famlab fill` exit 2 with one line naming
    it, never decoding it by another objective's rule."""
    run_dir = _run_dir(tmp_path, bundle, gpt, "unruled")
    run = load_run(str(run_dir))
    with pytest.raises(ConfigInputError, match="objective unruled declares no generation rule"):
        generate_text(run, PROMPT, OPTS)
    with pytest.raises(ConfigInputError, match="trained with unruled cannot infill"):
        fill_text(run, "the cat [MASK]", OPTS)
    capsys.readouterr()
    assert main(["generate", str(run_dir), f"prompt={PROMPT}"]) == 2
    assert main(["fill", str(run_dir), "text=the cat [MASK]"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("famlab: error:") and "unruled" in line for line in err)


def test_an_objective_without_a_scoring_rule_is_not_scored(toys, bundle, gpt):
    """unruled declares no cloze or text rule: every zero-shot item is skipped as not scored, bits per byte is NaN
    with that reason, and the report labels it `not scored`; bos_causal's own rules score it as GPT's clm."""
    ids = token_ids(bundle)

    def encode(text: str) -> list[int]:
        return bundle.tokenizer.encode(text, add_special_tokens=False).ids

    got = Scorer(gpt, encode, ids, objective="unruled").score(ITEM)
    assert got.skipped == not_scored("unruled") and all(math.isnan(v) for v in got.log_prob)
    score = byte_score(gpt, TEXTS, encode, ids, objective="unruled")
    assert math.isnan(score.value) and score.num_tokens == 0 and "not scored" in (score.reason or "")
    assert bpb_rule("gpt", "unruled") == "not scored"
    # a declared rule is scored by it: bos_causal declares clm's rules for text and cloze
    assert Scorer(gpt, encode, ids, objective="bos_causal").score(ITEM) == Scorer(gpt, encode, ids).score(ITEM)
    assert byte_score(gpt, TEXTS, encode, ids, objective="bos_causal") == byte_score(gpt, TEXTS, encode, ids)
    assert bpb_rule("gpt", "bos_causal") == "causal"



def test_the_pretraining_table_says_not_scored(toys):
    """An arm whose objective declares no text rule reads `not scored` in every bits-per-byte column, where a clm
    arm has its figure in the causal column only (not `-`, which means "scored by another column's rule")."""
    from famlab.experiments.analysis.report import tables
    from famlab.experiments.analysis.results import ArmRow, PretrainRow

    def pretrain(bpb: float | None) -> PretrainRow:
        return PretrainRow(pretrain_seeds=1, params=10, non_embedding_params=5, steps=3, corpus_tokens=30, flops=1e3,
                           val_loss=4.0, val_ppl=54.6, unigram_loss=5.0, lr=1e-3, tokens_per_s=10.0, wall_s=1.0,
                           loss_2x=None, loss_4x=None, bits_per_byte=bpb)

    arms = {"gpt-clm": ArmRow(family="gpt", objective="clm", pretrain=pretrain(1.25)),
            "gpt-unruled": ArmRow(family="gpt", objective="unruled", pretrain=pretrain(None))}
    pre, _ = tables(arms, None, None)
    head, _, clm, unruled = pre.splitlines()
    columns = [c.strip() for c in head.split("|")]
    at = columns.index("causal bits/byte")

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.split("|")][at:at + 3]

    assert cells(clm) == ["1.250", "-", "-"]
    assert cells(unruled) == ["not scored"] * 3

def _zero_shot(objective: str, skipped: int) -> dict:
    """One task's results as `famlab eval` writes them for a run of ``objective`` with ``skipped`` of 4 items
    skipped as not scored (only the keys the table reads)."""
    block = {"raw": {"acc": 0.5}, "per_token": {"acc": 0.5}, "per_byte": {"acc": 0.0 if skipped else 0.75},
             "chance": 0.25, "length_only": 0.5, "num_items": 4, "num_skipped": skipped}
    reasons = {"skipped": {not_scored(objective): skipped}} if skipped else {}
    return {"wordnet-reverse-dictionary": {**block, **reasons, "objective": objective, "bigram": dict(block)}}


def test_the_zero_shot_table_says_not_scored(toys):
    """An arm whose objective declares no cloze rule reads `not scored`, not an accuracy of 0 (every item skipped);
    chance and the bigram floor still come from its items, and no W&B key carries a number for it."""
    rows = zero_shot_rows({
        "gpt-clm": [pretrain_record("gpt", eval={"zero_shot": _zero_shot("clm", 0)})],
        "gpt-unruled": [pretrain_record("gpt", eval={"zero_shot": _zero_shot("unruled", 4)})],
    })
    md = zero_shot_markdown(rows).splitlines()
    assert md[2] == "| gpt-clm | 0.750 |" and md[3] == "| gpt-unruled | not scored |"
    assert rows["chance"] == {"wordnet-reverse-dictionary": 0.25}
    summary = zero_shot_summary(rows)
    assert summary["zero_shot/wordnet-reverse-dictionary/gpt-clm"] == 0.75
    assert not [key for key in summary if key.endswith("/gpt-unruled")]


# -- the built-ins: each declared lead is what the objective's own training batches put first ----------------------

PAIRS = [("bert", "mlm"), ("bert", "span_mlm"), ("gpt", "clm"), ("gpt", "prefix_lm"), ("gpt", "span"),
         ("gpt", "ul2"), ("t5", "span"), ("t5", "prefix_lm"), ("t5", "ul2")]


def _first_tokens(ids, family_name: str, rates: tuple[float, float, float]) -> set[int]:
    """The first (encoder) input token of every row of a UL2 batch drawn with ``rates`` (R, X, S)."""
    objective = make_objective("ul2", ids, seq_len=32, family=family_name, ul2_rates=rates,
                               generator=torch.Generator().manual_seed(0))
    batch = objective.collate([torch.arange(10, 10 + objective.raw_block_len) for _ in range(4)])
    return set(batch["input_ids"][:, 0].tolist())


@pytest.mark.parametrize("family_name", ["gpt", "t5"])
def test_ul2_prompts_in_the_mode_its_batches_start_with(ids, family_name):
    """UL2 continues a prompt in its S mode and fills [MASK]s in its R mode: the lead of each rule is the token the
    objective's S-only / R-only batches begin with."""
    rules = rules_of(family_name, "ul2")
    assert rules.generate is not None and rules.fill is not None
    assert rules.generate.reading is Reading.PREFIX and rules.fill.reading is Reading.SENTINEL
    assert {*rules.generate.lead_ids(ids)} == _first_tokens(ids, family_name, (0.0, 0.0, 1.0))
    assert {*rules.fill.lead_ids(ids)} == _first_tokens(ids, family_name, (1.0, 0.0, 0.0))


@pytest.mark.parametrize("objective", ["clm", "prefix_lm"])
def test_a_causal_gpt_objective_scores_after_its_document_separator(ids, objective):
    """GPT's clm and prefix_lm join documents with [EOS]: a text is scored (and clm continues) after that
    separator, as a document follows it in training."""
    rules = rules_of("gpt", objective)
    separator = make_objective(objective, ids, seq_len=16, family="gpt").separator_id
    for rule in (rules.text, rules.cloze):
        assert rule is not None and rule.reading is Reading.CAUSAL and rule.lead_ids(ids) == [separator]
    assert rules.generate is not None and rules.generate.lead_ids(ids) == [separator]
    # clm trains under the causal mask, prefix_lm under a prefix mask: each continues a prompt the same way
    assert rules.generate.reading is {"clm": Reading.CAUSAL, "prefix_lm": Reading.PREFIX}[objective]


@pytest.mark.parametrize("family_name,objective", [p for p in PAIRS if p[0] != "bert"])
def test_bits_per_byte_conditions_as_evaluation_documents(ids, family_name, objective):
    """objectives/evaluation.py's rules: GPT after [EOS] (clm, prefix_lm) or [S] (ul2), GPT span as T5's span rule;
    T5 `<extra_id_0> [EOS]` with `<extra_id_0>` given (span), `[EOS]` (prefix_lm), `[S] [EOS]` (ul2)."""
    s0 = ids.sentinel_ids[0]
    documented = {
        ("gpt", "clm"): ([], [ids.eos]), ("gpt", "prefix_lm"): ([], [ids.eos]), ("gpt", "ul2"): ([], [ids.s]),
        ("gpt", "span"): ([s0, ids.eos], [s0]), ("t5", "span"): ([s0, ids.eos], [s0]),
        ("t5", "prefix_lm"): ([ids.eos], []), ("t5", "ul2"): ([ids.s, ids.eos], []),
    }[family_name, objective]
    rule = rules_of(family_name, objective).text
    assert rule is not None
    assert family(family_name).input_format.byte_context(rule, ids) == documented


@pytest.mark.parametrize("family_name,objective", PAIRS)
def test_every_builtin_declares_every_rule_it_had(family_name, objective):
    """Every built-in pair scores, and generates or fills as `famlab generate` / `fill` document (bert fills, gpt
    clm generates only, t5 and gpt prefix_lm fill one [MASK] at the end by generating); the report's label is its
    text rule's."""
    rules = rules_of(family_name, objective)
    assert rules.text is not None and rules.cloze is not None
    assert (rules.generate is None) == (family_name == "bert")
    assert (rules.fill is None) == (objective in ("clm", "prefix_lm"))
    label = {"bert": "PLL"}.get(family_name, "one span" if objective == "span" else "causal")
    assert rules.bpb_label == label


class RenamedMLM(MaskedLM):
    """BERT's masked LM registered from outside famlab under another name: it inherits MaskedLM's declarations."""

    name = "renamed_mlm"


def test_validation_logs_token_accuracy_for_an_objective_that_declares_it(ids, tiny_net):
    """val/mlm_acc follows `Objective.token_accuracy`, not the names mlm / span_mlm: a renamed masked LM logs it, as
    the share of its sparse labels the argmax gets right."""
    entry = Entry(RenamedMLM, ("mask_rate",), lambda ids, n, g, s: RenamedMLM(ids, n, s["mask_rate"], g))
    register_objective(Arch.ENCODER, RenamedMLM.name, entry)
    try:
        objective = make_objective(RenamedMLM.name, ids, seq_len=16, family="bert")
    finally:
        unregister_objective(Arch.ENCODER, RenamedMLM.name)
    torch.manual_seed(0)
    net = tiny_net("bert").eval()
    val = [objective.collate(list(torch.randint(10, 900, (3, objective.raw_block_len)))) for _ in range(2)]
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.validate(PretrainModule(net, objective, OptimSettings(lr=1e-3, warmup_steps=1, max_steps=3)),
                     DataLoader(val, batch_size=None))
    with torch.no_grad():
        outs = [objective.loss(net, b) for b in val]
    correct = sum(int((o.logits.argmax(-1) == o.labels).sum()) for o in outs)
    count = sum(int(o.num_label_tokens) for o in outs)
    logged = trainer.callback_metrics["val/mlm_acc"].double()
    torch.testing.assert_close(logged, torch.tensor(correct / count, dtype=torch.double))
