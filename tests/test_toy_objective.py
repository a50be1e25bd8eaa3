"""An objective is registered, not written into famlab: a test-only objective, registered here and nowhere else, goes
through famlab unchanged.

``half_clm`` is GPT's causal LM with the loss on the second half of each block only (the first half is context); its
own setting ``objective.context_fraction`` (declared on its ``Entry``, default 0.5) moves that split. Registering its
``Entry`` for the decoder architecture is all it takes: ``make_objective``, ``objective.name`` and
``compare.objectives`` validation, ``famlab presets``, ``famlab compare`` (an arm beside ``clm``: pretraining, bits
per byte, zero-shot, fine-tunes, probe, report), ``famlab finetune`` and ``famlab eval`` from its run read the
registry; no library file names it (docs/architecture.md, "Adding an objective").
"""

import json
from collections.abc import Sequence

import pytest
import torch
import yaml
from famlab.families.formats import Arch
from famlab.objectives import ObjectiveError, TokenIds, check_pair, make_objective
from famlab.objectives.corruption import IGNORE
from famlab.objectives.objective import Batch, CausalLM
from famlab.objectives.registry import (
    REGISTRY,
    Entry,
    Setting,
    families_of,
    objectives_of,
    register_objective,
    unregister_objective,
)

NAME = "half_clm"


class HalfCLM(CausalLM):
    """Causal LM whose loss covers the end of each block: its first ``context_fraction`` (half by default) is read,
    never predicted."""

    name = NAME
    built: list[float] = []  # the context_fraction of every HalfCLM built in this process, in order

    def __init__(self, ids: TokenIds, seq_len: int, generator: torch.Generator | None,
                 context_fraction: float = 0.5) -> None:
        super().__init__(ids, seq_len, generator)
        self.context_fraction = context_fraction
        HalfCLM.built.append(context_fraction)

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        batch = super().collate(samples)
        labels = batch["labels"].clone()  # CausalLM's inputs and labels are views of one block: never write in place
        labels[:, : int(labels.shape[1] * self.context_fraction)] = IGNORE
        return {**batch, "labels": labels}


def build_half(ids: TokenIds, n: int, g: torch.Generator | None, s) -> HalfCLM:
    if not 0.0 <= s["context_fraction"] < 1.0:
        raise ObjectiveError(f"objective.context_fraction={s['context_fraction']} must be in [0, 1)")
    return HalfCLM(ids, n, g, s["context_fraction"])


def half_entry() -> Entry:
    """Its registry entry: no famlab objective setting read, one setting of its own."""
    return Entry(HalfCLM, (), build_half, own={"context_fraction": Setting(0.5, float)})


@pytest.fixture
def half():
    entry = register_objective(Arch.DECODER, NAME, half_entry())
    try:
        yield entry
    finally:
        unregister_objective(Arch.DECODER, NAME)
    assert NAME not in REGISTRY["gpt"]


def token_ids() -> TokenIds:
    return TokenIds(vocab_size=300, pad=0, unk=1, cls=2, sep=3, mask=4, bos=5, eos=6, r=7, x=8, s=9,
                    sentinel_ids=[299 - i for i in range(20)])


def test_the_registry_lists_it_for_its_architecture_only_while_registered(half):
    assert NAME in objectives_of("gpt") and objectives_of("gpt")[0] == "clm"  # the family's default stays first
    assert families_of(NAME) == ["gpt"] and NAME not in REGISTRY["bert"] and NAME not in REGISTRY["t5"]
    check_pair("gpt", NAME)
    with pytest.raises(ObjectiveError, match=f"objective.name={NAME} cannot train model.family=t5"):
        check_pair("t5", NAME)
    with pytest.raises(ValueError, match="registered already"):
        register_objective(Arch.DECODER, NAME, half_entry())
    with pytest.raises(ValueError, match="built in"):
        unregister_objective(Arch.DECODER, "clm")


def test_a_registration_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="is named 'half_clm'"):
        register_objective(Arch.DECODER, "other", half_entry())
    with pytest.raises(ValueError, match="not objective settings"):
        register_objective(Arch.DECODER, NAME, Entry(HalfCLM, ("temperature",), half_entry().build))
    assert NAME not in REGISTRY["gpt"]


