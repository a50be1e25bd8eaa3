"""Tripwires: each library internal famlab relies on (experiments/libraries/internals.py, and the ones ``families``
keeps: families/compile.py, in test_compile.py) still has the shape and behaviour famlab
uses, and the public hooks that replaced the others still behave as relied on.

A failure names the library and the attribute; docs/architecture.md ("Library internals we rely on") says where
each is used.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from famlab.experiments.libraries import internals
from famlab.experiments.plumbing.checkpoints import PREV_NAME, KeepPreviousCheckpointIO, keep_previous_last, save_last
from famlab.experiments.plumbing.csv_logger import AppendingCSVLogger
from lightning.pytorch.loggers import CSVLogger


def test_lightning_csv_writer_keeps_its_columns_in_metrics_keys(tmp_path):
    """lightning: the CSVLogger's writer has a ``metrics_keys`` list that is the file's header."""
    library, attribute = internals.CSV_WRITER_KEYS
    writer = CSVLogger(save_dir=str(tmp_path), name="", version="").experiment
    keys = getattr(writer, "metrics_keys", None)
    assert isinstance(keys, list), f"{library} changed {attribute}: the CSV writer has no metrics_keys list"
    writer.log_metrics({"b": 1.0, "a": 2.0}, step=0)
    writer.save()
    assert keys is writer.metrics_keys and keys == ["a", "b", "step"], f"{library} changed {attribute}: {keys}"
    assert Path(writer.metrics_file_path).read_text().splitlines()[0] == "a,b,step"


def test_appending_csv_logger_continues_the_file_under_its_header(tmp_path):
    """The behaviour built on it: a resumed run's rows append under the kept header; a new column widens it."""
    old = "a,b,step\n1.0,,0\n,2.0,1\n"
    (tmp_path / "metrics.csv").write_text(old)
    logger = AppendingCSVLogger(save_dir=str(tmp_path), name="", version="")
    logger.log_metrics({"a": 3.0}, step=2)
    logger.save()
    assert (tmp_path / "metrics.csv").read_text() == old + "3.0,,2\n"
    logger.log_metrics({"c": 4.0}, step=3)
    logger.save()
    assert (tmp_path / "metrics.csv").read_text().splitlines() == [
        "a,b,c,step", "1.0,,,0", ",2.0,,1", "3.0,,,2", ",,4.0,3"]


def test_wandb_run_console_stop_is_a_method_without_arguments():
    """wandb: ``Run._console_stop(self)`` exists (stop_console_copy calls it on runs left open)."""
    from wandb.sdk.wandb_run import Run

    library, attribute = internals.WANDB_CONSOLE_STOP
    stop = getattr(Run, "_console_stop", None)
    assert callable(stop), f"{library} removed {attribute}"
    assert list(inspect.signature(stop).parameters) == ["self"], f"{library} changed {attribute}'s signature"


def test_stop_console_copy_skips_a_run_without_it():
    """A wandb without ``_console_stop`` degrades to no-op instead of failing the run."""
    internals.stop_console_copy(object())


def test_wandb_run_log_artifact_takes_the_keywords_log_used_artifact_passes():
    """wandb: ``Run._log_artifact(artifact, aliases=, is_user_created=, use_after_commit=)`` (log_used_artifact, an
    offline run's use of an artifact; tests/experiments/test_wandb_lineage.py checks the record it writes)."""
    from wandb.sdk.wandb_run import Run

    library, attribute = internals.WANDB_LOG_ARTIFACT
    method = getattr(Run, "_log_artifact", None)
    assert callable(method), f"{library} removed {attribute}"
    params = inspect.signature(method).parameters
    missing = {"aliases", "is_user_created", "use_after_commit"} - set(params)
    assert not missing, f"{library} changed {attribute}: no {sorted(missing)}"


def test_lightning_precision_literals_are_the_values_a_trainer_accepts():
    """lightning: ``connector._PRECISION_INPUT_STR`` and ``_PRECISION_INPUT_STR_ALIAS`` are ``Literal`` types of
    precision strings (lightning_precisions, the ``trainer.precision`` choices)."""
    library, attribute = internals.LIGHTNING_PRECISIONS
    try:
        values = internals.lightning_precisions()
    except AttributeError as e:
        raise AssertionError(f"{library} moved {attribute}: {e}") from None
    assert values and all(isinstance(v, str) for v in values), f"{library} changed {attribute}: {values}"
    assert {"32-true", "bf16-mixed", "16-mixed", "32"} <= set(values), f"{library} changed {attribute}: {values}"


