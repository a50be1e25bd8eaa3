"""ClassificationCollator: each family's format, sentence pairs, truncation that keeps specials, padding."""

import pytest
import torch
from famlab.objectives import ClassificationCollator, ObjectiveError
from famlab.objectives.collator import truncate_pair


def _item(a, b=None, label=1):
    return {"input_ids": list(a), "pair_ids": None if b is None else list(b), "label": label}


def test_bert_single_and_pair_format(ids):
    """[CLS] a [SEP] (b [SEP]) with token types 0 for the first segment and 1 for the second."""
    collate = ClassificationCollator("bert", ids, max_len=16)
    batch = collate([_item([11, 12, 13], label=0), _item([21, 22], [31, 32, 33])])
    c, s, p = ids.cls, ids.sep, ids.pad
    assert batch["input_ids"].tolist() == [[c, 11, 12, 13, s, p, p, p], [c, 21, 22, s, 31, 32, 33, s]]
    assert batch["token_type_ids"].tolist() == [[0] * 8, [0, 0, 0, 0, 1, 1, 1, 1]]
    assert batch["attention_mask"].tolist() == [[1] * 5 + [0] * 3, [1] * 8]
    assert batch["labels"].tolist() == [0, 1]
    assert "decoder_input_ids" not in batch


@pytest.mark.parametrize("family", ["gpt", "t5"])
def test_gpt_and_t5_format(ids, family):
    """a ([SEP] b) [EOS]; T5 also gets the decoder start token [PAD]."""
    batch = ClassificationCollator(family, ids, max_len=16)([_item([11, 12]), _item([21], [31, 32])])
    e, s, p = ids.eos, ids.sep, ids.pad
    assert batch["input_ids"].tolist() == [[11, 12, e, p, p], [21, s, 31, 32, e]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1] * 5]
    assert "token_type_ids" not in batch
    if family == "t5":
        assert batch["decoder_input_ids"].tolist() == [[p], [p]]
    else:
        assert "decoder_input_ids" not in batch


def test_left_padding(ids):
    batch = ClassificationCollator("gpt", ids, max_len=16, pad_side="left")([_item([11]), _item([21, 22, 23])])
    assert batch["input_ids"].tolist() == [[ids.pad, ids.pad, 11, ids.eos], [21, 22, 23, ids.eos]]
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]


@pytest.mark.parametrize("family,specials", [("bert", 3), ("gpt", 2), ("t5", 2)])
def test_truncation_keeps_specials(ids, family, specials):
    """Long pairs are cut to max_len, longest first, and still end with their closing special token."""
    collate = ClassificationCollator(family, ids, max_len=12)
    batch = collate([_item(range(100, 130), range(200, 205)), _item(range(100, 140))])
    assert batch["input_ids"].shape == (2, 12)
    row = batch["input_ids"][0].tolist()
    assert sum(t >= 200 for t in row) + sum(100 <= t < 200 for t in row) == 12 - specials
    assert row[-1] == (ids.sep if family == "bert" else ids.eos)
    assert batch["input_ids"][1, -1] == (ids.sep if family == "bert" else ids.eos)
    if family == "bert":
        assert row[0] == ids.cls and row.count(ids.sep) == 2


def test_truncate_pair_longest_first():
    """Cut the longer text until both are equal, then both; never drop more than needed."""
    a, b = list(range(10)), list(range(5))
    assert truncate_pair(a, b, 8) == (a[:4], b[:4])
    assert truncate_pair(a, b[:2], 8) == (a[:6], b[:2])
    assert truncate_pair(a[:3], a, 8) == (a[:3], a[:5])
    assert truncate_pair(a, None, 4) == (a[:4], None)
    for la in range(8):
        for lb in range(8):
            ta, tb = truncate_pair(list(range(la)), list(range(lb)), 7)
            assert len(ta) + len(tb) == min(la + lb, 7) and abs(len(ta) - len(tb)) <= max(abs(la - lb), 1)


def test_bad_collator_settings(ids):
    with pytest.raises(ObjectiveError, match="model.family=xlnet"):
        ClassificationCollator("xlnet", ids, max_len=16)
    with pytest.raises(ObjectiveError, match="pad_side"):
        ClassificationCollator("gpt", ids, max_len=16, pad_side="middle")
    assert isinstance(ClassificationCollator("gpt", ids, max_len=16)([_item([11])])["labels"], torch.Tensor)


@pytest.mark.parametrize("family", ["bert", "gpt", "t5"])
def test_swapping_the_pair_changes_the_input(ids, family):
    """A pair is read in order (a, b): swapping the texts changes the ids, and for BERT the token types."""
    collate = ClassificationCollator(family, ids, max_len=16)
    ab, ba = collate([_item([11, 12, 13], [21])]), collate([_item([21], [11, 12, 13])])
    assert ab["input_ids"].shape == ba["input_ids"].shape and not torch.equal(ab["input_ids"], ba["input_ids"])
    s = ids.sep
    expected = {"bert": [ids.cls, 21, s, 11, 12, 13, s], "gpt": [21, s, 11, 12, 13, ids.eos]}
    assert ba["input_ids"][0].tolist() == expected.get(family, expected["gpt"])
    if family == "bert":
        assert ab["token_type_ids"].tolist() == [[0, 0, 0, 0, 0, 1, 1]]
        assert ba["token_type_ids"].tolist() == [[0, 0, 0, 1, 1, 1, 1]]
