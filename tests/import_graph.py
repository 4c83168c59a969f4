"""Static import graphs of a package's source tree, from the AST (every import, at any depth).

Used by the import-contract and import-cycle tests: a function-level (lazy) import counts
as much as a top-level one, and an import under ``if TYPE_CHECKING:`` too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_name(root: Path, path: Path, package: str) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [package, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, name: str) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at module level)`` for every import in the file."""
    tree = ast.parse(path.read_bytes(), str(path))
    is_package = path.name == "__init__.py"
    out = []

    def visit(node, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((alias.name, child.lineno, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    module = ".".join(base + ([child.module] if child.module else []))
                else:
                    module = child.module or ""
                out.append((module, child.lineno, top))
                # ``from pkg import submodule`` imports the submodule too
                out.extend((f"{module}.{alias.name}", child.lineno, top) for alias in child.names if alias.name != "*")
            visit(child, nested)

    visit(tree, True)
    return out


def package_graph(root: Path, package: str, skip: tuple[str, ...] = ()) -> dict[str, dict[str, list[int]]]:
    """``{module: {imported module of this package: [lines]}}`` for every module below *root*."""
    files = {module_name(root, p, package): p for p in sorted(root.rglob("*.py"))
             if "__pycache__" not in p.parts and not any(part in skip for part in p.relative_to(root).parts)}
    graph: dict[str, dict[str, list[int]]] = {}
    for name, path in files.items():
        edges: dict[str, list[int]] = {}
        for imported, line, _top in imports_of(path, name):
            target = imported
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.setdefault(target, []).append(line)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, dict[str, list[int]]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in graph:
                continue
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    return sorted(found)