def test_its_batches_label_the_second_half_only(half):
    objective = make_objective(NAME, token_ids(), seq_len=16, family="gpt")
    assert isinstance(objective, HalfCLM) and objective.raw_block_len == 17
    batch = objective.collate([torch.arange(10, 27), torch.arange(30, 47)])
    assert (batch["labels"][:, :8] == IGNORE).all()
    torch.testing.assert_close(batch["labels"][:, 8:], torch.stack([torch.arange(19, 27), torch.arange(39, 47)]))
    torch.testing.assert_close(batch["input_ids"], torch.stack([torch.arange(10, 26), torch.arange(30, 46)]))



def test_its_own_setting_reaches_its_builder_checked_against_its_type(half):
    """``context_fraction`` is declared on its Entry: ``make_objective`` takes it (an int as a float), fills its
    default, and refuses a wrong type or a setting the chosen objective does not declare, one line each."""
    ids = token_ids()
    quarter = make_objective(NAME, ids, seq_len=16, family="gpt", context_fraction=0.25)
    labels = quarter.collate([torch.arange(10, 27)])["labels"]
    assert (labels[:, :4] == IGNORE).all() and (labels[:, 4:] != IGNORE).all()
    assert make_objective(NAME, ids, seq_len=16, family="gpt").context_fraction == 0.5
    assert make_objective(NAME, ids, seq_len=16, family="gpt", context_fraction=0).context_fraction == 0.0
    with pytest.raises(ObjectiveError) as err:
        make_objective(NAME, ids, seq_len=16, family="gpt", context_fraction="half")
    assert str(err.value) == "objective.context_fraction='half' must be of type float (got str)"
    with pytest.raises(ObjectiveError, match="objective.context_fraction is not an objective setting"):
        make_objective("clm", ids, seq_len=16, family="gpt", context_fraction=0.25)


def test_an_own_setting_that_famlab_already_has_is_refused():
    taken = Entry(HalfCLM, (), build_half, own={"mask_rate": Setting(0.5, float)})
    with pytest.raises(ValueError, match="declares objective.mask_rate as its own"):
        register_objective(Arch.DECODER, NAME, taken)
    assert NAME not in REGISTRY["gpt"]


def refusal(cli, capsys, args: list[str]) -> str:
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_famlab_pretrain_refuses_a_wrong_type_and_a_setting_its_objective_does_not_read(half, tmp_path, capsys):
    """From the command line: ``objective.context_fraction`` is refused in one line when it is not a float, when the
    chosen objective is a built-in one (``clm`` declares no setting of its own), and (as any unknown key) when no
    registered objective declares it."""
    from famlab.experiments.commands import cli

    base = ["pretrain", "gpt", "tiny", f"run_dir={tmp_path / 'run'}", "wandb.mode=disabled"]
    err = refusal(cli, capsys, [*base, f"objective.name={NAME}", "objective.context_fraction=abc"])
    assert err == "famlab: error: objective.context_fraction='abc' must be of type float (got str)\n"
    err = refusal(cli, capsys, [*base, "objective.name=clm", "objective.context_fraction=0.25"])
    assert err == ("famlab: error: objective.context_fraction is not a setting of objective.name=clm "
                   "(its own settings: none)\n")
    err = refusal(cli, capsys, [*base, "objective.context_fraction=0.25"])  # gpt's default objective: clm
    assert "objective.context_fraction is not a setting of objective.name=clm" in err
    assert not (tmp_path / "run").exists()


