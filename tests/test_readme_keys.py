"""The config table of docs/config.md names every key of the schema, each in its section's row."""

from __future__ import annotations

import re
from pathlib import Path

from famlab.experiments.configuration.compose import flatten, schema, to_plain

CONFIG_PAGE = Path(__file__).resolve().parents[1] / "docs" / "config.md"


def test_config_key_table_is_complete():
    text = CONFIG_PAGE.read_text(encoding="utf-8")
    table = text[text.index("| section | every key"):text.index("**Run directory**")]
    rows: dict[str, str] = {}
    for line in table.splitlines()[2:]:
        cells = line.split("|")[1:-1]
        if len(cells) == 2:
            rows[cells[0].strip().strip("`")] = cells[1]
    missing = []
    for key in flatten(to_plain(schema())):
        section, _, name = key.partition(".")
        row, name = (rows.get(section, ""), name) if name else (rows["top level"], section)
        if name.startswith("tokenizer."):  # written as tokenizer.{kind,vocab_size,...}
            row, name = re.search(r"`tokenizer\.\{([^}]*)\}`", row).group(1), name.split(".", 1)[1]
            missing += [key] if name not in row.split(",") else []
        elif f"`{name}`" not in row:
            missing.append(key)
    assert not missing, f"docs/config.md's config table lacks {missing}"
