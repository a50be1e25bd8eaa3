"""PretrainDataModule under a real Lightning Trainer: the sampler position travels in the checkpoint."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from famlab.datamodules import Corpus, PretrainDataModule


class _Recorder(pl.LightningModule):
    """Records every training batch; its loss is a constant-gradient dummy (the data order is under test)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.seen.append(batch.clone())
        return self.w * batch.float().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class _SaveAt(pl.Callback):
    """Saves a checkpoint after the given global step, where ModelCheckpoint would (train batch end)."""

    def __init__(self, step: int, path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def _fit(dm, max_steps, ckpt_path=None, callbacks=()):
    module = _Recorder()
    trainer = pl.Trainer(max_steps=max_steps, use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         accelerator="cpu", devices=1, callbacks=list(callbacks))
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return trainer, module


@pytest.mark.parametrize("where", ["mid_epoch", "last_batch_of_epoch"])
def test_interrupted_and_resumed_fit_sees_the_same_batches(small_corpus, small_bundle, tmp_path, where):
    """Resuming from a mid-epoch checkpoint replays exactly the batches the uninterrupted run saw after it."""
    corpus = Corpus(small_corpus.train[:60], small_corpus.val[:20], "c60", f"c60-{small_corpus.hash}")

    def make():
        return PretrainDataModule(corpus, small_bundle, block_len=8, batch_size=4, collate_fn=torch.stack,
                                  separator_id=small_bundle.special_ids["eos"], cache_dir=tmp_path, shuffle=True)

    per_epoch = make().num_train_blocks // 4
    total = per_epoch + per_epoch // 2  # crosses one epoch boundary
    cut = per_epoch // 3 if where == "mid_epoch" else per_epoch
    ckpt = tmp_path / "mid.ckpt"
    _, full = _fit(make(), total, callbacks=[_SaveAt(cut, ckpt)])
    resumed_trainer, rest = _fit(make(), total, ckpt_path=ckpt)
    assert resumed_trainer.global_step == total
    assert len(full.seen) == total and len(rest.seen) == total - cut
    assert torch.equal(torch.stack(rest.seen), torch.stack(full.seen[cut:]))
    # The second epoch is a different permutation of the same blocks.
    assert not torch.equal(full.seen[0], full.seen[per_epoch])


def _noisy(blocks: list[torch.Tensor]) -> torch.Tensor:
    """A random collator, as the objectives' (masks, span noise): draws from the torch RNG it runs under."""
    batch = torch.stack(blocks)
    return batch + torch.randint(0, 1000, batch.shape) * 10_000


def _noisy_dm(corpus, bundle, tmp_path):
    corpus = Corpus(corpus.train[:60], corpus.val[:20], "c60", f"c60-{corpus.hash}")
    dm = PretrainDataModule(corpus, bundle, block_len=8, batch_size=4, collate_fn=_noisy,
                            separator_id=bundle.special_ids["eos"], cache_dir=tmp_path, shuffle=True)
    dm.use_collation_stream(7)
    return dm


def test_collation_stream_resumes_exactly_and_leaves_the_global_rng_alone(small_corpus, small_bundle, tmp_path):
    """The DataModule's own collation stream travels in its state: a resumed fit collates the same noise,
    and collation draws nothing from the global torch RNG (which dropout uses)."""
    cut, total = 3, 7
    ckpt = tmp_path / "mid.ckpt"
    _, full = _fit(_noisy_dm(small_corpus, small_bundle, tmp_path), total, callbacks=[_SaveAt(cut, ckpt)])
    state = torch.load(ckpt, weights_only=True)["PretrainDataModule"]
    assert len(state["collate"]) == 1 and state["collate"][0].dtype == torch.uint8  # one rank's torch RNG state
    _, rest = _fit(_noisy_dm(small_corpus, small_bundle, tmp_path), total, ckpt_path=ckpt)
    assert torch.equal(torch.stack(rest.seen), torch.stack(full.seen[cut:]))
    assert (torch.stack(full.seen) >= 10_000).any()  # the noise is there

    dm = _noisy_dm(small_corpus, small_bundle, tmp_path)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    next(iter(dm.train_dataloader()))
    assert torch.equal(torch.get_rng_state(), before)


def test_checkpoint_with_collation_states_in_the_rng_callback_still_resumes(small_corpus, small_bundle, tmp_path):
    """Checkpoints written while the collation stream lived in the RNG callback (``famlab_rng[rank]["collate"]``,
    nothing in the DataModule's state) resume to the same batches."""
    from famlab.experiments.plumbing.rng import RNG_KEY, RNGStateCallback

    cut, total = 3, 7
    ckpt, old = tmp_path / "mid.ckpt", tmp_path / "old.ckpt"
    _, full = _fit(_noisy_dm(small_corpus, small_bundle, tmp_path), total,
                   callbacks=[_SaveAt(cut, ckpt), RNGStateCallback(seed=7)])
    checkpoint = torch.load(ckpt, weights_only=True)
    states = checkpoint["PretrainDataModule"].pop("collate")
    checkpoint[RNG_KEY] = [{**entry, "collate": s} for entry, s in zip(checkpoint[RNG_KEY], states, strict=True)]
    torch.save(checkpoint, old)
    _, rest = _fit(_noisy_dm(small_corpus, small_bundle, tmp_path), total, ckpt_path=old,
                   callbacks=[RNGStateCallback(seed=7)])
    assert torch.equal(torch.stack(rest.seen), torch.stack(full.seen[cut:]))
