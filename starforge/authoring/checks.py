"""Static checks of a plugin directory (``forge plugin check``); ``pack`` and ``publish`` run them too.

Nothing here imports or runs plugin code: sources are read as text and inspected with
:mod:`ast` and :mod:`tokenize`. :func:`check_plugin` gathers every problem into a
:class:`CheckReport`; :func:`require_valid` raises :class:`CheckError` on the first one.

>>> report = check_plugin("opsd-patch")                           # doctest: +SKIP
>>> report.ok, report.top_level
(True, ('opsd_patch',))

Laptop side (the manifest is read with the YAML loader).
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from ..cluster.shadowing import (  # noqa: F401  (top_level_names: part of this module's API)
    EXTENSION_RE,
    RESERVED_NAMES,
    STDLIB_NAMES,
    TRAINING_STACK,
    top_level_names,
    top_level_origins,
)
from ..errors import CheckError, ManifestError
from ..package_format.manifest import PluginManifest
from . import unsafe_text
from .files import local_tree_digest, plugin_files
from .installed import distribution_name, installed_top_levels
from .syntax import python_floor, source_problems

MANIFEST_FILE = "plugin.yaml"



@dataclass(frozen=True)
class Finding:
    """One problem: a ``code`` naming the check, where it is, and what to do."""

    code: str
    path: str
    line: int | None
    message: str
    hint: str | None = None

    @property
    def location(self) -> str:
        if not self.path:
            return ""
        return f"{self.path}:{self.line}" if self.line is not None else self.path

    def describe(self, root: str | os.PathLike | None = None) -> str:
        """``path:line: message [code]``, the path joined to *root* when given."""
        where = self.location
        if where and root is not None:
            where = os.path.join(os.fspath(root), where)
        return f"{where + ': ' if where else ''}{self.message} [{self.code}]"

    def to_dict(self) -> dict:
        return {"code": self.code, "path": self.path, "line": self.line, "message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class CheckReport:
    """Everything ``forge plugin check`` found; ``ok`` when there is no error."""

    manifest: PluginManifest | None
    errors: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    files: list = field(default_factory=list)
    top_level: tuple = ()
    digest: str | None = None

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        m = self.manifest
        return {
            "ok": self.ok,
            "name": m.name if m else None,
            "version": m.version if m else None,
            "kind": m.kind if m else None,
            "load": m.load if m else None,
            "errors": [f.to_dict() for f in self.errors],
            "warnings": [f.to_dict() for f in self.warnings],
            "files": list(self.files),
            "top_level": list(self.top_level),
            "digest": self.digest,
        }


# -- manifest -----------------------------------------------------------------------------

def load_manifest(root: str | os.PathLike) -> PluginManifest:
    """Read and validate *root*/plugin.yaml; errors name the file, the line and the key."""
    path = Path(root) / MANIFEST_FILE
    doc = _manifest_document(path)
    return PluginManifest.from_mapping(doc.data, source=str(path), lines=doc.line)


def _manifest_document(path: Path):
    from ..package_format.yamlio import load_yaml_file

    if not path.is_file():
        raise ManifestError(
            f"{path}: no such file",
            hint="run this in a plugin directory, or create one with 'forge plugin init NAME'",
        )
    return load_yaml_file(path)



def _manifest_finding(exc: ManifestError, source: str) -> Finding:
    """Split ``<source>:<line>: message`` back into a located finding."""
    text = exc.message
    line = None
    if text.startswith(source):
        rest = text[len(source):]
        m = re.match(r"^:(\d+)", rest)
        if m:
            line = int(m.group(1))
            rest = rest[m.end():]
        text = rest[2:] if rest.startswith(": ") else rest.lstrip(": ")
    return Finding("manifest", MANIFEST_FILE, line, text, exc.hint)


# -- top-level names ----------------------------------------------------------------------

def _name_findings(origins: dict[str, str], plugin_name: str | None) -> tuple[list[Finding], list[Finding]]:
    errors: list[Finding] = []
    warnings: list[Finding] = []
    own = plugin_name.replace("-", "_") if plugin_name else None
    if own is not None and (own in RESERVED_NAMES or own in STDLIB_NAMES or own in TRAINING_STACK):
        own = f"{own}_patch"  # the plugin's own name is taken: suggest one that is not
    after = f"name modules after the plugin ('{own}')" if own else "name modules after the plugin (its name, '-' written '_')"
    hint = f"{after}, or move this one inside the plugin's own package"
    installed = None
    for name in sorted(origins):
        origin = origins[name]
        if name in RESERVED_NAMES:
            why = RESERVED_NAMES[name]
            errors.append(Finding("shadowing", origin, None, f"top-level name '{name}' is reserved: {why}", hint))
        elif name in STDLIB_NAMES:
            errors.append(Finding(
                "shadowing", origin, None,
                f"top-level name '{name}' shadows the standard-library module of that name (Python 3.10-3.14); "
                "the job puts the plugin root on sys.path, so it would replace the real module for the whole job",
                hint,
            ))
        elif name in TRAINING_STACK:
            errors.append(Finding(
                "shadowing", origin, None,
                f"top-level name '{name}' shadows the training-stack package '{name}'; "
                "it would replace the real one for the whole job",
                hint,
            ))
        else:
            if installed is None:
                installed = installed_top_levels()
            dists = {distribution_name(path) for path in installed.get(name, ())}
            if dists:
                warnings.append(Finding(
                    "installed-clash", origin, None,
                    f"top-level name '{name}' is also provided by {', '.join(sorted(dists))} installed here; "
                    "where that distribution is installed, one of them shadows the other",
                    hint,
                ))
    return errors, warnings


# -- sources ------------------------------------------------------------------------------

def _read_source(path: str) -> str:
    with open(path, "rb") as f:
        data = f.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding)


def _module_file(module: str, files: set[str]) -> str | None:
    base = module.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if candidate in files:
            return candidate
    return None


def _module_name(rel: str) -> str:
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _bindings(body: list, name: str):
    """Module-level statements binding *name* (descending into if/try/with, not into defs)."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if stmt.name == name:
                yield stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target)):
                    yield stmt
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                bound = alias.asname or (alias.name if isinstance(stmt, ast.ImportFrom) else alias.name.split(".")[0])
                if bound == name:
                    yield stmt
        else:
            for attr in ("body", "orelse", "finalbody"):
                yield from _bindings(getattr(stmt, attr, []) or [], name)
            for handler in getattr(stmt, "handlers", []) or []:
                yield from _bindings(handler.body, name)
            for case in getattr(stmt, "cases", []) or []:
                yield from _bindings(case.body, name)


