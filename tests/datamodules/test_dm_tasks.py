"""Classification tasks: bundled, CSV, JSONL and hf: loaders, label mapping, splits, errors; the DataModule."""

from __future__ import annotations

import collections
import json

import pytest
import torch
from famlab.datamodules import ClassificationDataModule, DataError, Task, load_task


@pytest.fixture(scope="module")
def supersense() -> Task:
    return load_task("wordnet-supersense")


def test_wordnet_supersense_task(supersense):
    """45 classes, 80/10/10 stratified splits, and a majority baseline far below 1/3."""
    sizes = {s: len(getattr(supersense, s)) for s in ("train", "val", "test")}
    total = sum(sizes.values())
    print(f"wordnet-supersense: {sizes}, {supersense.num_classes} classes, "
          f"test majority acc {supersense.majority_accuracy('test'):.4f}")
    assert supersense.num_classes == 45 and "noun.animal" in supersense.labels
    assert abs(sizes["val"] / total - 0.1) < 0.005 and abs(sizes["test"] / total - 0.1) < 0.005
    train = collections.Counter(e.label for e in supersense.train)
    test = collections.Counter(e.label for e in supersense.test)
    for label, n in train.items():  # stratified: each class keeps its share in test
        assert abs(test[label] / sizes["test"] - n / sizes["train"]) < 0.01
    assert 0.05 < supersense.majority_accuracy("test") < 0.2
    assert all(e.text_pair is None and e.text.strip() for e in supersense.train + supersense.val + supersense.test)


def _write_csv(path, rows, header):
    path.write_text("\n".join([",".join(header)] + [",".join(map(str, r)) for r in rows]) + "\n")


def test_csv_with_string_labels_and_split_column(tmp_path):
    """String labels map to sorted indices from the training split; the split column is honoured."""
    f = tmp_path / "t.csv"
    rows = [(f"good movie {i}", "pos", "train") for i in range(6)] + [(f"bad {i}", "neg", "train") for i in range(6)]
    rows += [("fine", "pos", "validation"), ("awful", "neg", "val"), ("great", "pos", "TEST")]
    _write_csv(f, rows, ["review", "sentiment", "split"])
    t = load_task(str(f), text_column="review", label_column="sentiment")
    assert t.labels == ["neg", "pos"] and (len(t.train), len(t.val), len(t.test)) == (12, 2, 1)
    assert [(e.text, e.label) for e in t.val] == [("fine", 1), ("awful", 0)]
    assert t.test[0].text == "great" and t.test[0].label == 1


def test_jsonl_pairs_int_labels_and_deterministic_split(tmp_path):
    """Integer labels sort numerically; without a split column the split is seeded and disjoint."""
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(json.dumps({"a": f"s{i}", "b": f"p{i}", "y": i % 3 * 5}) for i in range(100)))
    t = load_task(str(f), text_column="a", text_pair_column="b", label_column="y", seed=1)
    again = load_task(str(f), text_column="a", text_pair_column="b", label_column="y", seed=1)
    assert t.labels == ["0", "5", "10"]
    assert (len(t.train), len(t.val), len(t.test)) == (80, 10, 10)
    assert t.val == again.val and t.test == again.test
    texts = [{e.text for e in getattr(t, s)} for s in ("train", "val", "test")]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    assert all(e.text_pair == "p" + e.text[1:] and t.labels[e.label] == str(int(e.text[1:]) % 3 * 5) for e in t.train)


@pytest.mark.parametrize(
    ("content", "kwargs", "expected"),
    [
        ("text,label\nhi,a\n", {"label_column": "y"}, "t.csv line 2: no column 'y' (columns: text, label)"),
        ("", {}, "t.csv: empty task file (no rows)"),
        ("text,label\n", {}, "t.csv: empty task file (no rows)"),
        ("text,label,split\nhi,a,train\nyo,b,test\nx,c,val\n", {},
         "labels in validation/test but not in the training split: b, c"),
        ("text,label,split\nhi,a,holdout\n", {}, "t.csv line 2: split 'holdout' is not one of train"),
        ("text,label\nhi,\n", {}, "t.csv line 2: empty label in column 'label'"),
    ],
)
def test_csv_errors_are_one_line(tmp_path, content, kwargs, expected):
    """Missing columns, empty files, unknown held-out labels and bad split values are named."""
    f = tmp_path / "t.csv"
    f.write_text(content)
    with pytest.raises(DataError) as err:
        load_task(str(f), **kwargs)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_jsonl_and_path_errors(tmp_path):
    """Bad JSON lines, missing files and unsupported types give one line naming the file."""
    f = tmp_path / "t.jsonl"
    f.write_text('{"text": "a", "label": 1}\n[1, 2]\n')
    with pytest.raises(DataError, match="t.jsonl line 2: expected a JSON object, got list"):
        load_task(str(f))
    f.write_text('{"text": "a", "label": 1}\n{"text": "b"\n')
    with pytest.raises(DataError, match="t.jsonl line 2: not JSON"):
        load_task(str(f))
    with pytest.raises(DataError, match="nope.csv: no such task file"):
        load_task(str(tmp_path / "nope.csv"))
    (tmp_path / "t.tsv").write_text("x")
    with pytest.raises(DataError, match="unsupported task file type '.tsv'"):
        load_task(str(tmp_path / "t.tsv"))


