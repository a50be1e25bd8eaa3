"""`finetune.dropout`: the body fine-tunes with its own dropout rate, keeping every pretrained weight."""

import pytest
import torch
from famlab.experiments.steps.init import with_dropout
from famlab.families import ModelConfig, build_network

FAMILIES = ["bert", "gpt", "t5"]


@pytest.mark.parametrize("family", FAMILIES)
def test_with_dropout_keeps_the_weights_and_drops_only_in_train_mode(family):
    torch.manual_seed(0)
    cfg = ModelConfig(family=family, vocab_size=64, dim=32, num_layers=1, num_heads=2,
                      num_decoder_layers=1 if family == "t5" else None,
                      ffn_dim=64, max_seq_len=32, dropout=0.0)
    net = build_network(cfg).eval()
    assert with_dropout(net, 0.0) is net  # the model's own rate: nothing rebuilt
    dropped = with_dropout(net, 0.3)
    assert dropped.config.dropout == 0.3 and not dropped.training  # keeps the mode it was given
    before, after = net.state_dict(), dropped.state_dict()
    assert before.keys() == after.keys()
    for key in before:
        torch.testing.assert_close(after[key], before[key], rtol=0, atol=0)
    assert not any(isinstance(m, torch.nn.Dropout) for m in net.modules())
    assert any(isinstance(m, torch.nn.Dropout) and m.p == 0.3 for m in dropped.modules())
    ids = torch.randint(4, 64, (2, 12))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if family == "t5":
        inputs["decoder_input_ids"] = ids[:, :4]
    torch.testing.assert_close(dropped(**inputs).hidden, net(**inputs).hidden)  # eval mode: identical outputs
    dropped.train()
    assert not torch.equal(dropped(**inputs).hidden, dropped(**inputs).hidden)  # train mode: two different masks
