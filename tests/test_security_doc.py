"""docs/security.md names, for each attack it calls stopped, the test that reproduces it.

This keeps the page true to the code: a test renamed or deleted leaves a row pointing at
nothing, and that fails here.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "security.md"
# `path/to/test_file.py::test_name` (a trailing `*` matches a family), and `::test_name`
# continuing the previous file in the same cell.
REF = re.compile(r"`((?:[\w/]+\.py)?)(?:::([\w*]+))?`")


@functools.cache  # one parse per file: the tables name the same files many times over
def _tests_in(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(n.name for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_"))


def _references() -> list[tuple[str, str | None]]:
    refs = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            continue
        cells = line.strip("|").split("|")
        current = None
        for match in REF.finditer(cells[-1]):
            path, name = match.group(1), match.group(2)
            if path:
                current = path
            if current is not None and (path or name):
                refs.append((current, name))
    return refs


def test_every_test_the_attack_tables_name_exists():
    refs = _references()
    assert len(refs) > 40, "the attack tables name their tests"
    missing = []
    for path, name in refs:
        file = REPO / "tests" / path
        if not file.is_file():
            missing.append(path)
            continue
        if name is not None and not fnmatch.filter(sorted(_tests_in(file)), name):
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/security.md names tests that do not exist: {missing}"