def test_hf_glue_columns_and_hidden_test_labels(tmp_path):
    """hf: with GLUE columns (sentence1/sentence2) drops label -1 rows and carves the missing split."""
    pytest.importorskip("datasets")
    rows = [{"sentence1": f"a{i}", "sentence2": f"b{i}", "label": i % 2, "idx": i} for i in range(50)]
    rows += [{"sentence1": f"t{i}", "sentence2": f"u{i}", "label": -1, "idx": 100 + i} for i in range(5)]
    f = tmp_path / "mrpc.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows))
    t = load_task(f"hf:json:{f}")
    assert t.labels == ["0", "1"]
    assert len(t.train) + len(t.val) + len(t.test) == 50
    assert all(e.text.startswith("a") and e.text_pair == "b" + e.text[1:] for e in t.train + t.val + t.test)
    with pytest.raises(DataError, match=r"no column 'text' \(columns: x, label\)"):
        g = tmp_path / "bad.jsonl"
        g.write_text(json.dumps({"x": "hi", "label": 0}))
        load_task(f"hf:json:{g}")


def test_hf_class_label_order_is_kept(tmp_path):
    """A ClassLabel column keeps the dataset's label order (MNLI: entailment, neutral, contradiction)."""
    datasets = pytest.importorskip("datasets")
    names = ["entailment", "neutral", "contradiction"]
    ds = datasets.Dataset.from_dict({"premise": [f"p{i}" for i in range(31)], "hypothesis": ["h"] * 31,
                                     "label": [i % 3 for i in range(30)] + [-1]})
    f = tmp_path / "mnli.parquet"
    ds.cast_column("label", datasets.ClassLabel(names=names)).to_parquet(str(f))
    t = load_task(f"hf:parquet:{f}")
    assert t.labels == names
    assert all(t.labels[e.label] == names[int(e.text[1:]) % 3] and e.text_pair == "h" for e in t.train + t.val + t.test)
    assert len(t.train + t.val + t.test) == 30  # the label -1 row is dropped


def test_classification_datamodule_items_and_loaders(small_bundle, tmp_path):
    """Items carry raw ids without special tokens; eval loaders see every example once; train resumes."""
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(json.dumps({"text": f"word {i} here", "pair": "other", "label": "ab"[i % 2]})
                           for i in range(40)))
    task = load_task(str(f), text_pair_column="pair")
    seen = []

    def collate(items):
        seen.extend(items)
        return torch.tensor([it["label"] for it in items])

    dm = ClassificationDataModule(task, small_bundle, batch_size=3, collate_fn=collate, seed=2)
    dm.setup("fit")
    item = dm.items["train"][0]
    example = task.train[0]
    assert item["input_ids"] == small_bundle.tokenizer.encode(example.text, add_special_tokens=False).ids
    assert item["pair_ids"] == small_bundle.tokenizer.encode("other", add_special_tokens=False).ids
    assert item["label"] == example.label and dm.num_classes == 2
    specials = set(small_bundle.special_ids.values())
    assert not any(specials & set(it["input_ids"]) for it in dm.items["train"])
    labels = torch.cat(list(dm.test_dataloader())).tolist()
    assert labels == [e.label for e in task.test]  # every test example once, in order
    epoch = torch.cat(list(dm.train_dataloader())).tolist()
    it = iter(dm.train_dataloader())
    head = [next(it) for _ in range(4)]
    state = dm.state_dict()
    resumed = ClassificationDataModule(task, small_bundle, batch_size=3, collate_fn=collate, seed=2)
    resumed.load_state_dict(state)
    assert torch.cat(head + list(resumed.train_dataloader())).tolist() == epoch
    assert sorted(epoch) == sorted(e.label for e in task.train)
