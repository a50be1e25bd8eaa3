"""PretrainDataModule: packed blocks are exact slices of the seeded document stream; caching; errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from famlab.datamodules import Corpus, DataError, PretrainDataModule, token_dtype


def _stack(samples: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(samples)  # (B, block_len)


def _dm(corpus, bundle, tmp_path, **kw):
    args = dict(block_len=32, batch_size=4, collate_fn=_stack, separator_id=bundle.special_ids["eos"],
                cache_dir=tmp_path, seed=0)
    args.update(kw)
    return PretrainDataModule(corpus, bundle, **args)


def _stream(corpus_docs, bundle, seed, sep):
    order = np.random.default_rng(seed).permutation(len(corpus_docs))
    out = []
    for i in order:
        out += bundle.tokenizer.encode(corpus_docs[i], add_special_tokens=False).ids + [sep]
    return out


def test_blocks_are_exact_slices_of_the_separated_document_stream(small_corpus, small_bundle, tmp_path):
    """Blocks concatenate to the seeded document order joined by the separator, no padding, remainder dropped."""
    dm = _dm(small_corpus, small_bundle, tmp_path)
    dm.prepare_data()
    dm.setup("fit")
    sep = small_bundle.special_ids["eos"]
    stream = _stream(small_corpus.train, small_bundle, 0, sep)
    assert dm.num_train_blocks == len(stream) // 32
    batches = list(dm.train_dataloader())
    got = torch.cat([b.reshape(-1) for b in batches]).tolist()
    used = len(batches) * 4 * 32
    assert got == stream[:used]  # shuffle=False: blocks in order
    assert small_bundle.special_ids["pad"] not in got
    assert got.count(sep) == stream[:used].count(sep) > 100
    assert batches[0].dtype == torch.long and batches[0].shape == (4, 32)
    val = torch.cat([b.reshape(-1) for b in dm.val_dataloader()]).tolist()
    val_stream = _stream(small_corpus.val, small_bundle, 0, sep)
    assert val == val_stream[: (len(val_stream) // 32) * 32]  # every val block exactly once, in order


def test_document_order_depends_on_seed_and_files_are_cached(small_corpus, small_bundle, tmp_path):
    """Another seed gives another token file; the same key reuses the file without rewriting it."""
    a = _dm(small_corpus, small_bundle, tmp_path, seed=0)
    b = _dm(small_corpus, small_bundle, tmp_path, seed=1)
    a.prepare_data()
    b.prepare_data()
    assert a.token_dir != b.token_dir
    a.setup()
    b.setup()
    assert not np.array_equal(a.train_tokens[:500], b.train_tokens[:500])
    assert np.array_equal(np.sort(np.asarray(a.train_tokens)), np.sort(np.asarray(b.train_tokens)))
    stamp = (a.token_dir / "train.bin").stat().st_mtime_ns
    again = _dm(small_corpus, small_bundle, tmp_path, seed=0)
    again.prepare_data()
    assert (a.token_dir / "train.bin").stat().st_mtime_ns == stamp
    assert again.token_dir == a.token_dir
    assert a.train_tokens.dtype == np.uint16 == token_dtype(small_bundle.vocab_size)
    assert token_dtype(70_000) == np.int32


def test_shuffled_blocks_are_a_permutation_per_epoch_and_resume(small_corpus, small_bundle, tmp_path):
    """shuffle=True permutes whole blocks per epoch; a restored state resumes mid-epoch exactly."""
    dm = _dm(small_corpus, small_bundle, tmp_path, shuffle=True, seed=4)
    loader = dm.train_dataloader()
    blocks = torch.cat(list(loader))
    n = dm.num_train_blocks
    reference = torch.from_numpy(np.asarray(dm.train_tokens[: n * 32], dtype=np.int64)).view(n, 32)
    rows = {tuple(r) for r in reference.tolist()}
    assert all(tuple(r) in rows for r in blocks.tolist()) and not torch.equal(blocks, reference[: len(blocks)])
    it = iter(dm.train_dataloader())
    head = [next(it) for _ in range(5)]
    state = dm.state_dict()
    assert state["train_sampler"]["position"] == 20
    resumed = _dm(small_corpus, small_bundle, tmp_path, shuffle=True, seed=4)
    resumed.load_state_dict(state)  # before the loader exists, as Lightning does on resume
    tail = list(resumed.train_dataloader())
    assert torch.equal(torch.cat(head + tail), blocks)


def test_train_token_counts_are_unigram_counts(small_corpus, small_bundle, tmp_path):
    """train_token_counts is the histogram of the training stream, of length V."""
    dm = _dm(small_corpus, small_bundle, tmp_path)
    counts = dm.train_token_counts()
    assert counts.shape == (small_bundle.vocab_size,) and counts.sum() == len(dm.train_tokens)
    sep = small_bundle.special_ids["eos"]
    assert counts[sep] == len(small_corpus.train) and counts[small_bundle.special_ids["pad"]] == 0


def test_corpus_too_small_for_one_batch_names_the_numbers(small_bundle, tmp_path):
    """A corpus without enough blocks for one batch fails with the token, block and batch counts."""
    tiny = Corpus(train=["a few words only"] * 3, val=["validation text here"] * 40, name="tiny.txt", hash="tiny")
    dm = _dm(tiny, small_bundle, tmp_path, block_len=16, batch_size=8)
    with pytest.raises(DataError) as err:
        dm.setup("fit")
    tokens = len(dm.train_tokens)
    assert str(err.value) == (
        f"corpus tiny.txt too small: {tokens} training tokens make {tokens // 16} blocks of block_len=16, "
        "fewer than one batch (batch_size=8 x 1 ranks)"
    )


def test_val_split_shorter_than_a_block_fails(small_bundle, tmp_path):
    """A validation split that cannot fill one block is reported, not silently skipped."""
    c = Corpus(train=["some training text for the model"] * 200, val=["short"], name="c", hash="shortval")
    with pytest.raises(DataError, match=r"validation split has \d+ tokens \(1 documents\), fewer than one block"):
        _dm(c, small_bundle, tmp_path, block_len=16).setup()


def test_val_batches_limits_validation_blocks(small_corpus, small_bundle, tmp_path):
    """val_batches caps validation at that many batches."""
    dm = _dm(small_corpus, small_bundle, tmp_path, val_batches=2)
    assert len(list(dm.val_dataloader())) == 2


def _noisy(samples: list[torch.Tensor]) -> torch.Tensor:
    """A collator that draws from torch's global RNG, as the objectives' corruption does."""
    block = torch.stack(samples)
    return block + torch.randint(0, 1000, block.shape)


def test_validation_corruption_is_the_same_at_every_evaluation_and_spares_the_training_rng(
    small_corpus, small_bundle, tmp_path
):
    """Validation noise is a function of (seed, batch): equal across evaluations; the global RNG is untouched."""
    dm = _dm(small_corpus, small_bundle, tmp_path, collate_fn=_noisy)
    dm.prepare_data()
    dm.setup("fit")
    torch.manual_seed(0)
    first = list(dm.val_dataloader())
    after_first = torch.rand(3)
    torch.manual_seed(123)
    second = list(dm.val_dataloader())
    assert len(first) > 1
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert not torch.equal(first[0] - first[1], torch.zeros_like(first[0]))
    # The global stream advances exactly as with a collator that draws nothing (DataLoader itself takes a
    # base seed from it per iteration): the corruption came from the seeded fork only.
    plain = _dm(small_corpus, small_bundle, tmp_path, collate_fn=_stack)
    plain.setup("fit")
    torch.manual_seed(0)
    list(plain.val_dataloader())
    torch.testing.assert_close(torch.rand(3), after_first)
