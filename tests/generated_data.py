"""Seeded generator of corpora and classification tasks that famlab's own bundled data never exercises.

Everything here is pure Python and a deterministic function of a seed: the same seed writes the same bytes. A
:class:`Case` is one corpus + one task + one tokenizer setting + the families to compare, with what famlab is
expected to do with it (a full report, or a one-line error for data that cannot make a comparison).

What varies (the ``covers`` tags of a case name them):

- script and characters: ASCII Latin, Latin with precomposed and combining accents, Cyrillic, CJK without spaces,
  emoji (ZWJ sequences, skin tones, flags, keycaps), mixed (Arabic, Devanagari too); CRLF line ends, a UTF-8 BOM,
  tabs, C0 control characters other than NUL (and, in one task, Unicode line separators);
- document length from one word to 10,000 words, and a corpus smaller than one pretraining block;
- ``data.tokenizer.vocab_size`` from the least famlab allows (``min_vocab_size``) to far more than the corpus has
  types, for every tokenizer kind, and ``data.tokenizer.num_sentinels``;
- tasks with 2 to 50 classes, a 95 % majority class, numeric / boolean labels, duplicate and empty texts, sentence
  pairs, CSV fields with quotes and embedded newlines, JSONL files; with and without a split column.

:func:`catalogue` is the curated list the end-to-end comparison test runs; :func:`random_case` draws every
dimension at random, for the fast data-pipeline test over many seeds.
"""

from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