def _call_mode(manifest: PluginManifest) -> str:
    """How the entrypoint is called: ``eager`` (params), ``deferred`` or ``environment`` (params, **ctx).

    An environment plugin's entrypoint is called by ``load_environment(name, **ctx)``; a
    data-prep plugin's by ``forge prep`` with the params alone, whatever ``load`` says.
    """
    if manifest.kind == "environment":
        return "environment"
    if manifest.kind == "data-prep":
        return "eager"
    return manifest.load


def _signature_problem(fn: ast.FunctionDef, load: str) -> str | None:
    a = fn.args
    positional = a.posonlyargs + a.args
    required = len(positional) - len(a.defaults)
    call = "install(params)" if load == "eager" else "install(params, **ctx)"
    what = "an environment plugin" if load == "environment" else f"a {load} plugin"
    if not positional and a.vararg is None:
        return f"'{fn.name}' takes no positional parameter; {what} is called as {call}"
    if required > 1:
        names = ", ".join(p.arg for p in positional[:required])
        return f"'{fn.name}({names})' needs {required} positional arguments; {what} is called as {call}"
    missing_kw = [arg.arg for arg, default in zip(a.kwonlyargs, a.kw_defaults) if default is None]
    if load == "eager" and missing_kw:
        return f"'{fn.name}' has keyword-only parameter(s) without default ({', '.join(missing_kw)}); an eager plugin is called as {call}"
    if load == "deferred" and a.kwarg is None:
        return f"'{fn.name}' does not accept **ctx; a deferred plugin is called as {call} with the objects the training entrypoint passes"
    if load == "environment" and a.kwarg is None:
        return (f"'{fn.name}' does not accept **ctx; an environment plugin is called as {call} "
                "with the objects passed to load_environment")
    return None