def test_omegaconf_nodes_are_read_unresolved_and_none_sections_skipped():
    """omegaconf: ``DictConfig._is_none()`` and ``DictConfig._get_node(key)`` (config_child, the check of an
    override's nesting): the child node as stored, an interpolation left unresolved."""
    from omegaconf import DictConfig, OmegaConf

    library, attribute = internals.OMEGACONF_NODES
    cfg = OmegaConf.create({"a": {"b": 1, "c": "${a.b}"}, "e": 2})
    section = DictConfig(None)  # a section set to None: its own `in` fails, _is_none() says so first
    try:
        a, c = internals.config_child(cfg, "a"), internals.config_child(internals.config_child(cfg, "a"), "c")
        none_section = internals.config_child(section, "x")
    except AttributeError as e:
        raise AssertionError(f"{library} changed {attribute}: {e}") from None
    assert isinstance(a, DictConfig), f"{library} changed {attribute}: {type(a)}"
    assert c is not None and c._value() == "${a.b}", f"{library} changed {attribute}: an interpolation was resolved"
    assert none_section is None and internals.config_child(cfg, "missing") is None
    assert internals.config_child(internals.config_child(cfg, "e"), "x") is None  # a value is not a section


def test_torch_dispatch_mode_sees_each_aten_op():
    """torch: ``torch.utils._python_dispatch.TorchDispatchMode`` (experiments/perf/breakdown.py times each aten op
    under one): a subclass's ``__torch_dispatch__`` sees every op run inside it."""
    library, attribute = internals.TORCH_DISPATCH_MODE
    seen: list[str] = []

    class Names(internals.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    with Names():
        torch.ones(2, 3) @ torch.ones(3, 2)
    assert "mm" in seen, f"{library} changed {attribute}: saw {seen}"


def test_hf_models_name_their_attention_implementation():
    """transformers: a model's ``config._attn_implementation`` is the attention it runs (hf_attention_implementation,
    the ``hf_attn`` column of ``famlab bench``)."""
    transformers = pytest.importorskip("transformers")
    library, attribute = internals.HF_ATTN_IMPLEMENTATION
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=16, n_positions=8)
    name = internals.hf_attention_implementation(transformers.GPT2LMHeadModel(config).config)
    assert name in ("eager", "sdpa", "flash_attention_2", "flex_attention"), f"{library} changed {attribute}: {name!r}"


def test_lightning_module_trainer_raises_when_detached():
    """lightning: the public ``LightningModule.trainer`` raises ``RuntimeError`` outside a ``Trainer``
    (objectives/optim.py ``attached_trainer`` reads None from it), and is the Trainer once attached."""
    from famlab.objectives.optim import attached_trainer

    module = _Tiny()
    assert attached_trainer(module) is None
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu")
    trainer.fit(module)
    assert attached_trainer(module) is trainer


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(2))

    def training_step(self, batch, batch_idx):
        return (self.w * batch).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.ones(4, 2), batch_size=2)


def test_last_ckpt_writes_go_through_the_strategy_checkpoint_io(tmp_path):
    """lightning: ``Strategy.checkpoint_io`` is settable and ``trainer.save_checkpoint`` writes through it, so the
    previous ``last.ckpt`` survives as ``last-prev.ckpt``."""
    trainer = pl.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu")
    module = _Tiny()
    trainer.fit(module)
    keep_previous_last(trainer)
    keep_previous_last(trainer)  # once only
    io = trainer.strategy.checkpoint_io
    assert isinstance(io, KeepPreviousCheckpointIO) and not isinstance(io.inner, KeepPreviousCheckpointIO)
    first = module.w.detach().clone()
    save_last(trainer, tmp_path)
    with torch.no_grad():
        module.w.add_(1.0)
    save_last(trainer, tmp_path)
    prev = torch.load(tmp_path / PREV_NAME, weights_only=True)["state_dict"]["w"]
    last = torch.load(tmp_path / "last.ckpt", weights_only=True)["state_dict"]["w"]
    torch.testing.assert_close(prev, first)
    torch.testing.assert_close(last, first + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last-prev.ckpt", "last.ckpt"]


def test_submitit_local_jobs_keep_their_controller_process_and_pass_sigterm_to_the_task(tmp_path):
    """submitit: a LocalJob holds its controller as ``_process``; a SIGTERM to it reaches the job's task (which
    checkpoints), where ``cancel``'s SIGINT would make the controller kill the task."""
    import signal
    import time

    submitit = pytest.importorskip("submitit")
    library, attribute = internals.SUBMITIT_LOCAL_PROCESS
    executor = submitit.LocalExecutor(folder=tmp_path)
    executor.update_parameters(timeout_min=5)
    from tests.experiments.group_jobs import sleep_until_sigterm

    job = executor.submit(sleep_until_sigterm, str(tmp_path / "got"))
    pid = internals.submitit_local_controller(job)
    assert pid is not None, f"{library} changed {attribute}: a LocalJob has no controller process"
    deadline = time.time() + 120
    while not (tmp_path / "ready").exists():
        assert time.time() < deadline and not job.done(), "the job never started"
        time.sleep(0.1)
    import os

    os.kill(pid, signal.SIGTERM)
    assert job.result() == "SIGTERM", f"{library} changed {attribute}: SIGTERM to the controller did not reach the task"

