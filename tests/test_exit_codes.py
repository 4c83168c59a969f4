"""The exit codes have one table (docs/errors.md): the laptop's in ``starforge/errors.py``
(each error class's ``exit_code``, and the two results that are not errors), the
launcher's in ``starforge/cluster/status.py`` (which ``cluster/errors.py``'s classes carry).
No other module writes a code out as a number; the doc's rows are those classes' codes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import starforge
from starforge import errors
from starforge.cluster import errors as cluster_errors
from starforge.cluster import status

ROOT = Path(starforge.__file__).parent
DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"
OWNERS = {"errors.py", "cluster/errors.py", "cluster/status.py"}
# Where the number cannot come from the table, and why (docs/architecture.md):
WRITTEN_OUT = {
    # the bootstrap's exit when the starforge runtime itself cannot be imported: the table is in it
    "cluster/bootstrap/sitecustomize.py": status.IMPORT_EXIT,
}
EXITS = ("Exit", "exit", "_exit")
_TEXT_EXIT = re.compile(r"(?:^|[\s;.({])_?exit(?: +|\()(\d+)\b", re.M)


def written_codes(source: str, where: str = "<source>") -> list:
    """``where:line`` of each exit code *source* writes as a number: an ``exit_code = N``
    (or ``*_EXIT = N``) assignment, ``Exit(N)`` / ``sys.exit(N)`` / ``os._exit(N)`` with N
    not 0, 1 or 130 (the shell's Ctrl-C), the same in code held as text (``exit N`` in a
    generated bash script, ``sys.exit(N)`` in a ``python -c`` string; docstrings aside), or a
    dict keyed by numbers whose values name errors."""

    def number(node) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is int

    def exit_name(target) -> bool:
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
        return name == "exit_code" or name.upper().endswith("_EXIT")

    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            # code generated as text (a bash script, a ``python -c`` check): ``exit 10``, ``sys.exit(10)``
            if any(int(n) not in (0, 1, 130) for n in _TEXT_EXIT.findall(node.value)):
                found.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and number(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(exit_name(t) for t in targets):
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and node.args and number(node.args[0]) and node.args[0].value not in (0, 1, 130):
            func = node.func
            if (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else "") in EXITS:
                found.append(node.lineno)
        elif isinstance(node, ast.Dict) and node.keys and all(k is not None and number(k) for k in node.keys):
            names = [v.value if isinstance(v, ast.Constant) else getattr(v, "id", "") for v in node.values]
            if all(isinstance(n, str) and n.endswith("Error") for n in names):
                found.append(node.lineno)
    return [f"{where}:{line}" for line in sorted(found)]


def test_the_check_finds_a_code_written_as_a_number():
    source = (
        "class ReplayError(ForgeError):\n    exit_code = 10\n"
        "CONFLICT_EXIT = 21\n"
        "raise click.exceptions.Exit(20)\n"
        "os._exit(12)\n"
        "_BY_CODE = {2: 'SpecError', 10: 'VerificationError'}\n"
        "sys.exit(130)\nsys.exit(1)\nraise click.exceptions.Exit(DIFFERS_EXIT)\n"  # Ctrl-C, generic, named: fine
        "exit_code = VerificationError.exit_code\nDEFAULT_LIMIT = 20\nsizes = {1: 'one'}\n"
        "PREPARE = 'if bad; then\\n    exit 10\\nfi'\n"
        "CHECK = \"if g != h: sys.exit(10)\\n\"\n"
        "FINE = f'exit {VERIFY_EXIT}; exit 1; exit \"$code\"'\n"
        "def f():\n    \"\"\"Ends with exit 10.\"\"\"\n"
    )
    assert written_codes(source) == ["<source>:2", "<source>:3", "<source>:4", "<source>:5", "<source>:6",
                                     "<source>:13", "<source>:14"]


def test_no_module_but_the_tables_writes_an_exit_code():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if "_vendor" in rel or rel in OWNERS or rel in WRITTEN_OUT:
            continue
        found += written_codes(path.read_text(encoding="utf-8"), rel)
    assert found == []


def test_what_is_written_out_where_the_table_cannot_be_imported_is_the_table_s_number():
    for rel, code in WRITTEN_OUT.items():
        source = (ROOT / rel).read_text(encoding="utf-8")
        assert re.findall(r"_exit\((\d+)\)", source) == [str(code)], rel


def test_docs_errors_md_lists_each_class_with_its_code():
    rows = re.findall(r"^\| `(\w+)` \| (\d+) \|", DOC.read_text(encoding="utf-8"), re.M)
    assert len(rows) >= 15
    for name, code in rows:
        kind = getattr(errors, name, None) or getattr(cluster_errors, name, None)
        if kind is None:  # ReplayError: an experiment's error, on the same base
            from starforge.experiment.replay import ReplayError as kind  # noqa: N813
            assert name == "ReplayError"
        assert kind.exit_code == int(code), name
    results = dict(re.findall(r"^\| (\d+) \| `(forge [a-z ]+)`", DOC.read_text(encoding="utf-8"), re.M))
    assert results == {str(errors.DIFFERS_EXIT): "forge lock diff", str(errors.CONFLICT_EXIT): "forge plan",
                       str(errors.AUDIT_FOUND): "forge audit"}