def _entrypoint_findings(manifest: PluginManifest, files: set[str], trees: dict[str, ast.Module]) -> tuple[list, list]:
    errors: list[Finding] = []
    warnings: list[Finding] = []
    module, function = manifest.module, manifest.function
    mode = _call_mode(manifest)
    with_ctx = mode != "eager"
    rel = _module_file(module, files)
    if rel is None:
        base = module.replace(".", "/")
        if any(EXTENSION_RE.match(f.rpartition("/")[2]) and f.startswith(base) for f in files):
            warnings.append(Finding("entrypoint", MANIFEST_FILE, None,
                                    f"entrypoint module '{module}' is an extension module; its function cannot be checked statically"))
            return errors, warnings
        errors.append(Finding(
            "entrypoint", MANIFEST_FILE, None,
            f"entrypoint module '{module}' not found: expected {base}.py or {base}/__init__.py among the packed files",
            "create the module, fix 'entrypoint' in plugin.yaml, or check that .forgeignore does not exclude it",
        ))
        return errors, warnings
    if rel not in trees:
        return errors, warnings  # it does not parse; the syntax finding says why
    found = _find_function(rel, function, files, trees, set())
    if isinstance(found, Finding):
        warnings.append(found)
        return errors, warnings
    if found is None:
        errors.append(Finding(
            "entrypoint", rel, None,
            f"'{function}' is not defined at module level in {rel} (entrypoint '{manifest.entrypoint}')",
            f"define 'def {function}(params{', **ctx' if with_ctx else ''}):' at the top level of {rel}",
        ))
        return errors, warnings
    for where, fn in found:
        if isinstance(fn, ast.AsyncFunctionDef):
            errors.append(Finding("entrypoint", where, fn.lineno,
                                  f"'{fn.name}' is 'async def'; the launcher calls it and would get a coroutine that never runs",
                                  "make it a plain 'def'"))
            continue
        problem = _signature_problem(fn, mode)
        if problem:
            shape = f"def {fn.name}(params, **ctx):" if with_ctx else f"def {fn.name}(params):"
            errors.append(Finding("entrypoint", where, fn.lineno, problem, f"use a signature like '{shape}'"))
    return errors, warnings


