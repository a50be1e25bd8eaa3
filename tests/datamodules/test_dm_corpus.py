"""Corpus formats (.txt, .jsonl, directories, hf: with local files) and their one-line errors."""

from __future__ import annotations

import json

import pytest
from famlab.datamodules import DataError, load_corpus


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_txt_blank_line_separated_documents(tmp_path):
    """Blank lines separate documents; lines inside a document are kept together."""
    f = tmp_path / "c.txt"
    f.write_text("a b\nc d\n\n\ne f\n  \ng\n")
    c = load_corpus(str(f), val_fraction=0.0)
    assert c.train == ["a b\nc d", "e f", "g"] and c.val == []


def test_txt_without_blank_lines_is_one_document_per_line(tmp_path):
    """A file with no blank line at all gives one document per line (CRLF and a byte-order mark tolerated)."""
    f = tmp_path / "c.txt"
    f.write_bytes(b"\xef\xbb\xbffirst doc\r\nsecond doc\r\nthird doc\r\n")
    assert load_corpus(f, val_fraction=0.0).train == ["first doc", "second doc", "third doc"]  # a Path works too


def test_val_split_is_seeded_disjoint_and_covering(tmp_path):
    """The held-out split is deterministic per seed, disjoint from train, and train+val are all documents."""
    f = tmp_path / "c.txt"
    docs = [f"document number {i}" for i in range(200)]
    f.write_text("\n".join(docs))
    a, b = load_corpus(str(f), val_fraction=0.1, seed=3), load_corpus(str(f), val_fraction=0.1, seed=3)
    other = load_corpus(str(f), val_fraction=0.1, seed=4)
    assert a.val == b.val and a.hash == b.hash and len(a.val) == 20
    assert set(a.val) != set(other.val) and a.hash != other.hash
    assert sorted(a.train + a.val) == sorted(docs) and not set(a.train) & set(a.val)


def test_jsonl_and_directory_recursive_sorted(tmp_path):
    """A directory reads .txt and .jsonl files recursively in sorted path order, ignoring other files."""
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.jsonl").write_text(json.dumps({"text": "from jsonl"}) + "\n\n" + json.dumps({"text": "two"}))
    (tmp_path / "a.txt").write_text("from txt\n")
    (tmp_path / "notes.md").write_text("ignored\n")
    assert load_corpus(str(tmp_path), val_fraction=0.0).train == ["from txt", "from jsonl", "two"]


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("bad.jsonl", '{"text": "ok"}\n{"text": oops}\n', "bad.jsonl line 2: not JSON"),
        ("nokey.jsonl", '{"text": "ok"}\n\n{"body": "x"}\n', "nokey.jsonl line 3: no 'text' field (found ['body'])"),
        ("num.jsonl", '{"text": 5}\n', "num.jsonl line 1: 'text' is int, not a string"),
        ("empty.txt", "\n\n  \n", "empty.txt: empty corpus"),
        ("data.csv", "text\nhello\n", "unsupported corpus file type '.csv'"),
    ],
)
def test_bad_files_raise_one_line_naming_file_and_line(tmp_path, name, content, expected):
    """Each malformed corpus gives a DataError naming the file (and line where there is one)."""
    f = tmp_path / name
    f.write_text(content)
    with pytest.raises(DataError) as err:
        load_corpus(str(f))
    assert expected in _one_line(err)


def test_missing_path_and_empty_directory(tmp_path):
    """A path that does not exist, or a directory without corpus files, is named in the error."""
    with pytest.raises(DataError, match="nothere.txt: no such corpus file"):
        load_corpus(str(tmp_path / "nothere.txt"))
    with pytest.raises(DataError, match="directory has no .txt or .jsonl files"):
        load_corpus(str(tmp_path))


def test_undecodable_lines_are_skipped_with_a_count(tmp_path):
    """Non-UTF-8 lines are dropped and counted in a warning; the rest of the file is used."""
    f = tmp_path / "mixed.txt"
    f.write_bytes(b"good line\n\xff\xfe bad\nanother good\n\x00\x01\x02\n")
    with pytest.warns(UserWarning, match=r"mixed.txt: skipped 2 of 4 lines"):
        c = load_corpus(str(f), val_fraction=0.0)
    assert c.train == ["good line", "another good"]


def test_binary_file_fails(tmp_path):
    """A file with no decodable text fails instead of training on nothing."""
    f = tmp_path / "model.txt"
    f.write_bytes(bytes(range(128, 256)) * 50 + b"\n" + b"\x89PNG\x00\x00\n")
    with pytest.raises(DataError) as err:
        load_corpus(str(f))
    assert "model.txt: no UTF-8 text (2 of 2 lines undecodable" in _one_line(err)


def test_bundled_wordnet_corpus(wordnet_corpus):
    """The bundled corpus loads offline with a 5 % validation split."""
    n = len(wordnet_corpus.train) + len(wordnet_corpus.val)
    assert n > 90_000 and abs(len(wordnet_corpus.val) - 0.05 * n) < 1
    assert wordnet_corpus.name == "wordnet" and len(wordnet_corpus.hash) == 64


def test_hf_text_and_json_loaders_with_local_files(tmp_path):
    """hf:text / hf:json go through `datasets` offline; the text loader's empty lines are dropped."""
    pytest.importorskip("datasets")
    txt = tmp_path / "c.txt"
    txt.write_text("alpha beta\n\ngamma\ndelta\n")
    c = load_corpus(f"hf:text:{txt}", val_fraction=0.0)
    assert c.train == ["alpha beta", "gamma", "delta"]
    js = tmp_path / "c.jsonl"
    js.write_text("\n".join(json.dumps({"text": f"doc {i}", "id": i}) for i in range(10)))
    c = load_corpus(f"hf:json:{js}", val_fraction=0.2, seed=0)
    assert sorted(c.train + c.val) == sorted(f"doc {i}" for i in range(10)) and len(c.val) == 2


def test_hf_errors_are_one_line(tmp_path):
    """A dataset without a text column, or one that cannot be loaded offline, gives one DataError line."""
    pytest.importorskip("datasets")
    js = tmp_path / "c.jsonl"
    js.write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(DataError, match=r"no 'text' column \(columns: \['body'\]\)"):
        load_corpus(f"hf:json:{js}")
    with pytest.raises(DataError) as err:
        load_corpus("hf:famlab-no-such-dataset-xyz")
    assert _one_line(err).startswith("hf:famlab-no-such-dataset-xyz: cannot load dataset")