FAMILIES = ("bert", "gpt", "t5")
SCRIPTS = ("latin", "accents", "cyrillic", "cjk", "emoji", "mixed")
DOC_LENGTHS = ("one-word", "short", "varied", "tiny")
KINDS = ("bpe", "wordpiece", "unigram")
HUGE_VOCAB = 30_000  # more types than any generated corpus has, for every kind

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "da", "pe", "gu", "fo", "ba", "ti", "zo", "he"]
# precomposed accents, and two combining sequences (NFD): NFKC (the unigram tokenizer) changes their bytes
_ACCENTED = ["é", "è", "ñ", "ü", "ø", "å", "ç", "ß", "ł", "ő", "ž", "ğ", "e\u0301", "a\u0308"]
_CYRILLIC = "абвгдежзийклмнопрстуфхцчшщыэюяё"
_ARABIC = "ابتثجحخدذرزسشصضطظعغفقكلمنهوي"
_DEVANAGARI = "कखगघचछजझटठडढणतथदधनपफबभमयरलवशसह"
_EMOJI = ["😀", "🐍", "🚀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "1️⃣", "❤️", "🏳️‍🌈", "🤖", "🧪", "🌍"]
_CJK_PUNCT = ["，", "。", "、"]
# C0 controls except NUL (a NUL line is read as binary) and except tab / newline / carriage return (varied on their
# own), and DEL
CONTROLS = [chr(c) for c in range(1, 32) if chr(c) not in "\t\n\r"] + ["\x7f"]
# characters Python's str.splitlines() breaks lines at although they are not line ends in a file: NEL (a C1
# control), LINE SEPARATOR, PARAGRAPH SEPARATOR, FILE / GROUP / RECORD SEPARATOR
SPLITLINES_BREAKS = ["\x85", "\u2028", "\u2029", "\x1c", "\x1d", "\x1e"]


@dataclass(frozen=True)
class Text:
    """How a file's text is laid out: line ends, a byte-order mark, tabs, control characters."""

    crlf: bool = False
    bom: bool = False
    tabs: bool = False
    controls: bool = False

    def tags(self) -> set[str]:
        return {name for name in ("crlf", "bom", "tabs", "controls") if getattr(self, name)}


@dataclass(frozen=True)
class CorpusSpec:
    """A generated pretraining corpus: its script, document lengths, file layout (txt, jsonl or a directory of
    both) and text layout."""

    script: str = "latin"
    lengths: str = "short"
    layout: str = "txt"
    text: Text = Text()


@dataclass(frozen=True)
class TaskSpec:
    """A generated classification task.

    ``labels``: ``words`` (label names in the task's script), ``ints`` (numeric strings in CSV, JSON numbers in
    JSONL, ``-1`` and ``10`` among them), ``bools`` (JSON ``true`` / ``false``). ``majority``: the share of the most
    common class, or None for balanced classes. ``splits``: a split column (every class in train) or none (the
    loader carves val / test). ``held_out_only``: one label appears only in val / test (invalid: famlab refuses).
    ``line_breaks``: texts hold characters ``str.splitlines`` breaks at.
    """

    script: str = "latin"
    classes: int = 3
    rows: int = 120
    fmt: str = "csv"
    labels: str = "words"
    majority: float | None = None
    pairs: bool = False
    duplicates: bool = False
    empty: bool = False
    quotes: bool = False
    splits: bool = True
    held_out_only: bool = False
    line_breaks: bool = False
    text: Text = Text()


@dataclass(frozen=True)
class Case:
    """One generated comparison input and what famlab must do with it.

    Attributes:
        name: unique, readable (the test id).
        seed: everything generated below is a function of it.
        files: relative path -> bytes, written under a root by :meth:`write`.
        corpus, task: relative paths (file or directory) passed as ``data.corpus`` / ``data.task``.
        overrides: the data settings famlab gets (tokenizer, columns, families); paths are added by :meth:`write`.
        families: the families compared.
        expect_error: None when a full report is expected; else a substring of the one-line error (exit code 2).
        covers: the generator categories this case exercises.
    """

    name: str
    seed: int
    files: dict[str, bytes]
    corpus: str
    task: str
    overrides: tuple[str, ...]
    families: tuple[str, ...] = FAMILIES
    expect_error: str | None = None
    covers: frozenset[str] = field(default_factory=frozenset)

    def write(self, root: Path) -> list[str]:
        """Write the files under ``root``; return every data override, paths made absolute."""
        for rel, data in self.files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        families = ",".join(self.families)
        return [f"data.corpus={root / self.corpus}", f"data.task={root / self.task}", *self.overrides,
                f"compare.families=[{families}]"]


# --- words and documents ------------------------------------------------------------------------------------------

def _word(script: str, rng: random.Random) -> str:
    """One word of ``script`` (a CJK "word" is a run of 1-3 ideographs)."""
    if script == "mixed":
        script = rng.choice(["latin", "accents", "cyrillic", "cjk", "emoji", "arabic", "devanagari"])
    if script == "latin":
        return "".join(rng.choices(_SYLLABLES, k=rng.randint(1, 3)))
    if script == "accents":
        parts = rng.choices(_SYLLABLES, k=rng.randint(1, 3))
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(_ACCENTED))
        return "".join(parts)
    if script == "cyrillic":
        return "".join(rng.choices(_CYRILLIC, k=rng.randint(2, 7)))
    if script == "cjk":
        return "".join(chr(0x4E00 + rng.randrange(600)) for _ in range(rng.randint(1, 3)))
    if script == "emoji":  # emoji between Latin words, some glued to a word
        return rng.choice(_EMOJI) + (rng.choice(["", "", _word("latin", rng)]))
    if script == "arabic":
        return "".join(rng.choices(_ARABIC, k=rng.randint(2, 6)))
    return "".join(rng.choices(_DEVANAGARI, k=rng.randint(2, 5)))


