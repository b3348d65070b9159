"""docs/inputs.md stays true to the suite: every test it cites exists, and every row of an input
section cites at least one (every input has a guarantee and a test)."""
from __future__ import annotations

import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO, "docs", "inputs.md")
CITED = re.compile(r"`(tests/[\w/]+\.py)::(\w+)")


def sections() -> dict[str, list[str]]:
    """The table rows of each numbered section (## 1. ... ## 23.), header rows left out."""
    found, current = {}, None
    for line in open(DOC, encoding="utf-8"):
        if line.startswith("## "):
            current = line.strip() if re.match(r"## \d+\. ", line) else None
            if current:
                found[current] = []
        elif current and line.startswith("| ") and not line.startswith("| input "):
            found[current].append(line.rstrip("\n"))
    return found


def test_every_cited_test_exists():
    text = open(DOC, encoding="utf-8").read()  # (tests/FILE.py::TEST is the legend's example)
    missing = []
    for path, name in sorted(set(CITED.findall(text)) - {("tests/FILE.py", "TEST")}):
        source = os.path.join(REPO, path)
        if not os.path.exists(source) or not re.search(
                rf"^(async )?def {name}\(", open(source, encoding="utf-8").read(), re.M):
            missing.append(f"{path}::{name}")
    assert not missing, missing


def test_every_row_of_an_input_section_cites_a_test():
    found = sections()
    assert len(found) >= 23
    bare = [f"{title}: {row[:80]}" for title, rows in found.items() for row in rows
            if not CITED.search(row)]
    assert not bare, bare