def _find_function(rel: str, name: str, files: set[str], trees: dict, seen: set):
    """The ``def`` statements binding *name* in module *rel*, following imports inside the plugin.

    Returns a list of ``(file, FunctionDef)``, None when nothing binds the name, or a
    warning :class:`Finding` when it is bound in a way that cannot be checked.
    """
    if (rel, name) in seen or rel not in trees:
        return Finding("entrypoint", rel, None, f"'{name}' cannot be followed statically; its signature is not checked")
    seen.add((rel, name))
    body = trees[rel].body
    found = list(_bindings(body, name))
    defs = [(rel, n) for n in found if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if defs:
        return defs
    if found:
        last = found[-1]
        if isinstance(last, ast.ImportFrom):
            alias = next(a for a in last.names if (a.asname or a.name) == name)
            return _follow(last, alias.name, rel, files, trees, seen)
        return Finding("entrypoint", rel, last.lineno,
                       f"'{name}' is not bound by 'def'; its signature cannot be checked statically")
    unresolved = None
    for node in (n for n in _bindings(body, "*") if isinstance(n, ast.ImportFrom)):
        result = _follow(node, name, rel, files, trees, seen)
        if isinstance(result, list):
            return result
        if result is None and unresolved is None and _module_file(_resolve_from(node, rel) or "", files) is None:
            unresolved = Finding("entrypoint", rel, node.lineno,
                                 f"'{name}' may come from 'from {'.' * node.level}{node.module or ''} import *', outside the plugin; "
                                 "its signature is not checked")
        elif isinstance(result, Finding):
            return result
    return unresolved


def _follow(node: ast.ImportFrom, name: str, rel: str, files: set[str], trees: dict, seen: set):
    target = _resolve_from(node, rel)
    target_rel = _module_file(target, files) if target else None
    if target_rel is None:
        if node.names[0].name == "*":
            return None
        return Finding("entrypoint", rel, node.lineno,
                       f"'{name}' is imported from '{target or '.' * node.level}', outside the plugin; its signature is not checked")
    return _find_function(target_rel, name, files, trees, seen)


def _resolve_from(node: ast.ImportFrom, rel: str) -> str | None:
    if node.level == 0:
        return node.module
    package = _module_name(rel).split(".") if rel.endswith("/__init__.py") else _module_name(rel).split(".")[:-1]
    if node.level - 1 > len(package):
        return None
    base = package[: len(package) - (node.level - 1)]
    if node.module:
        base = base + node.module.split(".")
    return ".".join(base) or None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_imports(tree: ast.Module):
    """``(line, top-level name)`` of every import executed when the module is imported."""
    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]
        for child in ast.iter_child_nodes(node):
            yield from visit(child)

    for stmt in tree.body:
        yield from visit(stmt)


_READ_METHODS = ("read_text", "read_bytes", "open")


def _file_path_reads(tree: ast.Module) -> list[int]:
    """Lines where the module reads a file through a path built from ``__file__``.

    ``open(os.path.join(os.path.dirname(__file__), "x"))``, ``Path(__file__).parent /
    "x"`` then ``.read_text()``/``.read_bytes()``/``.open()``, also through module or local
    names assigned from such an expression (``HERE = os.path.dirname(__file__)``). Those
    reads go to the disk, around the loader: a worker does not hash them.
    """
    def mentions(node: ast.AST, names: set) -> bool:
        return any(isinstance(n, ast.Name) and (n.id == "__file__" or n.id in names) for n in ast.walk(node))

    tainted: set = set()
    assigns: list = []  # (value, targets)
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign):
            assigns.append((n.value, n.targets))
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            assigns.append((n.value, [n.target]))
    for _ in range(4):  # names assigned from names assigned from __file__ ...
        before = len(tainted)
        for value, targets in assigns:
            if mentions(value, tainted):
                tainted.update(t.id for t in targets if isinstance(t, ast.Name))
        if len(tainted) == before:
            break
    lines = []
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        node = call
        func = node.func
        is_open = (isinstance(func, ast.Name) and func.id == "open") or (
            isinstance(func, ast.Attribute) and func.attr == "open" and isinstance(func.value, ast.Name) and func.value.id in ("io", "builtins"))
        if is_open and node.args and mentions(node.args[0], tainted):
            lines.append(node.lineno)
        elif isinstance(func, ast.Attribute) and func.attr in _READ_METHODS and not is_open and mentions(func.value, tainted):
            lines.append(node.lineno)
    return sorted(set(lines))


# -- the check ----------------------------------------------------------------------------

