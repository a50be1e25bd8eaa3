"""Values checked where they are declared, and Lightning settings checked against Lightning, before any work."""

from __future__ import annotations

import typing

import lightning as L
import pytest
import torch
from famlab.experiments.commands import cli
from famlab.experiments.configuration.lightning_check import accelerator_choices, precision_choices, strategy_choices
from famlab.experiments.perf.hardware import precision_dtype

# (override, fragment of the one-line error): the key, the value and the valid range or choices
CASES = [
    ("objective.noise_density=inf", "objective.noise_density=inf must be in (0, 0.5]"),
    ("objective.mask_rate=1", "objective.mask_rate=1.0 must be in (0, 1)"),
    ("objective.mean_span=0.5", "objective.mean_span=0.5 must be in [1, "),
    ("optim.lr=nan", "optim.lr=nan must be in (0, 10]"),
    ("optim.name=sgd", "optim.name=sgd is not one of: adamw, adafactor"),
    ("optim.betas=[0.9,1.5]", "optim.betas=1.5 must be in [0, 1)"),
    ("model.dropout=1", "model.dropout=1.0 must be in [0, 1)"),
    ("finetune.dropout=-0.1", "finetune.dropout=-0.1 must be in [0, 1)"),
    ("model.norm_eps=inf", "model.norm_eps=inf must be in (0, 1)"),
    ("data.tokenizer.vocab_size=99999999999", "data.tokenizer.vocab_size=99999999999 must be in [1, 16777216]"),
    ("data.tokenizer.vocab_size=100", "data.tokenizer.vocab_size=100 is below 366"),
    ("trainer.devices=99999999999", "trainer.devices=99999999999 but this machine has"),
    ("trainer.devices=0", "trainer.devices=0 must be auto, a count >= 1"),
    ("trainer.num_nodes=0", "trainer.num_nodes=0 must be in [1, 100000]"),
    ("trainer.precision=banana", "trainer.precision='banana' is not one of: auto, "),
    ("trainer.strategy=fsdpp", "trainer.strategy='fsdpp' is not one of: auto, ddp, "),
    ("trainer.accelerator=tpux", "trainer.accelerator='tpux' is not one of: auto, gpu, "),
    ("trainer.compile=maybe", "trainer.compile: Value 'maybe' is not a valid bool"),
    ("seed=-1", "seed=-1 must be in [0, 4294967295]"),
    ("model.num_layers=1024 model.dim=8192 model.num_heads=64", "model too large for this machine"),  # ~13 TB
    ("data.seq_len=[1,2", "cannot parse override 'data.seq_len=[1,2'"),
    ("objective.name=a\x07b", "override 'objective.name=a\\x07b' contains control character U+0007"),
    ("model.dim.x=3", "override 'model.dim.x=3': model.dim is a value, not a section"),
    ("model=3", "override 'model=3': model is a section"),
    ("data.corpus=/no/such/file.txt", "data.corpus=/no/such/file.txt: no such corpus file"),
]


@pytest.mark.parametrize("token,fragment", CASES, ids=[c[0].encode("unicode_escape").decode() for c in CASES])
def test_config_refuses_bad_values_in_one_line(token, fragment, capsys):
    assert cli.main(["config", "gpt", *token.split(" ")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("famlab: error: ") and "\n" not in err and fragment in err, err


def test_choices_are_lightnings_own():
    """The lists come from Lightning's registries and precision literals (this fails if Lightning moves them)."""
    from lightning.fabric import connector
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    assert set(accelerator_choices()) == {"auto", "gpu", *AcceleratorRegistry.available_accelerators()}
    assert strategy_choices() == ["auto", *StrategyRegistry.available_strategies()]
    lightning_precisions = typing.get_args(connector._PRECISION_INPUT_STR)
    assert set(lightning_precisions) <= set(precision_choices()) and "bf16-mixed" in lightning_precisions


@pytest.mark.parametrize("precision", ["32-true", "64-true", "bf16-mixed", "16-true", "32", "bf16"])
def test_accepted_precisions_build_a_lightning_trainer(precision, capsys):
    """What famlab config accepts, Lightning accepts; what it refuses, Lightning refuses too."""
    assert cli.main(["config", "gpt", f"trainer.precision={precision}", "trainer.accelerator=cpu"]) == 0
    L.Trainer(accelerator="cpu", precision=precision, logger=False, enable_checkpointing=False)
    with pytest.raises(ValueError):
        L.Trainer(accelerator="cpu", precision="banana", logger=False)


def test_mfu_dtype_follows_the_precision():
    """perf/mfu divides by the peak of the dtype the matmuls run in (fp32 at 32-true, bf16 at bf16-mixed)."""
    assert precision_dtype("32-true") is torch.float32 and precision_dtype("bf16-mixed") is torch.bfloat16
    assert precision_dtype("16-mixed") is torch.float16 and precision_dtype("64-true") is torch.float64
