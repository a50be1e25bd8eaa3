"""LICENSE and CITATION.cff say what pyproject.toml says: the license, the version; the README's Python version is
pyproject's requires-python."""

import re
from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_license_citation_and_readme_agree_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    license_name = project["license"]["text"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith(f"{license_name} License\n")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0" and citation["authors"] and citation["title"]
    assert (citation["version"], citation["license"]) == (project["version"], license_name)
    minimum = re.fullmatch(r">=(\d+\.\d+)", project["requires-python"])
    assert minimum is not None
    assert f"Python {minimum.group(1)} or later" in (ROOT / "README.md").read_text(encoding="utf-8")
