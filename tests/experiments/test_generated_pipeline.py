"""Generated corpora and tasks (``tests/generated_data.py``, 100 random seeds) through the data pipeline only.

Corpus reading, tokenizer training, token files, blocks, one batch of the family's objective and the task's
tokenization, as ``famlab pretrain`` / ``famlab compare`` prepare them, with no training: every corpus either makes
blocks or is refused with a one-line ``ValueError`` (only a corpus smaller than one block may be refused).
"""

from __future__ import annotations

import generated_data
import numpy as np
import pytest
from famlab.datamodules import tokenize_examples
from famlab.experiments.configuration.compose import compose
from famlab.experiments.configuration.task import load_configured_task
from famlab.experiments.steps.pretrain import prepare_data

SEEDS = range(100)
SHAPE = ["data.seq_len=32", "data.max_len=32", "data.batch_size=4", "model.dim=32", "wandb.mode=disabled"]


def test_random_cases_cover_every_dimension():
    """The 100 seeds draw every script, document length, corpus layout, tokenizer kind and vocabulary size."""
    covers = set().union(*(generated_data.random_case(s).covers for s in SEEDS))
    wanted = {f"script:{s}" for s in generated_data.SCRIPTS} | {f"lengths:{n}" for n in generated_data.DOC_LENGTHS}
    wanted |= {f"kind:{k}" for k in generated_data.KINDS} | {"vocab:min", "vocab:huge", "corpus:dir", "pairs"}
    assert wanted <= covers, sorted(wanted - covers)


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_corpus_makes_blocks_or_one_line_error(seed, tmp_path, monkeypatch):
    case = generated_data.random_case(seed)
    monkeypatch.setenv("FAMLAB_CACHE", str(tmp_path / "cache"))
    data = [o for o in case.write(tmp_path / "data") if not o.startswith("compare.")]
    (family,) = case.families
    cfg = compose([family, "tiny"], [*data, *SHAPE]).cfg
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        _, _, bundle, _, dm = prepare_data(cfg, run_dir)
    except ValueError as e:
        assert case.expect_error is not None and case.expect_error in str(e), f"{case.name}: {e}"
        assert "\n" not in str(e).strip(), str(e)
        return
    assert case.expect_error is None, f"{case.name}: expected '{case.expect_error}', got blocks"
    assert dm.ready_file.is_file() and dm.num_train_blocks >= cfg.data.batch_size
    tokens = np.asarray(dm.train_tokens)
    assert tokens.max() < bundle.vocab_size
    batch = next(iter(dm.train_dataloader()))  # the objective's collator on generated tokens (sentinels, masks)
    assert all(v.shape[0] == cfg.data.batch_size for v in batch.values() if hasattr(v, "shape"))
    next(iter(dm.val_dataloader()))
    task = load_configured_task(cfg.data)
    items = tokenize_examples(task.train + task.val + task.test, bundle)
    assert len(items) == len(task.train) + len(task.val) + len(task.test)
    assert all(i < bundle.vocab_size for item in items for i in [*item["input_ids"], *(item["pair_ids"] or [])])
