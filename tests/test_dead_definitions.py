"""Every module-level function and class of starforge/ is used: named somewhere in the
package, the tests, the benchmarks, the examples or pyproject.toml (an entry point), not
only in a docstring. A definition nothing calls is removed, not kept "in case"."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import starforge

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(starforge.__file__).parent  # the installed copy: the same sources as REPO/starforge
USERS = ("tests", "bench", "examples", "forge_plugins", "plugin_templates")


def names_used(source: str) -> Counter:
    """Each name *source* uses (loaded, an attribute, imported, or a word in a string that
    is not a docstring: ``"module:function"`` targets), with how often."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a fixture that is broken on purpose uses nothing
        return Counter()
    nodes = list(ast.walk(tree))  # walked once: the walk is most of this check's time
    docstrings = {id(n.value) for n in nodes if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    used: Counter = Counter()
    for node in nodes:
        if isinstance(node, ast.Name):
            used[node.id] += 1
        elif isinstance(node, ast.Attribute):
            used[node.attr] += 1
        elif isinstance(node, ast.alias):
            used[node.name.rsplit(".", 1)[-1]] += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            used.update(re.findall(r"\w+", node.value))
    return used


def defined(source: str) -> list:
    """``(name, line)`` of the module-level functions and classes of *source*."""
    return [(n.name, n.lineno) for n in ast.parse(source).body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def unused(modules: dict, others: list) -> list:
    """``module:line: name`` of each definition in *modules* (``{where: source}``) that no
    source in *modules* or *others* uses."""
    used: Counter = Counter()
    for source in [*modules.values(), *others]:
        used.update(names_used(source))  # in place (`+=` makes a new Counter of every name so far, per file)
    return [f"{where}:{line}: {name}" for where, source in modules.items() for name, line in defined(source) if not used[name]]


def test_the_check_finds_a_definition_only_a_docstring_names():
    modules = {"a.py": 'def used():\n    """See :func:`dead`."""\n\ndef dead():\n    pass\n\nclass Hook:\n    pass\n',
               "b.py": "from a import used\nused()\nTARGET = 'a:Hook'\n"}
    assert unused(modules, []) == ["a.py:4: dead"]


def test_no_definition_of_the_package_is_unused():
    modules = {path.relative_to(PACKAGE).as_posix(): path.read_text(encoding="utf-8")
               for path in sorted(PACKAGE.rglob("*.py")) if "_vendor" not in path.parts}
    others = [path.read_text(encoding="utf-8") for folder in USERS for path in sorted((REPO / folder).rglob("*.py"))]
    others.append(" ".join(re.findall(r"\w+", (REPO / "pyproject.toml").read_text(encoding="utf-8"))))
    assert unused(modules, others) == []
