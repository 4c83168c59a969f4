"""No private name (``_x``) is imported across modules of starforge/ (docs/architecture.md).

A name another module needs has an owner and a public name; ``from m import _x`` is the
sign that it has neither. The vendored ``packaging`` is not ours and is skipped.
"""

from __future__ import annotations

import ast
from pathlib import Path

import starforge

ROOT = Path(starforge.__file__).parent


def private_imports(source: str, where: str = "<source>") -> list:
    """``where:line: from M import _x`` for every private name *source* imports from another module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{where}:{node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}")
    return found


def test_the_check_finds_a_private_import():
    assert private_imports("from .lockdiff import _short\nfrom . import _vendor as v\n") == [
        "<source>:1: from .lockdiff import _short", "<source>:2: from . import _vendor"]
    assert private_imports("from __future__ import annotations\nfrom .x import public, __version__\n") == []


def test_no_private_name_crosses_a_module():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if "_vendor" in rel.parts:
            continue
        found += private_imports(path.read_text(encoding="utf-8"), str(rel))
    assert found == []
