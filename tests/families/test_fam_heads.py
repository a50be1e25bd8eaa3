"""Heads: pooling by mask (right and left padding), pooler, classification head, sparse MLM head."""

import pytest
import torch
from famlab.families.heads import ClassificationHead, MLMHead, Pooler, pool
from torch.testing import assert_close


def test_pool_cls_last_mean_with_right_and_left_padding():
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).view(2, 4, 3)
    right = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    left = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    assert_close(pool(hidden, right, "cls"), hidden[:, 0])
    assert_close(pool(hidden, right, "last"), torch.stack([hidden[0, 2], hidden[1, 3]]))
    assert_close(pool(hidden, left, "last"), hidden[:, 3])
    assert_close(pool(hidden, right, "mean"), torch.stack([hidden[0, :3].mean(0), hidden[1].mean(0)]))
    assert_close(pool(hidden, None, "last"), hidden[:, -1])
    assert_close(pool(hidden, None, "mean"), hidden.mean(1))
    with pytest.raises(ValueError, match="pooling='max'"):
        pool(hidden, right, "max")


def test_pooler_and_classification_head():
    torch.manual_seed(0)
    head = ClassificationHead(8, 5, dropout=0.0, pooler=True).eval()
    x = torch.randn(3, 8)
    assert isinstance(head.pooler, Pooler)
    expected = head.classifier(torch.tanh(head.pooler.dense(x)))
    assert_close(head(x), expected)
    assert ClassificationHead(8, 5, pooler=False).pooler is None


def test_mlm_head_on_selected_positions_equals_dense_then_gather():
    torch.manual_seed(0)
    head = MLMHead(8, 11, activation="gelu", norm_eps=1e-12)
    head.bias.data.normal_()
    emb = torch.randn(11, 8)
    hidden = torch.randn(2, 6, 8)
    select = torch.rand(2, 6) < 0.4
    assert_close(head(hidden[select], emb), head(hidden, emb)[select])


def test_standardizing_head_normalises_over_the_batch_then_uses_running_statistics():
    torch.manual_seed(0)
    head = ClassificationHead(8, 3, dropout=0.0, standardize=True)
    x = torch.randn(16, 8) * 0.05 + torch.linspace(-2, 2, 8)  # a large shared offset, little spread
    z = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-5)
    assert_close(head(x), head.classifier(z))
    head(x[:1])  # a batch of one trains on the running statistics instead of failing
    head.eval()
    mean, var = head.norm.running_mean, head.norm.running_var
    assert_close(head(x), head.classifier((x - mean) / torch.sqrt(var + 1e-5)))
    assert not any(p.requires_grad for p in head.norm.parameters())  # no affine: the classifier is the only map
