"""Build famlab's bundled WordNet corpus and supersense task from Debian's ``wordnet-base``.

Usage (standard library only; the output is byte-reproducible)::

    python scripts/build_wordnet.py [--wordnet-dir /usr/share/wordnet] [--out datamodules/data] [--seed 0]

Inputs: ``data.{noun,verb,adj,adv}`` of WordNet 3.0 (format: wndb(5WN)). Outputs under ``--out``:

- ``wordnet-supersense.jsonl.gz``: one line per synset ``{"id", "text", "label", "split"}``. ``text`` is
  the synset's definition: its gloss without the quoted examples, with every occurrence of one of the
  synset's own lemmas (underscores read as spaces, case-insensitive, whole words) replaced by ``_``
  (the lemma would give the answer away). ``label`` is the lexicographer file name (lexnames(5WN),
  45 classes such as ``noun.animal``). ``split`` is ``train`` / ``val`` / ``test``, 80/10/10,
  stratified by label; synsets with identical ``text`` form one group and land in one split.
- ``wordnet-corpus.jsonl.gz``: one document per synset ``{"id", "text"}`` with text
  ``"lemma, lemma: gloss"`` (the gloss with its examples), for every synset whose task split is
  ``train`` (validation/test synsets are left out so fine-tuning scores are honest).
- ``LICENSE-WordNet.txt``: the WordNet 3.0 licence, copied from the Debian copyright file.
- ``wordnet-pairs.jsonl.gz`` (``build_suite_tasks``): ``{"a", "b", "label", "split"}`` synset-id pairs whose texts
  are the supersense definitions; ``label`` is ``hypernym`` / ``sibling`` / ``unrelated`` (see ``build_pair_task``).
- ``wordnet-domain.jsonl.gz`` (``build_suite_tasks``): ``{"id", "text", "label", "split"}``, a definition -> its
  WordNet topic domain (see ``build_domain_task``).

Both suite tasks reuse the supersense split of each synset, so the corpus does not depend on them.

Gzip files are written with ``mtime=0`` and no file name, so rebuilding gives identical bytes.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import gzip
import hashlib
import io
import json
import math
import re
from pathlib import Path
from typing import NamedTuple

# lexnames(5WN): lexicographer file number -> name (WordNet 3.0, 45 files).
LEXNAMES = [
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event", "noun.feeling",
    "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object", "noun.person",
    "noun.phenomenon", "noun.plant", "noun.possession", "noun.process", "noun.quantity", "noun.relation",
    "noun.shape", "noun.state", "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition",
    "verb.communication", "verb.competition", "verb.consumption", "verb.contact", "verb.creation",
    "verb.emotion", "verb.motion", "verb.perception", "verb.possession", "verb.social", "verb.stative",
    "verb.weather", "adj.ppl",
]  # fmt: skip
POS_FILES = ["noun", "verb", "adj", "adv"]
SPLIT_FRACTIONS = (("val", 0.1), ("test", 0.1))  # the rest is train
ADJ_MARKER = re.compile(r"\((a|p|ip)\)$")  # wndb(5WN): syntactic marker glued to adjective lemmas
LICENSE_START = "This software and database is being provided"


def parse_data_line(line: str) -> dict:
    """Parse one synset line of a ``data.*`` file (wndb(5WN)).

    ``offset lex_filenum ss_type w_cnt(hex) [word lex_id(hex)]... p_cnt [ptr]... [frames] | gloss``
    """
    fields, _, gloss = line.partition(" | ")
    parts = fields.split()
    offset, lex_filenum, ss_type = parts[0], int(parts[1]), parts[2]
    w_cnt = int(parts[3], 16)
    lemmas = [ADJ_MARKER.sub("", parts[4 + 2 * i]).replace("_", " ") for i in range(w_cnt)]
    return {
        "id": f"{ss_type}{offset}",
        "label": LEXNAMES[lex_filenum],
        "lemmas": lemmas,
        "gloss": gloss.strip(),
    }


def split_gloss(gloss: str) -> tuple[str, list[str]]:
    """Split a gloss into (definition, examples).

    Segments are separated by ``;`` outside double quotes; a segment that starts with ``"`` is an
    example (with any trailing attribution), the others form the definition.
    """
    segments, current, in_quote = [], [], False
    for ch in gloss:
        if ch == '"':
            in_quote = not in_quote
        if ch == ";" and not in_quote:
            segments.append("".join(current))
            current = []
        else:
            current.append(ch)
    segments.append("".join(current))
    definition, examples = [], []
    for seg in (s.strip() for s in segments):
        if not seg:
            continue
        (examples if seg.startswith('"') else definition).append(seg)
    return "; ".join(definition), examples


def mask_lemmas(text: str, lemmas: list[str]) -> str:
    """Replace whole-word, case-insensitive occurrences of any lemma with ``_`` (longest first)."""
    for lemma in sorted(set(lemmas), key=lambda s: (-len(s), s)):
        # Lookarounds instead of \b so lemmas that start/end with punctuation ("U.S.", "o'clock") match.
        text = re.sub(rf"(?<!\w){re.escape(lemma)}(?!\w)", "_", text, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", text).strip()


def read_synsets(wordnet_dir: Path) -> list[dict]:
    synsets = []
    for pos in POS_FILES:
        with open(wordnet_dir / f"data.{pos}", encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):  # licence header lines start with two spaces
                    continue
                synsets.append(parse_data_line(line.rstrip("\n")))
    return synsets


def _key(seed: int, text: str) -> str:
    # A hash instead of random.shuffle: the order must not depend on the Python version.
    return hashlib.sha256(f"{seed}\0{text}".encode()).hexdigest()


def assign_splits(items: list[dict], seed: int) -> None:
    """Set ``item["split"]``: 80/10/10 per label, identical ``text`` kept in one split."""
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    for item in items:
        groups[item["text"]].append(item)
    by_label: dict[str, list[str]] = collections.defaultdict(list)
    for text, members in groups.items():
        # A group whose members disagree is stratified under its most common label (ties: name order).
        counts = collections.Counter(m["label"] for m in members)
        label = min(counts, key=lambda lab: (-counts[lab], lab))
        by_label[label].append(text)
    for label in sorted(by_label):
        texts = sorted(by_label[label], key=lambda t: _key(seed, t))
        total = sum(len(groups[t]) for t in texts)
        seen = 0
        for text in texts:
            position = seen / total  # fraction of this label's synsets placed before this group
            split, edge = "train", 0.0
            for name, fraction in SPLIT_FRACTIONS:
                edge += fraction
                if position < edge:
                    split = name
                    break
            for member in groups[text]:
                member["split"] = split
            seen += len(groups[text])


def write_jsonl_gz(path: Path, rows: list[dict]) -> None:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        for row in rows:
            gz.write((json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
    path.write_bytes(buf.getvalue())


def extract_license(copyright_file: Path) -> str:
    """The WordNet3.0 licence paragraph of a Debian copyright file, de-indented."""
    lines = copyright_file.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if LICENSE_START in line)
    out = []
    for line in lines[start:]:
        if not line.startswith(" "):
            break
        out.append("" if line.strip() == "." else line[1:])
    return "\n".join(out).rstrip() + "\n"


def build(wordnet_dir: Path, out: Path, copyright_file: Path, seed: int) -> dict:
    synsets = read_synsets(wordnet_dir)
    task, docs = [], []
    for s in synsets:
        definition, _ = split_gloss(s["gloss"])
        text = mask_lemmas(definition, s["lemmas"])
        if not text.strip("_ ;,."):
            continue  # nothing left once the lemmas are gone: not a usable example
        task.append({"id": s["id"], "text": text, "label": s["label"]})
    assign_splits(task, seed)
    split_of = {t["id"]: t["split"] for t in task}
    for s in synsets:
        if split_of.get(s["id"], "train") == "train":
            docs.append({"id": s["id"], "text": f"{', '.join(s['lemmas'])}: {s['gloss']}"})
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl_gz(out / "wordnet-supersense.jsonl.gz", task)
    write_jsonl_gz(out / "wordnet-corpus.jsonl.gz", docs)
    (out / "LICENSE-WordNet.txt").write_text(extract_license(copyright_file), encoding="utf-8")
    counts = collections.Counter(t["split"] for t in task)
    return {"synsets": len(synsets), "task": dict(counts), "corpus_docs": len(docs)}


# ---- suite tasks: wordnet-pairs (sentence pair, 3-way) and wordnet-domain (topic) ----------------------------
# Both reuse the supersense split of every synset, so the pretraining corpus (train synsets only) is unchanged
# and no synset is shared across splits; a pair's two synsets always come from one split.

PAIR_LABELS = ("hypernym", "sibling", "unrelated")
PAIR_TRAIN_ANCHORS = 12_000  # train anchors kept (3 rows each); val/test keep every eligible anchor
DOMAIN_MIN_MEMBERS = 100  # a topic domain is a class when at least this many defined synsets point to it
POINTER_FILE = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def read_pointers(wordnet_dir: Path) -> dict[str, list[tuple[str, str]]]:
    """Synset id -> ``[(pointer symbol, target synset id)]`` for every synset (wndb(5WN) pointer fields).

    A pointer names its target by file offset and part of speech; adjective pointers say ``a`` or ``s``
    whatever the target's own type, so targets are resolved through ``(file, offset)``.
    """
    raw: dict[str, list[tuple[str, str, str]]] = {}
    by_offset: dict[tuple[str, str], str] = {}
    for pos in POS_FILES:
        with open(wordnet_dir / f"data.{pos}", encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):
                    continue
                parts = line.partition(" | ")[0].split()
                sid = f"{parts[2]}{parts[0]}"
                by_offset[(pos, parts[0])] = sid
                start = 4 + 2 * int(parts[3], 16)
                ptrs = parts[start + 1: start + 1 + 4 * int(parts[start])]
                raw[sid] = [(ptrs[i], POINTER_FILE[ptrs[i + 2]], ptrs[i + 1]) for i in range(0, len(ptrs), 4)]
    return {sid: [(sym, by_offset[(file, off)]) for sym, file, off in out] for sid, out in raw.items()}


def _words(text: str) -> frozenset[str]:
    return frozenset(WORD.findall(text.lower()))


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / max(1, len(a | b))  # Jaccard index of the two word sets


def _up(start: str, parents: dict[str, list[str]], depth: int) -> set[str]:
    """``start`` and its hypernyms up to ``depth`` levels."""
    seen, frontier = {start}, [start]
    for _ in range(depth):
        frontier = [p for s in frontier for p in parents.get(s, ()) if p not in seen]
        seen.update(frontier)
    return seen


def build_pair_task(defs: dict[str, str], split_of: dict[str, str], pointers: dict[str, list[tuple[str, str]]],
                    seed: int) -> list[dict]:
    """Rows ``{"a", "b", "label", "split"}`` (synset ids; the texts are their supersense definitions).

    Each anchor synset ``a`` (noun or verb) gives three rows: ``b`` = a direct hypernym of ``a``; ``b`` = a
    sibling (another hyponym of one of ``a``'s hypernyms); ``b`` = an unrelated synset of the same part of
    speech (no common hypernym within two levels, neither within three levels above the other). Every anchor
    is in all three classes, so ``a`` alone says nothing about the label. The sibling and the unrelated
    partner are the candidates closest to the hypernym in word overlap with ``a`` and in length, so neither
    gives the label away. All synsets of a row share one split.
    """
    parents = {s: [t for sym, t in ptrs if sym == "@"] for s, ptrs in pointers.items()}
    children = {s: [t for sym, t in ptrs if sym == "~"] for s, ptrs in pointers.items()}
    words = {s: _words(t) for s, t in defs.items()}
    length = {s: len(t.split()) for s, t in defs.items()}

    def cost(a: str, b: str, target: tuple[float, int]) -> tuple[float, str]:
        return abs(_overlap(words[a], words[b]) - target[0]) * 20 + abs(length[b] - target[1]) / 2, _key(seed, b)

    rows = []
    for split in ("train", "val", "test"):
        members = {s for s in defs if split_of[s] == split}
        # unrelated candidates: internal nodes (as every hypernym is) of the split, indexed by word and POS
        index: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
        for s in sorted(members, key=lambda s: _key(seed, s)):
            if any(c in members for c in children[s]):
                for w in words[s]:
                    index[(s[0], w)].append(s)
        anchors = sorted((s for s in members if s[0] in "nv"), key=lambda s: _key(seed, s))
        kept = 0
        for a in anchors:
            if split == "train" and kept >= PAIR_TRAIN_ANCHORS:
                break
            hypers = sorted((h for h in parents[a] if h in members), key=lambda h: _key(seed, h))
            if not hypers:
                continue
            h = hypers[0]
            near = _up(a, parents, 3)
            siblings = {c for p in parents[a] for c in children[p] if c in members} - near - {h}
            siblings = {s for s in siblings if a not in _up(s, parents, 3)}
            if not siblings:
                continue
            target = (_overlap(words[a], words[h]), length[h])
            sib = min(siblings, key=lambda b: cost(a, b, target))
            up2 = _up(a, parents, 2)
            pool = {b for w in sorted(words[a]) for b in index.get((a[0], w), ())[:40]}
            pool |= {b for w in sorted(words[h]) for b in index.get((a[0], w), ())[:10]}
            unrelated = [b for b in pool if b not in near and not (_up(b, parents, 2) & up2)
                         and a not in _up(b, parents, 3)]
            if not unrelated:
                continue
            far = min(unrelated, key=lambda b: cost(a, b, target))
            for b, label in ((h, "hypernym"), (sib, "sibling"), (far, "unrelated")):
                rows.append({"a": a, "b": b, "label": label, "split": split})
            kept += 1
    return rows


def build_domain_task(task: list[dict], pointers: dict[str, list[tuple[str, str]]], lemmas: dict[str, list[str]],
                      ) -> list[dict]:
    """Rows ``{"id", "text", "label", "split"}``: a definition -> its WordNet topic domain (``;c`` pointer).

    Classes are the topic domains with at least ``DOMAIN_MIN_MEMBERS`` defined synsets; a synset pointing to
    exactly one of them is an example. The text is the supersense definition with the domain's own lemmas
    also replaced by ``_`` ("(law) a ..." would give the answer away); the split is the supersense split.
    """
    domains_of = {s: sorted({t for sym, t in ptrs if sym == ";c"}) for s, ptrs in pointers.items()}
    counts = collections.Counter(d for t in task for d in domains_of[t["id"]])
    classes = {d for d, n in counts.items() if n >= DOMAIN_MIN_MEMBERS}
    rows = []
    for t in task:
        mine = [d for d in domains_of[t["id"]] if d in classes]
        if len(mine) != 1:
            continue
        text = mask_lemmas(t["text"], lemmas[mine[0]])
        if text.strip("_ ;,.()"):
            rows.append({"id": t["id"], "text": text, "label": lemmas[mine[0]][0], "split": t["split"]})
    return rows


def build_suite_tasks(wordnet_dir: Path, out: Path, seed: int) -> dict:
    """Write ``wordnet-pairs.jsonl.gz`` and ``wordnet-domain.jsonl.gz`` next to the supersense task."""
    task = read_jsonl_gz_rows(out / "wordnet-supersense.jsonl.gz")
    synsets = read_synsets(wordnet_dir)
    lemmas = {s["id"]: s["lemmas"] for s in synsets}
    pointers = read_pointers(wordnet_dir)
    defs = {t["id"]: t["text"] for t in task}
    split_of = {t["id"]: t["split"] for t in task}
    pairs = build_pair_task(defs, split_of, pointers, seed)
    domain = build_domain_task(task, pointers, lemmas)
    write_jsonl_gz(out / "wordnet-pairs.jsonl.gz", pairs)
    write_jsonl_gz(out / "wordnet-domain.jsonl.gz", domain)
    return {
        "pairs": dict(collections.Counter(r["split"] for r in pairs)),
        "domain": dict(collections.Counter(r["split"] for r in domain)),
        "domain_classes": len({r["label"] for r in domain}),
    }


def read_jsonl_gz_rows(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]
# ---- zero-shot tasks: reverse-dictionary cloze and rule-based minimal pairs ------------------------------------------
# Built from the supersense task's val/test synsets only (the corpus already leaves them out); nothing above changes.

CLOZE_ITEMS = 1000  # reverse-dictionary items (K = 5)
CLOZE_K = 5
PAIRS_PER_CONSTRUCTION = 400
POS_OF = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
LETTERS = re.compile(r"[A-Za-z]+")  # not WORD: the suite tasks above tokenize with that one
IRREGULAR_3SG = {"is": "are", "has": "have", "does": "do", "was": "were"}


def _third_person_base(word: str, verbs: set[str]) -> str | None:
    """The base form of a regular 3rd-person-singular verb ``word`` (``works`` -> ``work``) if WordNet has it."""
    if word in IRREGULAR_3SG:
        return IRREGULAR_3SG[word]
    candidates = []
    if word.endswith("ies"):
        candidates.append(word[:-3] + "y")
    if word.endswith(("ches", "shes", "sses", "xes", "zes", "oes")):
        candidates.append(word[:-2])
    if word.endswith("s") and not word.endswith("ss"):
        candidates.append(word[:-1])
    return next((c for c in candidates if c in verbs), None)


def _plural(noun: str) -> str:
    """A regular English plural (``box`` -> ``boxes``, ``city`` -> ``cities``)."""
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return noun[:-1] + "ies"
    return noun + "s"


def _zeroshot_inputs(wordnet_dir: Path, out: Path) -> tuple[list[dict], str, collections.Counter, dict]:
    """Held-out synsets (with definition and examples), the corpus as one string, corpus word counts, and the
    single-word lemmas of each part of speech."""
    split_of = {r["id"]: r["split"] for r in _read_gz(out / "wordnet-supersense.jsonl.gz")}
    docs = [r["text"] for r in _read_gz(out / "wordnet-corpus.jsonl.gz")]
    corpus = "\n".join(docs)
    counts = collections.Counter(w.lower() for w in LETTERS.findall(corpus))
    pos_lemmas: dict[str, set[str]] = collections.defaultdict(set)
    held = []
    for s in read_synsets(wordnet_dir):
        pos = POS_OF[s["id"][0]]
        pos_lemmas[pos].update(lem.lower() for lem in s["lemmas"] if LETTERS.fullmatch(lem))
        if split_of.get(s["id"]) in ("val", "test"):
            definition, examples = split_gloss(s["gloss"])
            held.append({**s, "pos": pos, "definition": definition,
                         "examples": [e.split('"')[1] for e in examples if e.count('"') >= 2]})
    return held, corpus, counts, pos_lemmas


def _read_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _order(seed: int, tag: str, choices: list[str], answer: str) -> tuple[list[str], int]:
    ordered = sorted(choices, key=lambda c: _key(seed, f"{tag}\0{c}"))
    return ordered, ordered.index(answer)


def build_reverse_dictionary(held: list[dict], corpus: str, counts: collections.Counter, seed: int) -> list[dict]:
    """``___: definition`` (the corpus's ``lemma: gloss`` layout) -> the synset's first lemma among K = 5.

    Answers: single-word first lemmas of held-out synsets whose definition has at least 3 words, names none of
    the synset's lemmas and occurs nowhere in the corpus. Distractors: answers of other items of the same part
    of speech with the closest log corpus frequency (among the 80 nearest in (frequency, seeded hash) order),
    never a lemma of the item's own synset.
    """
    eligible, seen_answers = [], set()
    for s in sorted(held, key=lambda s: _key(seed, s["id"])):
        answer, definition = s["lemmas"][0], s["definition"]
        if not LETTERS.fullmatch(answer) or len(answer) < 3 or answer.lower() in seen_answers:
            continue
        if len(definition.split()) < 3 or BLANK_TEXT in definition or \
                mask_lemmas(definition, s["lemmas"]) != re.sub(r"\s+", " ", definition).strip():
            continue
        seen_answers.add(answer.lower())
        eligible.append(s)
    pools: dict[str, list[tuple[float, str, str]]] = collections.defaultdict(list)
    for s in eligible:  # (log corpus frequency, seeded hash, word): equal frequencies in hash order
        word = s["lemmas"][0]
        pools[s["pos"]].append((math.log1p(counts[word.lower()]), _key(seed, word), word))
    for pool in pools.values():
        pool.sort()
    items = []
    for s in eligible:
        if len(items) == CLOZE_ITEMS:
            break
        if s["definition"] in corpus:  # last: the slowest check, run only on items that would be kept
            continue
        answer = s["lemmas"][0]
        own = {lem.lower() for lem in s["lemmas"]}
        pool = pools[s["pos"]]
        at = bisect.bisect_left(pool, (math.log1p(counts[answer.lower()]), _key(seed, answer), answer))
        freq = pool[at][0]
        window = [p for p in pool[max(0, at - 40) : at + 40] if p[2].lower() not in own]
        window.sort(key=lambda p: (abs(p[0] - freq), p[1]))
        pool = [p[2] for p in window]
        choices, label = _order(seed, s["id"], [answer, *pool[: CLOZE_K - 1]], answer)
        items.append({"id": s["id"], "text": f"{BLANK_TEXT}: {s['definition']}", "choices": choices, "label": label,
                      "group": s["pos"]})
    return items


# Plural determiners: each wants a plural noun ("several members" / *"several member"); mirror of "a member".
PLURAL_DETERMINERS = ("these", "those", "many", "several", "various", "numerous", "few", "both", "two", "three", "four",
                      "five", "six", "seven", "eight", "nine", "ten")
IRREGULAR_BASE = {base: form for form, base in IRREGULAR_3SG.items()}  # are -> is, have -> has, ...
# Plural subjects: "they/we V" and "<plural noun> who/that/which V", not after "of" (there the clause could attach to
# a singular head: "a group of cells that contain(s)"); no verb before an apostrophe ("don't").
PLURAL_SUBJECT = re.compile(r"(?<![a-z] of )(?<! of the )\b(?:[Tt]hey|[Ww]e|([a-z]+) (?:who|that|which))"
                            r" ([a-z]+)\b(?!')")
MODALS = {"can", "could", "may", "might", "must", "shall", "should", "will", "would"}  # verb lemmas with no -s form
AUXILIARIES = MODALS | {"do", "does", "did"}
# Items per (construction, plural, sign of len(good) - len(bad)). Agreement: the right filler is the shorter one in
# half the items, so "the shortest candidate wins" is at chance, and the agreeing word is plural in half, so "the
# singular (or the -s form) wins" is too; subject-verb agreement needs both splits, as is/has/was are shorter than
# are/have/were. Order swaps keep the length (sign 0).
HALF, QUARTER = PAIRS_PER_CONSTRUCTION // 2, PAIRS_PER_CONSTRUCTION // 4
PAIR_QUOTAS = {("subject_verb_agreement", False, -1): QUARTER, ("subject_verb_agreement", False, 1): QUARTER,
               ("subject_verb_agreement", True, -1): QUARTER, ("subject_verb_agreement", True, 1): QUARTER,
               ("determiner_noun_agreement", False, -1): HALF, ("determiner_noun_agreement", True, 1): HALF,
               ("determiner_noun_order", False, 0): PAIRS_PER_CONSTRUCTION}


class Lexicon(NamedTuple):
    """The WordNet word lists the minimal-pair rules read (lemmas lower-cased, single words)."""

    verbs: set[str]
    noun_only: set[str]  # noun lemmas that are no other part of speech
    adverbs: set[str]
    plural_of: dict[str, str]  # regular plural -> its noun-only singular (3+ letters, not in noun.exc)
    irregular_plurals: set[str]  # inflected forms of noun.exc (children, men, ...)
    irregular_plural_bases: set[str]  # their base forms (child, man, ...): no regular plural
    inflected_verbs: set[str]  # inflected forms of verb.exc (found, saw, ...): no base form to agree

    @classmethod
    def read(cls, wordnet_dir: Path, pos_lemmas: dict) -> Lexicon:
        def exc(name: str) -> list[tuple[str, str]]:
            with open(wordnet_dir / name, encoding="utf-8") as f:
                return [(p[0], p[1]) for p in (line.split() for line in f) if len(p) > 1]

        verbs = pos_lemmas["verb"]
        noun_only = pos_lemmas["noun"] - verbs - pos_lemmas["adj"] - pos_lemmas["adv"]
        irregular = exc("noun.exc")
        bases = {base for _, base in irregular}
        plural_of = {_plural(n): n for n in sorted(noun_only) if len(n) >= 3 and not n.endswith("s") and n not in bases}
        return cls(verbs=verbs, noun_only=noun_only, adverbs=pos_lemmas["adv"], plural_of=plural_of,
                   irregular_plurals={form for form, _ in irregular}, irregular_plural_bases=bases,
                   inflected_verbs={f for f, _ in exc("verb.exc")})


class PairSite(NamedTuple):
    construction: str
    start: int
    end: int
    good: str
    bad: str
    plural: bool  # the agreeing word is plural (the rarer case in WordNet glosses, preferred within a text)


def _third_person(base: str, lexicon: Lexicon) -> str | None:
    """The 3rd-person-singular form of a base-form verb (``work`` -> ``works``) when it parses back to ``base``."""
    if base in IRREGULAR_BASE:
        return IRREGULAR_BASE[base]
    if base in MODALS or base in lexicon.adverbs or base in lexicon.inflected_verbs or base not in lexicon.verbs:
        return None
    form = _plural(base) if not base.endswith("o") else base + "es"  # go -> goes, like box -> boxes
    return form if _third_person_base(form, lexicon.verbs) == base else None


def _pair_sites(text: str, lexicon: Lexicon) -> list[PairSite]:
    """Every site of the minimal-pair rules in ``text``."""
    sites = []
    for m in re.finditer(r"\b(?:who|that|which) ([a-z]+)\b", text):
        base = _third_person_base(m.group(1), lexicon.verbs)
        if base is not None and base != m.group(1):
            sites.append(PairSite("subject_verb_agreement", m.start(1), m.end(1), m.group(1), base, False))
    for m in PLURAL_SUBJECT.finditer(text):
        noun, verb = m.group(1), m.group(2)
        if noun is not None and noun not in lexicon.plural_of and noun not in lexicon.irregular_plurals:
            continue
        previous = text[: m.start()].lower().split()[-1:]
        if noun is None and previous and previous[0] in AUXILIARIES:
            continue  # "do we have": the auxiliary, not the subject, asks for the base form
        form = _third_person(verb, lexicon)
        if form is not None:
            sites.append(PairSite("subject_verb_agreement", m.start(2), m.end(2), verb, form, True))
    for m in re.finditer(r"\b(?:a|an) ([a-z]+)\b", text):
        noun = m.group(1)
        if noun in lexicon.noun_only and not noun.endswith("s") and noun not in lexicon.irregular_plural_bases:
            sites.append(PairSite("determiner_noun_agreement", m.start(1), m.end(1), noun, _plural(noun), False))
    for m in re.finditer(rf"\b(?:{'|'.join(PLURAL_DETERMINERS)}) ([a-z]+)\b", text):
        if m.group(1) in lexicon.plural_of:
            sites.append(PairSite("determiner_noun_agreement", m.start(1), m.end(1), m.group(1),
                                  lexicon.plural_of[m.group(1)], True))
    for m in re.finditer(r"\b(the|a|an) ([a-z]+)\b", text):
        if m.group(2) in lexicon.noun_only:
            sites.append(PairSite("determiner_noun_order", m.start(1), m.end(2), m.group(0),
                                  f"{m.group(2)} {m.group(1)}", False))
    return sites


def build_minimal_pairs(held: list[dict], corpus: str, lexicon: Lexicon, seed: int) -> list[dict]:
    """Grammatical vs ungrammatical fillers of one blank in held-out definitions and examples.

    Constructions (the difference is syntactic or morphological, never a different word):
    ``subject_verb_agreement``: a 3rd-person-singular verb after who/that/which vs its base form
    (``a person who works`` / ``*a person who work``), or a base-form verb after they/we or a plural noun +
    who/that/which vs its 3rd-person-singular form (``insects that feed`` / ``*insects that feeds``);
    ``determiner_noun_agreement``: a/an + a singular noun vs its regular plural (``a member`` / ``*a members``), or a
    plural determiner (these, several, two, ...) + a regular plural vs its singular (``several genes`` /
    ``*several gene``); ``determiner_noun_order``: the/a/an + noun vs the two words swapped (``the genus`` /
    ``*genus the``). Nouns are single-word WordNet noun lemmas that are no other part of speech. One site per text
    (a plural one if the text has any, else the first in seeded hash order); texts that occur in the corpus, in any
    case, are skipped. Each construction keeps ``PAIR_QUOTAS`` items per (plural or not, sign of the length
    difference of the two fillers), the first ones in seeded hash order.
    """
    pools: dict[tuple[str, bool, int], list[tuple[str, dict]]] = collections.defaultdict(list)
    seen = set()
    for s in sorted(held, key=lambda s: _key(seed, s["id"])):
        for n, text in enumerate([s["definition"], *s["examples"]]):
            if not text or text in seen or BLANK_TEXT in text:
                continue
            seen.add(text)
            sites = _pair_sites(text, lexicon)
            if not sites:
                continue
            site = min(sites, key=lambda x: (not x.plural, _key(seed, f"{text}\0{x.construction}\0{x.start}")))
            sign = (len(site.good) > len(site.bad)) - (len(site.good) < len(site.bad))
            choices, label = _order(seed, f"{s['id']}/{n}", [site.good, site.bad], site.good)
            item = {"id": f"{s['id']}/{n}", "text": text[: site.start] + BLANK_TEXT + text[site.end :],
                    "choices": choices, "label": label, "group": site.construction}
            pools[(site.construction, site.plural, sign)].append((text, item))
    kept, lowered = [], corpus.lower()  # "We have ..." is in the corpus as "we have ..."
    for bucket, pool in sorted(pools.items()):
        quota, taken = PAIR_QUOTAS.get(bucket, 0), 0
        for text, item in pool:
            if taken == quota:
                break
            if text.lower() not in lowered:  # last: the slowest check, run only on items that would be kept
                kept.append(item)
                taken += 1
    # One seeded order across constructions, so the first N items (``famlab eval limit=N``) cover all three.
    return sorted(kept, key=lambda it: _key(seed, it["id"]))


BLANK_TEXT = "___"


def build_zeroshot(wordnet_dir: Path, out: Path, seed: int) -> dict:
    """Write ``wordnet-reverse-dictionary.jsonl.gz`` and ``wordnet-minimal-pairs.jsonl.gz`` (rows ``{"id", "text",
    "choices", "label", "group"}``) from the task and corpus files already in ``out``."""
    held, corpus, counts, pos_lemmas = _zeroshot_inputs(wordnet_dir, out)
    cloze = build_reverse_dictionary(held, corpus, counts, seed)
    pairs = build_minimal_pairs(held, corpus, Lexicon.read(wordnet_dir, pos_lemmas), seed)
    write_jsonl_gz(out / "wordnet-reverse-dictionary.jsonl.gz", cloze)
    write_jsonl_gz(out / "wordnet-minimal-pairs.jsonl.gz", pairs)
    return {"reverse_dictionary": len(cloze), "minimal_pairs": dict(collections.Counter(p["group"] for p in pairs))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wordnet-dir", type=Path, default=Path("/usr/share/wordnet"))
    parser.add_argument("--copyright", type=Path, default=Path("/usr/share/doc/wordnet-base/copyright"))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "datamodules" / "data")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(build(args.wordnet_dir, args.out, args.copyright, args.seed)))
    # ---- suite tasks (wordnet-pairs, wordnet-domain): read the supersense splits just written ----
    print(json.dumps(build_suite_tasks(args.wordnet_dir, args.out, args.seed)))
    # ---- end of suite tasks ----
    # ---- zero-shot tasks (reads the two files written just above) ----
    print(json.dumps(build_zeroshot(args.wordnet_dir, args.out, args.seed)))
    # ---- end of zero-shot tasks ----


if __name__ == "__main__":
    main()