def lexicon(script: str, size: int, rng: random.Random) -> list[str]:
    """``size`` distinct words of ``script`` (documents draw from it Zipf-like, so the corpus has structure)."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        w = _word(script, rng)
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def _words(lex: list[str], n: int, rng: random.Random) -> list[str]:
    weights = [1.0 / (rank + 1) for rank in range(len(lex))]
    return rng.choices(lex, weights=weights, k=n)


def _join(words: list[str], script: str, text: Text, rng: random.Random) -> str:
    """Words as running text: CJK without spaces (punctuation every few words), else spaces or tabs; control
    characters inside some words."""
    if text.controls:
        words = [w + rng.choice(CONTROLS) + w if rng.random() < 0.08 else w for w in words]
    if script == "cjk":
        return "".join(w + (rng.choice(_CJK_PUNCT) if rng.random() < 0.15 else "") for w in words)
    seps = [("\t" if text.tabs and rng.random() < 0.2 else " ") for _ in words[1:]]
    return words[0] + "".join(s + w for s, w in zip(seps, words[1:], strict=True)) if words else ""


def _doc_lengths(lengths: str, rng: random.Random) -> list[int]:
    """Words per document. ``varied``: one document of 10,000 words, twenty of one word, the rest 3-60 words."""
    if lengths == "one-word":
        return [1] * 1500
    if lengths == "short":
        return [rng.randint(5, 30) for _ in range(250)]
    if lengths == "varied":
        return [10_000] + [1] * 20 + [rng.randint(3, 60) for _ in range(200)]
    if lengths == "tiny":  # fewer tokens than one block of data.seq_len=32, whatever the tokenizer
        return [2, 3]
    raise ValueError(f"unknown document lengths '{lengths}'")


def corpus_docs(spec: CorpusSpec, rng: random.Random) -> list[str]:
    """The documents of a generated corpus (before file layout)."""
    lex = lexicon(spec.script, 400, rng)
    return [_join(_words(lex, n, rng), spec.script, spec.text, rng) for n in _doc_lengths(spec.lengths, rng)]


def _encode(text: str, layout: Text) -> bytes:
    if layout.crlf:
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return (b"\xef\xbb\xbf" if layout.bom else b"") + text.encode("utf-8")


def _txt(docs: list[str], layout: Text, rng: random.Random) -> bytes:
    """Documents separated by blank lines, long ones wrapped over several lines (the reader joins them)."""
    out = []
    for doc in docs:
        words = doc.split(" ")
        lines = [" ".join(words[i : i + 15]) for i in range(0, len(words), 15)] if len(words) > 15 else [doc]
        out.append("\n".join(lines))
    return _encode("\n\n".join(out) + "\n", layout)


def _jsonl_lines(rows: list[dict], rng: random.Random) -> str:
    # ensure_ascii both ways: escaped and raw UTF-8 both reach the reader; blank lines are allowed between rows
    lines = [json.dumps(r, ensure_ascii=rng.random() < 0.5) for r in rows]
    return "\n".join(line + ("\n" if rng.random() < 0.05 else "") for line in lines) + "\n"


def corpus_files(spec: CorpusSpec, rng: random.Random) -> tuple[dict[str, bytes], str]:
    """The corpus as files, and the path (file or directory) to pass as ``data.corpus``."""
    docs = corpus_docs(spec, rng)
    if spec.layout == "txt":
        return {"corpus/corpus.txt": _txt(docs, spec.text, rng)}, "corpus/corpus.txt"
    if spec.layout == "jsonl":
        return {"corpus/corpus.jsonl": _encode(_jsonl_lines([{"text": d} for d in docs], rng), spec.text)}, \
            "corpus/corpus.jsonl"
    # a directory: a .txt, a nested .jsonl and a file the reader must skip (wrong suffix)
    half = len(docs) // 2
    return {"corpus/a.txt": _txt(docs[:half], spec.text, rng),
            "corpus/sub/b.jsonl": _encode(_jsonl_lines([{"text": d} for d in docs[half:]], rng), spec.text),
            "corpus/README.md": b"# not part of the corpus\n"}, "corpus"


# --- tasks ---------------------------------------------------------------------------------------------------------

def _label_names(spec: TaskSpec, rng: random.Random) -> list[object]:
    if spec.labels == "ints":
        return [-1, *range(spec.classes - 1)]  # -1 and 10 > 2: numeric order, not string order
    if spec.labels == "bools":
        return [False, True][: spec.classes]
    names: list[object] = list(lexicon(spec.script, spec.classes, rng))
    if spec.quotes:  # label names that need CSV quoting too
        names[0] = 'say "yes", now'
    return names


def _class_of_rows(spec: TaskSpec, rng: random.Random) -> list[int]:
    """Class index per row: balanced, or ``majority`` of rows in class 0; every class at least 3 times."""
    base = [c for c in range(spec.classes) for _ in range(3)]
    rest = spec.rows - len(base)
    if spec.majority is None:
        extra = [rng.randrange(spec.classes) for _ in range(rest)]
    else:
        extra = [0 if rng.random() < spec.majority else rng.randrange(1, spec.classes) for _ in range(rest)]
    rows = base + extra
    rng.shuffle(rows)
    return rows


def _splits(classes: list[int], spec: TaskSpec, rng: random.Random) -> list[str]:
    """80/10/10, every class's first row in train (so val / test labels are known) unless ``held_out_only``."""
    splits = [rng.choices(["train", "val", "test"], weights=[8, 1, 1])[0] for _ in classes]
    seen: set[int] = set()
    for i, c in enumerate(classes):
        if c not in seen and not (spec.held_out_only and c == spec.classes - 1):
            splits[i] = "train"
            seen.add(c)
        elif spec.held_out_only and c == spec.classes - 1:
            splits[i] = rng.choice(["val", "test"])
    for name in ("val", "test"):  # both evaluation splits hold rows
        if name not in splits:
            splits[splits.index("train", len(splits) // 2)] = name
    return splits


def task_rows(spec: TaskSpec, rng: random.Random) -> list[dict[str, object]]:
    """Rows ``{text, [pair], label, [split]}``: each class draws most words from its own lexicon."""
    names = _label_names(spec, rng)
    shared = lexicon(spec.script, 60, rng)
    own = [lexicon(spec.script, 12, rng) for _ in range(spec.classes)]
    classes = _class_of_rows(spec, rng)
    splits = _splits(classes, spec, rng)
    rows: list[dict[str, object]] = []
    for c, split in zip(classes, splits, strict=True):
        def sentence(n: int, c: int = c) -> str:
            words = [rng.choice(own[c]) if rng.random() < 0.5 else rng.choice(shared) for _ in range(n)]
            return _join(words, spec.script, spec.text, rng)

        text = sentence(rng.randint(3, 12))
        if spec.quotes and rng.random() < 0.3:  # quotes, commas and embedded line ends inside a field
            text = f'"{text}", she said,\n{sentence(2)}' + ("\r\n" if rng.random() < 0.5 else "\n") + sentence(2)
        if spec.line_breaks and rng.random() < 0.3:
            text = text + rng.choice(SPLITLINES_BREAKS) + sentence(2)
        row: dict[str, object] = {"text": text}
        if spec.pairs:
            row["pair"] = sentence(rng.randint(2, 8))
        row["label"] = names[c]
        if spec.splits:
            row["split"] = split
        rows.append(row)
    if spec.empty:  # empty texts (and empty pairs) in every split
        for i in range(0, len(rows), 7):
            rows[i]["text"] = ""
            if spec.pairs and i % 14 == 0:
                rows[i]["pair"] = ""
    if spec.duplicates:  # every fifth row again, sometimes with another label or in another split
        for row in rows[::5]:
            twin = dict(row)
            if rng.random() < 0.3:
                twin["label"] = rng.choice(names[: spec.classes])
            if spec.splits and rng.random() < 0.5:
                twin["split"] = "test"
            rows.append(twin)
    return rows


def _csv(rows: list[dict[str, object]], columns: dict[str, str], layout: Text, quote_all: bool) -> bytes:
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL,
                        lineterminator="\r\n" if layout.crlf else "\n")
    writer.writerow([columns[k] for k in rows[0]])
    for row in rows:
        writer.writerow([str(v) for v in row.values()])
    return (b"\xef\xbb\xbf" if layout.bom else b"") + buf.getvalue().encode("utf-8")


def task_files(spec: TaskSpec, rng: random.Random) -> tuple[dict[str, bytes], str, list[str]]:
    """The task file, its path, and the column overrides it needs."""
    columns = {"text": rng.choice(["text", "sentence", "review"]), "pair": "second", "label": rng.choice(
        ["label", "topic", "stars"]), "split": "split"}
    rows = task_rows(spec, rng)
    overrides = [f"data.text_column={columns['text']}", f"data.label_column={columns['label']}"]
    if spec.pairs:
        overrides.append(f"data.text_pair_column={columns['pair']}")
    if spec.fmt == "csv":
        data = _csv(rows, columns, spec.text, quote_all=spec.quotes and rng.random() < 0.5)
        return {"task/task.csv": data}, "task/task.csv", overrides
    renamed = [{columns[k]: v for k, v in row.items()} for row in rows]
    return {"task/task.jsonl": _encode(_jsonl_lines(renamed, rng), spec.text)}, "task/task.jsonl", overrides


# --- cases ---------------------------------------------------------------------------------------------------------

def vocab_size(kind: str, num_sentinels: int, size: str | int) -> int:
    """``min`` (the least famlab's config validation allows), ``huge`` (more than the corpus has types) or a
    number."""
    if size == "min":
        from famlab.datamodules.tokenizer import min_vocab_size

        return min_vocab_size(kind, num_sentinels)
    return HUGE_VOCAB if size == "huge" else int(size)


def make_case(
    name: str, seed: int, corpus: CorpusSpec, task: TaskSpec, *, kind: str = "bpe", vocab: str | int = "min",
    sentinels: int = 20, families: tuple[str, ...] = FAMILIES, expect_error: str | None = None,
    extra: tuple[str, ...] = (),
) -> Case:
    """A case from its corpus and task specs, generated from ``seed`` (the corpus and task from separate streams,
    so changing one spec leaves the other's bytes alone)."""
    cfiles, cpath = corpus_files(corpus, random.Random(f"{seed}-corpus"))
    tfiles, tpath, columns = task_files(task, random.Random(f"{seed}-task"))
    overrides = (f"data.tokenizer.kind={kind}", f"data.tokenizer.vocab_size={vocab_size(kind, sentinels, vocab)}",
                 f"data.tokenizer.num_sentinels={sentinels}", *columns, *extra)
    covers = {f"script:{corpus.script}", f"task-script:{task.script}", f"lengths:{corpus.lengths}",
              f"corpus:{corpus.layout}", f"kind:{kind}", f"vocab:{vocab if isinstance(vocab, str) else 'n'}",
              f"classes:{task.classes}", f"task:{task.fmt}", f"labels:{task.labels}",
              *(f"corpus-{t}" for t in corpus.text.tags()), *(f"task-{t}" for t in task.text.tags())}
    covers |= {flag for flag in ("pairs", "duplicates", "empty", "quotes", "line_breaks", "held_out_only")
               if getattr(task, flag)}
    if task.majority is not None:
        covers.add("majority")
    if not task.splits:
        covers.add("no-split-column")
    return Case(name=name, seed=seed, files={**cfiles, **tfiles}, corpus=cpath, task=tpath, overrides=overrides,
                families=families, expect_error=expect_error, covers=frozenset(covers))


def catalogue(seed: int = 0) -> list[Case]:
    """The curated cases of the end-to-end comparison test: every category at least once, most cases with every
    family, each a corpus x task pairing rather than the full cross product."""
    s = seed * 1000
    C, T, X = CorpusSpec, TaskSpec, Text
    return [
        make_case("accents-bom-bpe-min-csv-quotes", s + 1, C("accents", text=X(bom=True)),
                  T("accents", quotes=True)),
        make_case("cyrillic-crlf-wordpiece-min-jsonl-ints", s + 2, C("cyrillic", text=X(crlf=True)),
                  T("cyrillic", classes=4, fmt="jsonl", labels="ints"), kind="wordpiece"),
        make_case("cjk-unigram-2000-csv", s + 3, C("cjk"), T("cjk", classes=5), kind="unigram", vocab=2000),
        make_case("emoji-bpe-huge-majority95", s + 4, C("emoji"), T("emoji", classes=2, majority=0.95, rows=200),
                  vocab="huge"),
        make_case("mixed-dir-wordpiece-huge-50-classes", s + 5, C("mixed", layout="dir"),
                  T("mixed", classes=50, rows=400), kind="wordpiece", vocab="huge"),
        make_case("one-word-docs-bpe-pairs", s + 6, C("latin", lengths="one-word"), T("latin", pairs=True)),
        make_case("varied-10k-words-unigram-huge-jsonl-pairs", s + 7, C("latin", lengths="varied", layout="jsonl"),
                  T("latin", fmt="jsonl", pairs=True), kind="unigram", vocab="huge"),
        make_case("tabs-controls-bpe", s + 8, C("latin", text=X(tabs=True, controls=True)),
                  T("latin", text=X(tabs=True, controls=True))),
        make_case("numeric-labels-csv-no-split-column", s + 9, C("latin"),
                  T("latin", classes=12, labels="ints", splits=False, rows=200), families=("bert",)),
        make_case("empty-texts-and-pairs", s + 10, C("accents"), T("accents", empty=True, pairs=True)),
        make_case("duplicate-texts", s + 11, C("cyrillic"), T("cyrillic", duplicates=True), kind="wordpiece",
                  families=("bert", "t5")),
        make_case("majority95-3-classes-jsonl-gpt-t5", s + 12, C("latin"),
                  T("latin", majority=0.95, fmt="jsonl", rows=200), families=("gpt", "t5")),
        make_case("50-classes-jsonl-ints-task-limit", s + 13, C("latin"),
                  T("latin", classes=50, fmt="jsonl", labels="ints", rows=400), families=("bert", "gpt"),
                  extra=("compare.task_limit=100",)),
        make_case("bool-labels-jsonl", s + 14, C("cyrillic", layout="jsonl"),
                  T("cyrillic", classes=2, fmt="jsonl", labels="bools"), families=("t5",)),
        make_case("csv-bom-crlf-quotes-newlines", s + 15, C("latin"),
                  T("latin", quotes=True, text=X(bom=True, crlf=True))),
        make_case("jsonl-bom-crlf", s + 16, C("latin", layout="jsonl", text=X(bom=True, crlf=True)),
                  T("latin", fmt="jsonl", text=X(bom=True, crlf=True)), families=("gpt",)),
        make_case("jsonl-unicode-line-separators", s + 17, C("mixed"),
                  T("mixed", fmt="jsonl", line_breaks=True), families=("gpt",)),
        make_case("mixed-dir-unigram-1000-cjk-task", s + 18, C("mixed", layout="dir", text=X(crlf=True, bom=True)),
                  T("cjk", classes=3), kind="unigram", vocab=1000),
        make_case("wordpiece-min-emoji-duplicates-empty", s + 19, C("emoji"),
                  T("emoji", duplicates=True, empty=True), kind="wordpiece"),
        make_case("no-sentinels-without-t5", s + 20, C("latin"), T("latin"), sentinels=0, families=("bert", "gpt")),
        make_case("bpe-exact-types-vocab", s + 21, C("cyrillic", lengths="one-word"), T("cyrillic", classes=2),
                  vocab=600, families=("gpt", "t5")),
        # invalid for a comparison: famlab refuses with one line (exit code 2)
        make_case("corpus-smaller-than-a-block", s + 22, C("latin", lengths="tiny"), T("latin"), families=("gpt",),
                  expect_error="too small"),
        make_case("one-class-task", s + 23, C("latin"), T("latin", classes=1), families=("gpt",),
                  expect_error="only one class"),
        make_case("label-only-in-test", s + 24, C("latin"), T("latin", held_out_only=True), families=("gpt",),
                  expect_error="not in the training split"),
        make_case("cjk-unigram-min", s + 26, C("cjk"), T("cjk"), kind="unigram", families=("gpt",),
                  expect_error="too small for a unigram tokenizer"),
        make_case("t5-one-sentinel", s + 25, C("latin"), T("latin"), sentinels=1, families=("t5",),
                  expect_error="num_sentinels"),
    ]


def random_case(seed: int) -> Case:
    """Every dimension drawn at random from ``seed`` (the fast pipeline test's input): a tiny corpus (about one in
    ten) must be refused with ``too small``, and so must a unigram tokenizer of the least vocabulary on a corpus with
    hundreds of characters (CJK, mixed scripts); anything else must make blocks."""
    rng = random.Random(f"random-{seed}")
    text = Text(crlf=rng.random() < 0.3, bom=rng.random() < 0.3, tabs=rng.random() < 0.3, controls=rng.random() < 0.3)
    lengths = "tiny" if rng.random() < 0.1 else rng.choice(["one-word", "short", "short", "varied"])
    corpus = CorpusSpec(rng.choice(SCRIPTS), lengths, rng.choice(["txt", "jsonl", "dir"]), text)
    task = TaskSpec(rng.choice(SCRIPTS), classes=rng.choice([2, 3, 7, 50]), fmt=rng.choice(["csv", "jsonl"]),
                    labels=rng.choice(["words", "ints"]), pairs=rng.random() < 0.3, quotes=rng.random() < 0.3,
                    empty=rng.random() < 0.2, duplicates=rng.random() < 0.2, rows=200)
    kind, family = rng.choice(KINDS), rng.choice(FAMILIES)
    vocab = rng.choice(["min", "huge", 2000])
    sentinels = rng.choice([20, 100] if family == "t5" else [0, 20, 100])  # T5's span corruption needs sentinels
    expect = "too small" if lengths == "tiny" else None
    if kind == "unigram" and vocab == "min" and corpus.script in ("cjk", "mixed"):  # more characters than pieces
        expect = "too small for a unigram tokenizer"
    case = make_case(f"random-{seed}", seed, corpus, task, kind=kind, vocab=vocab, sentinels=sentinels,
                     families=(family,), expect_error=expect)
    return replace(case, covers=case.covers | {"random"})
