"""docs/config.md has one table of every FORGE_* variable: each one the code reads or sets is
in it, and it names none the code does not know."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\b_?FORGE_[A-Z][A-Z0-9_]*\b")


def test_every_forge_variable_of_the_code_is_in_the_table_and_no_other():
    in_code = set()
    for path in (REPO / "starforge").rglob("*.py"):
        if "_vendor" not in path.parts:
            in_code |= {n.lstrip("_") for n in NAME.findall(path.read_text(encoding="utf-8"))}
    text = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    table = text[text.index("## Every `FORGE_*` variable"):]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    in_table = {n.lstrip("_") for row in rows for n in NAME.findall(row.split("|")[1])}
    assert in_code - in_table == set(), "missing from docs/config.md"
    assert in_table - in_code == set(), "in docs/config.md but not in the code"
