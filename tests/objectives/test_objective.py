"""make_objective: block lengths, batch formats, and losses on real tiny networks."""

import pytest
import torch
import torch.nn.functional as F
from famlab.families.kernels.dispatch import reference_only
from famlab.objectives import ObjectiveError, check_pair, make_objective, t5_lengths


def _samples(n: int, length: int, vocab: int = 1000, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return list(torch.randint(10, vocab - 100, (n, length), generator=g))


def test_block_lengths_and_separators(ids):
    """MLM reads [CLS] + seq_len - 1, CLM seq_len + 1, span T5's raw length; separators [SEP] / [EOS]."""
    mlm, clm, span = (make_objective(n, ids, seq_len=512) for n in ("mlm", "clm", "span"))
    assert (mlm.raw_block_len, clm.raw_block_len, span.raw_block_len) == (511, 513, 568)
    assert (mlm.separator_id, clm.separator_id, span.separator_id) == (ids.sep, ids.eos, ids.eos)


def test_unknown_objective_and_bad_pairs(ids):
    """Unknown names and incompatible family x objective pairs fail with one line listing the valid pairs."""
    with pytest.raises(ObjectiveError, match="objective.name=xlm"):
        make_objective("xlm", ids, seq_len=32)
    with pytest.raises(ObjectiveError, match="objective.name=ul2 needs model.family gpt or t5"):
        make_objective("ul2", ids, seq_len=32)
    with pytest.raises(ObjectiveError, match="bert x mlm, bert x span_mlm, gpt x clm") as err:
        check_pair("bert", "clm")
    assert "\n" not in str(err.value)
    with pytest.raises(ObjectiveError, match="model.family=xlnet"):
        check_pair("xlnet", "mlm")
    check_pair("t5", "span")


def test_mlm_collate_prepends_cls(ids):
    objective = make_objective("mlm", ids, seq_len=32)
    batch = objective.collate(_samples(4, 31))
    assert batch["input_ids"].shape == batch["labels"].shape == (4, 32)
    assert (batch["input_ids"][:, 0] == ids.cls).all() and (batch["labels"][:, 0] == -100).all()
    assert ((batch["labels"] != -100).sum(1) == round(0.15 * 31)).all()


def test_collate_rejects_wrong_block_length(ids):
    with pytest.raises(ObjectiveError, match="raw_block_len"):
        make_objective("clm", ids, seq_len=32).collate(_samples(2, 32))


def test_clm_collate_shifts_labels(ids):
    samples = _samples(3, 33)
    batch = make_objective("clm", ids, seq_len=32).collate(samples)
    block = torch.stack(samples)
    torch.testing.assert_close(batch["input_ids"], block[:, :-1])
    torch.testing.assert_close(batch["labels"], block[:, 1:])


def test_span_collate_shifts_targets_right_with_pad(ids):
    """decoder_input_ids = [PAD] + labels[:-1], as Hugging Face T5's _shift_right."""
    objective = make_objective("span", ids, seq_len=64)
    batch = objective.collate(_samples(3, t5_lengths(64)[0]))
    assert batch["input_ids"].shape == (3, 64)
    assert batch["labels"].shape == (3, objective.targets_len)
    assert (batch["decoder_input_ids"][:, 0] == ids.pad).all()
    torch.testing.assert_close(batch["decoder_input_ids"][:, 1:], batch["labels"][:, :-1])
    assert objective.tokens_in(batch) == 3 * 64 + 3 * objective.targets_len


def _reference_nll(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Summed NLL by log_softmax + gather over labelled positions, and their count."""
    keep = labels != -100
    logp = logits.float().log_softmax(-1)[keep]
    return -logp.gather(-1, labels[keep][:, None]).sum(), int(keep.sum())


def test_sparse_mlm_loss_equals_dense_loss(ids, tiny_net):
    """Projecting only the selected positions gives the same loss and gradients as projecting every position."""
    net = tiny_net("bert")
    objective = make_objective("mlm", ids, seq_len=32)
    batch = objective.collate(_samples(4, 31))
    out = objective.loss(net, batch)
    sparse_grads = torch.autograd.grad(out.loss, list(net.parameters()), allow_unused=True)
    dense_logits = net(batch["input_ids"]).logits  # (B, T, V)
    dense = F.cross_entropy(dense_logits.flatten(0, 1), batch["labels"].flatten())
    torch.testing.assert_close(out.loss, dense)
    dense_grads = torch.autograd.grad(dense, list(net.parameters()), allow_unused=True)
    for a, b in zip(sparse_grads, dense_grads, strict=True):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b)
    assert out.logits.shape == (4, round(0.15 * 31), ids.vocab_size)
    assert int(out.num_label_tokens) == 4 * round(0.15 * 31)


def test_sparse_mlm_loss_with_a_row_of_specials(ids, tiny_net):
    """A row with fewer non-special tokens than K is padded with unlabelled positions; loss still = dense loss."""
    net = tiny_net("bert")
    objective = make_objective("mlm", ids, seq_len=32)
    samples = _samples(2, 31)
    samples[1] = torch.full((31,), ids.sep)
    samples[1][[4, 9]] = torch.tensor([50, 60])
    batch = objective.collate(samples)
    out = objective.loss(net, batch)
    dense = F.cross_entropy(net(batch["input_ids"]).logits.flatten(0, 1), batch["labels"].flatten())
    torch.testing.assert_close(out.loss, dense)
    assert int(out.num_label_tokens) == round(0.15 * 31) + 2


@pytest.mark.parametrize("name,family", [("clm", "gpt"), ("span", "t5"), ("mlm", "bert")])
def test_loss_is_summed_nll_over_label_token_count(ids, tiny_net, name, family):
    """loss = summed cross-entropy / number of label tokens, also when some labels are ignored."""
    net = tiny_net(family)
    objective = make_objective(name, ids, seq_len=32)
    batch = objective.collate(_samples(4, objective.raw_block_len))
    if name != "mlm":
        batch["labels"] = batch["labels"].clone()
        batch["labels"][0, 2:] = -100  # row 0 keeps 2 labels: a per-row mean would weight it far more
    out = objective.loss(net, batch)
    if name in ("mlm", "clm"):
        logits = net(batch["input_ids"]).logits
    else:
        logits = net(batch["input_ids"], decoder_input_ids=batch["decoder_input_ids"]).logits
    total, count = _reference_nll(logits, batch["labels"])
    assert int(out.num_label_tokens) == count
    torch.testing.assert_close(out.loss, total / count)


@pytest.mark.parametrize("name,family", [("clm", "gpt"), ("span", "t5")])
def test_dense_lm_loss_fused_equals_reference_path(ids, tiny_net, name, family):
    """The fused projection + cross-entropy (no logits kept) gives the reference path's loss and gradients."""
    net = tiny_net(family)
    objective = make_objective(name, ids, seq_len=32)
    batch = objective.collate(_samples(4, objective.raw_block_len))
    batch["labels"] = batch["labels"].clone()  # CLM's labels are a view of the inputs
    batch["labels"][0, 3:] = -100
    fused = objective.loss(net, batch)
    assert "LinearCrossEntropy" in type(fused.loss.grad_fn).__name__ and fused.logits is None
    with reference_only():
        reference = objective.loss(net, batch)
    assert "LinearCrossEntropy" not in type(reference.loss.grad_fn).__name__ and reference.logits is None
    torch.testing.assert_close(fused.loss, reference.loss)
    assert int(fused.num_label_tokens) == int(reference.num_label_tokens)
    params = list(net.parameters())
    grads = torch.autograd.grad(fused.loss, params, allow_unused=True)
    for got, want in zip(grads, torch.autograd.grad(reference.loss, params, allow_unused=True), strict=True):
        if got is not None or want is not None:
            torch.testing.assert_close(got, want)
