"""An objective is registered, not written into famlab: a test-only objective, registered here and nowhere else, goes
through famlab unchanged.

``half_clm`` is GPT's causal LM with the loss on the second half of each block only (the first half is context).
Registering its ``Entry`` for the decoder architecture is all it takes: ``make_objective``, ``objective.name`` and
``compare.objectives`` validation, ``famlab presets``, ``famlab compare`` (an arm beside ``clm``: pretraining, bits
per byte, zero-shot, fine-tunes, probe, report), ``famlab finetune`` and ``famlab eval`` from its run read the
registry; no library file names it (docs/architecture.md, "Adding an objective").
"""

import json
from collections.abc import Sequence

import pytest
import torch
from famlab.families.formats import Arch
from famlab.objectives import ObjectiveError, TokenIds, check_pair, make_objective
from famlab.objectives.corruption import IGNORE
from famlab.objectives.objective import Batch, CausalLM
from famlab.objectives.registry import (
    REGISTRY,
    Entry,
    families_of,
    objectives_of,
    register_objective,
    unregister_objective,
)

NAME = "half_clm"


class HalfCLM(CausalLM):
    """Causal LM whose loss covers the second half of each block: the first half is read, never predicted."""

    name = NAME

    def collate(self, samples: Sequence[torch.Tensor]) -> Batch:
        batch = super().collate(samples)
        labels = batch["labels"].clone()  # CausalLM's inputs and labels are views of one block: never write in place
        labels[:, : labels.shape[1] // 2] = IGNORE
        return {**batch, "labels": labels}


def half_entry() -> Entry:
    return Entry(HalfCLM, (), lambda ids, n, g, s: HalfCLM(ids, n, g))


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