def check_plugin(
    root: str | os.PathLike, *, strict: bool = False, max_bytes: int | None = None, max_files: int | None = None
) -> CheckReport:
    """Run every static check on the plugin directory *root*; never raises for a bad plugin."""
    root = os.fspath(root)
    errors: list[Finding] = []
    warnings: list[Finding] = []

    manifest = None
    source = str(Path(root) / MANIFEST_FILE)
    doc = None
    try:
        doc = _manifest_document(Path(source))
        manifest = PluginManifest.from_mapping(doc.data, source=source, lines=doc.line)
    except ManifestError as exc:
        errors.extend(_manifest_finding(each, source) for each in (exc, *exc.also))
    if doc is not None:
        errors.extend(Finding("text", MANIFEST_FILE, line, message, unsafe_text.TEXT_HINT)
                      for line, message in unsafe_text.manifest_problems(doc))

    try:
        files = plugin_files(root, max_bytes=max_bytes, max_files=max_files)
    except CheckError as exc:
        errors.append(Finding("files", "", None, exc.message, exc.hint))
        return _finish(manifest, errors, warnings, [], (), None, strict)
    errors.extend(Finding("files", name, None, message, unsafe_text.NAME_HINT)
                  for name, message in unsafe_text.file_name_problems(files))
    file_set = set(files)
    if MANIFEST_FILE not in file_set and os.path.isfile(source):
        errors.append(Finding("files", MANIFEST_FILE, None, "plugin.yaml is excluded from the package",
                              "remove the pattern that matches it from .forgeignore"))

    origins = top_level_origins(files)
    name_errors, name_warnings = _name_findings(origins, manifest.name if manifest else None)
    errors += name_errors
    warnings += name_warnings

    floor = (3, 10)
    if manifest is not None and manifest.requires.python:
        admitted = python_floor(manifest.requires.python)
        if admitted is None:
            errors.append(Finding("requires-python", MANIFEST_FILE, None,
                                  f"requires.python '{manifest.requires.python}' admits no Python StarForge runs on (3.10 or newer)"))
        else:
            floor = admitted

    trees: dict[str, ast.Module] = {}
    for rel in files:
        if not rel.endswith(".py"):
            continue
        try:
            text = _read_source(os.path.join(root, *rel.split("/")))
        except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
            errors.append(Finding("syntax", rel, None, f"cannot decode the source: {exc}"))
            continue
        problems = source_problems(text, floor, rel)
        for line, message in problems:
            errors.append(Finding("syntax", rel, line, message,
                                  f"requires.python admits Python {floor[0]}.{floor[1]}; write code it compiles, or raise requires.python"))
        try:
            trees[rel] = ast.parse(text, rel)
        except (SyntaxError, ValueError):
            continue
        for line in _file_path_reads(trees[rel]):
            warnings.append(Finding(
                "file-read", rel, line,
                "reads a file through a path built from __file__: such reads bypass the loader and are not hashed in the job's workers",
                "read the plugin's own data with importlib.resources (files(__package__) / 'data.json'): it reads the "
                "verified bytes, hashed in every process (docs/security.md)",
            ))
        for line, name in _import_time_imports(trees[rel]):
            if name in TRAINING_STACK:
                warnings.append(Finding(
                    "import-time-framework", rel, line,
                    f"'{name}' is imported when the module is imported (outside any function)",
                    f"import {name} inside install() or the function that uses it, so processes that never touch "
                    f"{name} do not pay for it and the plugin does not import it before the framework is set up",
                ))

    if manifest is not None:
        e, w = _entrypoint_findings(manifest, file_set, trees)
        errors += e
        warnings += w

    digest = None
    try:
        digest = local_tree_digest(root)
    except CheckError as exc:  # the tree changed under the check
        errors.append(Finding("files", "", None, exc.message, exc.hint))
    return _finish(manifest, errors, warnings, files, tuple(sorted(origins)), digest, strict)


def _finish(manifest, errors, warnings, files, top_level, digest, strict) -> CheckReport:
    if strict:
        errors, warnings = errors + warnings, []
    return CheckReport(manifest=manifest, errors=errors, warnings=warnings, files=list(files),
                       top_level=tuple(top_level), digest=digest)


def require_valid(root: str | os.PathLike, strict: bool = False) -> CheckReport:
    """:func:`check_plugin`, raising :class:`CheckError` with the first error when there is any."""
    report = check_plugin(root, strict=strict)
    if report.errors:
        first = report.errors[0]
        more = len(report.errors) - 1
        suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
        raise CheckError(
            f"{first.describe(root)}{suffix}",
            hint=(first.hint + "; " if first.hint else "") + f"run 'forge plugin check {os.fspath(root)}' to see every problem",
        )
    return report
