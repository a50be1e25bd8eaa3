"""One place for every measured time and test count: docs/results.md. Any other page (the README, docs/*.md) that
gives a count of minutes, hours or tests gives it as the text of a link to results.md, so a rerun that changes the
number changes one page and every page points at the row that holds it.

What counts: a number (digits, with thousands commas, decimals or a range ``12-14`` / ``12–14``) followed by
``minute(s)``, ``min``, ``hour(s)`` or ``tests``. Numbers in seconds (``90 s``) are out of scope: the docs state
timeouts and intervals in seconds as settings (``WANDB_INIT_TIMEOUT``, default 30 s), which a pattern cannot tell
from measurements. Words without a number ("CPU, minutes") are not a count and pass.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = "results.md"
NUMBER = r"\d[\d,.]*(?:\s*[–-]\s*\d[\d,.]*)?"
COUNT = re.compile(rf"(?<![\w.])({NUMBER})\s+(minutes?|min|hours?|tests)\b")
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]*)\)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != RESULTS)]


def unlinked_counts(text: str) -> list[str]:
    """Every count of minutes / hours / tests in ``text`` that is not inside the text of a link to results.md."""
    linked = [m.span(1) for m in LINK.finditer(text) if m.group(2).split("#")[0].endswith(RESULTS)]
    return [m.group(0) for m in COUNT.finditer(text)
            if not any(start <= m.start() and m.end() <= end for start, end in linked)]


def test_the_pattern_flags_a_restated_number_and_passes_a_linked_one():
    """The checker on known text: the README's old sentences are flagged; the same numbers as link text to a
    results.md row, a link elsewhere or a bare word are told apart."""
    assert unlinked_counts("`famlab compare` takes about 10 minutes on 2 CPU cores") == ["10 minutes"]
    assert unlinked_counts("1,523 tests, after a mypy check; CI took 26\nminutes (12–14 min)") == [
        "1,523 tests", "26\nminutes", "12–14 min"]
    assert unlinked_counts("takes [about 10 minutes](docs/results.md#the-test-suite) and [1,393\ntests](results.md)") \
        == []
    assert unlinked_counts("[56 minutes](docs/protocol.md#cpu)") == ["56 minutes"]  # a link, but not to the row
    assert unlinked_counts("tiny (CPU, minutes), small (one GPU, hours); 26 generated datasets; v2.1 tests") == []


def test_no_page_but_results_md_restates_a_time_or_a_test_count():
    found = {p.name: unlinked_counts(p.read_text(encoding="utf-8")) for p in pages()}
    assert {name: counts for name, counts in found.items() if counts} == {}
    assert (ROOT / "docs" / RESULTS).is_file()
