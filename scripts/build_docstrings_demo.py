"""A corpus and a task that are not WordNet, to check a comparison on data famlab was not tuned on.

Task (CSV ``text,label,split``): the one-paragraph summary of a docstring -> the library it comes from
(400 functions or classes per library with at least 200 summaries of 30-300 characters: 300 train, 50 val,
50 test). Corpus (plain text): the full docstrings of those libraries, minus the val/test items' own
docstrings, a seeded sample of their paragraphs up to ``--corpus-mb`` million characters. Built from
whatever is installed, so the numbers depend on the library versions; the README's figures used the test
environment's site-packages (``pip install -e .[test]``).

    python scripts/build_docstrings_demo.py "$(python -c 'import site; print(site.getsitepackages()[0])')" demo/
    famlab compare data.corpus=demo/corpus.txt data.task=demo/task.csv
"""

from __future__ import annotations

import argparse
import ast
import csv
import random
from pathlib import Path

LIBS = ["numpy", "scipy", "sklearn", "torch", "matplotlib", "sympy", "pandas", "transformers", "lightning", "wandb",
        "datasets", "networkx"]


def docstrings(site: Path, lib: str) -> list[tuple[str, str, str]]:
    """``(qualified place, summary, full docstring)`` of every documented function and class of ``lib``."""
    out = []
    for path in sorted((site / lib).rglob("*.py")):
        if {"test", "tests"} & set(path.parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="ignore"))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if not doc or len(doc) < 80:
                    continue
                summary = " ".join(doc.strip().split("\n\n")[0].split())
                if 30 <= len(summary) <= 300:
                    out.append((f"{path}:{node.name}", summary, doc.strip()))
    return out


def build(site: Path, out: Path, corpus_mb: float, seed: int = 0) -> dict[str, int]:
    seen: set[str] = set()
    by_lib: dict[str, list[tuple[str, str, str]]] = {}
    for lib in LIBS:
        if (site / lib).is_dir():
            for item in docstrings(site, lib):
                if item[1] not in seen:  # one row per distinct summary, across libraries too
                    seen.add(item[1])
                    by_lib.setdefault(lib, []).append(item)
    rng = random.Random(seed)
    rows, held = [], set()
    for lib, items in sorted(by_lib.items()):
        if len(items) < 200:
            continue
        for i, (place, summary, _) in enumerate(rng.sample(items, min(400, len(items)))):
            split = "train" if i < 300 else ("val" if i < 350 else "test")
            rows.append((summary, lib, split))
            if split != "train":
                held.add(place)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "task.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label", "split"])
        writer.writerows(rows)
    docs = [doc.replace("\n\n", "\n") for items in by_lib.values() for place, _, doc in items if place not in held]
    rng.shuffle(docs)
    # a seeded sample of whole blank-line-separated paragraphs up to corpus_mb million characters
    paragraphs = "\n\n".join(docs).split("\n\n")
    random.Random(seed + 1).shuffle(paragraphs)
    kept, size = [], 0
    for paragraph in paragraphs:
        if size >= corpus_mb * 1e6:
            break
        kept.append(paragraph)
        size += len(paragraph) + 2
    text = "\n\n".join(kept)
    (out / "corpus.txt").write_text(text, encoding="utf-8")
    return {"rows": len(rows), "labels": len({r[1] for r in rows}), "corpus_chars": len(text)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site_packages", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--corpus-mb", type=float, default=5.0)
    args = parser.parse_args()
    print(build(args.site_packages, args.out, args.corpus_mb))


if __name__ == "__main__":
    main()