def test_famlab_config_records_it_under_objective_own_with_its_default(half, capsys):
    from famlab.experiments.commands import cli

    assert cli.main(["config", "gpt", "tiny", f"objective.name={NAME}", "objective.context_fraction=0.25"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["objective"]["own"] == {"context_fraction": 0.25}
    assert cli.main(["config", "gpt", "tiny", f"objective.name={NAME}"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["objective"]["own"] == {"context_fraction": 0.5}
    assert cli.main(["config", "gpt", "tiny"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["objective"]["own"] == {}



def test_a_run_with_its_own_setting_resumes_under_the_same_value_only(half, tmp_path):
    """The stored config.yaml keeps ``objective.own``; a resume compares it key by key like every other setting (the
    schema's default ``own = {}`` must not read as a changed key)."""
    from famlab.experiments.configuration.compose import compose, to_plain
    from famlab.experiments.configuration.config import ConfigInputError
    from famlab.experiments.plumbing.resume import check_resumed_config

    def plain(value: str) -> dict:
        return to_plain(compose(["gpt", "tiny"], [f"objective.name={NAME}", f"objective.context_fraction={value}"]).cfg)

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(plain("0.25"), sort_keys=False))
    check_resumed_config(tmp_path, plain("0.25"))
    with pytest.raises(ConfigInputError, match=r"objective.own.context_fraction"):
        check_resumed_config(tmp_path, plain("0.5"))

@pytest.mark.slow
def test_famlab_pretrain_passes_its_own_setting_to_the_objective(half, tmp_path, monkeypatch):
    """``famlab pretrain ... objective.context_fraction=0.25`` trains with a HalfCLM built with 0.25, and its
    config.yaml keeps the value."""
    from famlab.experiments.commands import cli

    from tests.experiments.reliability_helpers import fast_args, write_corpus

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    corpus = write_corpus(tmp_path / "corpus.txt")
    HalfCLM.built.clear()
    args = [*fast_args(corpus, tmp_path / "run", 2), f"objective.name={NAME}", "objective.context_fraction=0.25"]
    assert cli.main(args) == 0
    assert HalfCLM.built and set(HalfCLM.built) == {0.25}
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["objective"] == {**config["objective"], "name": NAME, "own": {"context_fraction": 0.25}}

@pytest.mark.slow
def test_famlab_presets_compare_finetune_and_eval_take_it(half, tmp_path, monkeypatch, capsys):
    """The registered objective through the commands, as a user would run them: ``famlab presets`` lists it,
    ``famlab compare compare.objectives=[clm,half_clm]`` makes it an arm beside GPT's own objective, then
    ``famlab finetune`` and ``famlab eval`` from its pretraining run."""
    from famlab.experiments.commands import cli

    from tests.experiments.test_compare import tiny_inputs
    from tests.toy_walk import finetune_and_eval

    assert cli.main(["presets"]) == 0
    assert any(line.split()[:1] == ["gpt"] and NAME in line for line in capsys.readouterr().out.splitlines())

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    inputs = tiny_inputs(tmp_path)
    assert cli.main(["compare", *inputs, "compare.families=[gpt]", f"compare.objectives=[clm,{NAME}]",
                     "compare.zero_shot_items=8", "run_dir=cmp"]) == 0
    results = json.loads((tmp_path / "cmp" / "results.json").read_text())
    assert set(results["families"]) == {"gpt-clm", f"gpt-{NAME}"} and f"gpt-{NAME}" in results["tables"]["gains"]
    pretrained = tmp_path / "cmp" / f"gpt-{NAME}-pretrain-s0"
    assert json.loads((pretrained / "results.json").read_text())["objective"] == NAME
    assert "zero_shot" in json.loads((pretrained / "eval.json").read_text())

    tuned, scored = finetune_and_eval(pretrained, inputs, tmp_path)
    assert tuned["family"] == "gpt" and scored["num_items"] == 6


def test_a_sweep_file_may_sweep_its_own_setting(half, tmp_path, capsys):
    """``objective.context_fraction`` is a key while the objective that declares it is registered: a sweep file may
    grid it, and every trial's command carries its value (``--dry-run`` composes each trial first)."""
    from famlab.experiments.commands.cli import main

    sweep = tmp_path / "own.yaml"
    sweep.write_text("method: grid\nparameters:\n  objective.context_fraction: {values: [0.25, 0.75]}\n"
                     f"  objective.name: {{value: {NAME}}}\n  model.family: {{value: gpt}}\n"
                     "command: [famlab, pretrain, tiny, '${args_no_hyphens}']\n", encoding="utf-8")
    assert main(["sweep", str(sweep), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "objective.context_fraction=0.25" in out and "objective.context_fraction=0.75" in out
    assert out.count("famlab pretrain tiny") == 2


def test_a_sweep_file_may_not_sweep_an_own_setting_nobody_declares(tmp_path, capsys):
    """Without the objective registered, the same key is not a famlab key: one line naming it."""
    from famlab.experiments.commands.cli import main

    sweep = tmp_path / "own.yaml"
    sweep.write_text("method: grid\nparameters:\n  objective.context_fraction: {values: [0.25]}\n"
                     "command: [famlab, pretrain, tiny, '${args_no_hyphens}']\n", encoding="utf-8")
    assert main(["sweep", str(sweep), "--dry-run"]) == 2
    assert "'objective.context_fraction' is not a famlab config key" in capsys.readouterr().err
