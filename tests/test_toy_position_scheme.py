"""A position scheme is registered, not written into famlab: a test-only scheme, registered here and nowhere else, goes
through famlab unchanged.

``clock`` is the sinusoidal scheme computed for each call instead of read from a table of ``model.max_seq_len``
rows, so it is not length bounded. ``register_positions`` is all it takes: ``model.pos`` validation, the network
build, the stack's length check, validation at 2x / 4x the training length, ``famlab compare`` (pretraining, bits
per byte, zero-shot, fine-tunes, probe, report), ``famlab finetune`` and ``famlab eval`` (docs/architecture.md,
"Adding a position scheme").
"""

import json
import math
from typing import ClassVar

import pytest
import torch
import yaml
from famlab.families import ModelConfig, build_network
from famlab.families.blocks.positions import Positions, register_positions, unregister_positions
from famlab.families.config import POSITIONS, ConfigError, PosScheme
from torch import Tensor

NAME = "clock"


class ClockPositions(Positions):
    """Sin/cos absolute positions (Vaswani et al. 2017) computed from the positions given: any length."""

    scheme: ClassVar[PosScheme] = PosScheme.NONE  # set to the registered member by the fixture

    inv: Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        inv = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
        self.register_buffer("inv", inv, persistent=False)

    def embed(self, position_ids: Tensor) -> Tensor:
        angles = position_ids[..., None].float() * self.inv  # (..., C/2)
        out = torch.zeros(*position_ids.shape, self.dim)
        out[..., 0::2] = torch.sin(angles)
        out[..., 1::2] = torch.cos(angles)[..., : self.dim // 2]
        return out


def clock(*, dim: int, num_heads: int, head_dim: int, max_len: int, causal: bool) -> Positions:
    return ClockPositions(dim)


@pytest.fixture
def registered():
    ClockPositions.scheme = register_positions(NAME, clock, length_bounded=False)
    try:
        yield ClockPositions.scheme
    finally:
        unregister_positions(NAME)
        ClockPositions.scheme = PosScheme.NONE
    assert NAME not in POSITIONS


def gpt(pos: str, seed: int = 0):
    torch.manual_seed(seed)
    return build_network(ModelConfig(family="gpt", pos=pos, vocab_size=300, dim=32, num_layers=2, num_heads=2,
                                     max_seq_len=16)).eval()  # no dropout


def test_it_is_a_model_pos_value_only_while_registered(registered):
    assert PosScheme(NAME) == registered and not registered.length_bounded and PosScheme.LEARNED.length_bounded
    assert gpt(NAME).config.pos == registered and POSITIONS.added() == (NAME,)
    with pytest.raises(ConfigError, match="registered already"):
        register_positions(NAME, clock, length_bounded=False)
    with pytest.raises(ConfigError, match="registered already"):
        register_positions("rope", clock, length_bounded=False)


def test_it_equals_the_sinusoidal_table_within_the_training_length_and_runs_past_it(registered):
    """Same weights (the sinusoidal table is not in the state dict): the same logits up to model.max_seq_len; past it
    the table's network refuses the input and the registered scheme, not length bounded, runs."""
    table, computed = gpt("sinusoidal"), gpt(NAME, seed=1)
    computed.load_state_dict(table.state_dict())
    ids = torch.randint(10, 290, (2, 16))
    torch.testing.assert_close(computed(ids).logits, table(ids).logits)
    longer = torch.randint(10, 290, (2, 40))
    assert computed(longer).logits.shape == (2, 40, 300)
    with pytest.raises(ValueError, match="max_seq_len"):
        table(longer)


def test_a_factory_whose_class_names_another_scheme_is_refused():
    register_positions(NAME, clock, length_bounded=False)  # ClockPositions.scheme left at none
    try:
        with pytest.raises(ValueError, match="set its scheme"):
            gpt(NAME)
    finally:
        unregister_positions(NAME)


@pytest.mark.slow
def test_famlab_compare_finetune_and_eval_take_it(registered, tmp_path, monkeypatch):
    """The registered scheme through the commands, as a user would run them: ``famlab compare model.pos=clock`` (GPT,
    its length columns at 2x and 4x measured rather than refused), then ``famlab finetune`` and ``famlab eval``."""
    from famlab.experiments.commands import cli

    from tests.experiments.test_compare import tiny_inputs
    from tests.toy_walk import finetune_and_eval

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    inputs = tiny_inputs(tmp_path)
    assert cli.main(["compare", *inputs, "compare.families=[gpt]", f"model.pos={NAME}", "compare.zero_shot_items=8",
                     "run_dir=cmp"]) == 0
    pretrained = tmp_path / "cmp" / "gpt-pretrain-s0"
    results = json.loads((pretrained / "results.json").read_text())
    assert yaml.safe_load((pretrained / "config.yaml").read_text())["model"]["pos"] == NAME
    lengths = results["length_extrapolation"]
    assert all(point["loss"] is not None for point in lengths.values()), lengths
    assert "zero_shot" in json.loads((pretrained / "eval.json").read_text())

    tuned, scored = finetune_and_eval(pretrained, inputs, tmp_path)
    assert tuned["family"] == "gpt" and scored["num_items"] == 6
