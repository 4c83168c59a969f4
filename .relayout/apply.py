"""Move starforge's loose modules and the job modules of backends/ into packages named by concept.

The direct tests of a moved loose module move with it (TEST_MOVES), and every path naming them.

Usage, from anywhere inside a clean checkout of the repository::

    python .relayout/apply.py            # move, rewrite every reference, print what changed
    python .relayout/apply.py --dry-run  # print what would change, touch nothing

then ``git add -A && git commit``. Standard library only (ruff, when found, re-sorts the
imports the rename reorders). It refuses to run twice (a moved module's new home already
exists) and on a tree with uncommitted changes.

Everything is driven by the tables below: MOVES (old dotted name under ``starforge.`` → new
one), PACKAGES (the new packages and their docstrings) and the hand edits (EDITS: exact
text replaced in one file, each anchor required to be found exactly once, so a tree that
changed under an anchor stops the script before anything is written).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

# old module (dotted, below starforge.) -> new module
MOVES = {
    # signatures: keys and envelopes, Sigstore bundles, model signatures
    "signing": "signatures.signing",
    "sigstore_bundle": "signatures.sigstore_bundle",
    "model_signature": "signatures.model_signature",
    # the package format: plugin.yaml, the archive, YAML reading
    "manifest": "package_format.manifest",
    "archive": "package_format.archive",
    "yamlio": "package_format.yamlio",
    # the laptop's own state
    "home": "state.home",
    "directories": "state.directories",
    "filelock": "state.filelock",
    "credentials": "state.credentials",
    "process_group": "state.process_group",
    "userconfig": "state.userconfig",
    # forge prep and its child
    "prep": "prep.run",
    "prep_child": "prep.child",
    # a job, not a backend
    "backends.binding": "jobs.binding",
    "backends.cleanup": "jobs.cleanup",
    "backends.jobdir": "jobs.jobdir",
    "backends.jobindex": "jobs.jobindex",
    "backends.jobrecord": "jobs.jobrecord",
    "backends.leftovers": "jobs.leftovers",
    "backends.log_outputs": "jobs.log_outputs",
    "backends.log_provenance": "jobs.log_provenance",
    "backends.node_cleanup": "jobs.node_cleanup",
    "backends.outputs": "jobs.outputs",
    "backends.staged": "jobs.staged",
    "backends.store": "jobs.store",
}

# the direct tests of a moved loose module move with it (the tests mirror the tree); the job
# modules' tests stay in tests/backends/, whose conftest holds the clusters and users they use
TEST_MOVES = {
    "tests/test_signing.py": "tests/signatures/test_signing.py",
    "tests/test_archive.py": "tests/package_format/test_archive.py",
    "tests/test_manifest.py": "tests/package_format/test_manifest.py",
    "tests/test_yamlio.py": "tests/package_format/test_yamlio.py",
    "tests/test_filelock.py": "tests/state/test_filelock.py",
    "tests/test_userconfig.py": "tests/state/test_userconfig.py",
    "tests/test_prep.py": "tests/prep/test_prep.py",
}

PACKAGES = {
    "signatures": "Signatures: signing keys, DSSE envelopes and the trust file (``signing``), the Sigstore bundle\n"
                  "of an envelope (``sigstore_bundle``), OpenSSF model-signing signatures (``model_signature``).\n\n"
                  "Verification of an envelope is the cluster side's (``starforge.cluster.dsse``).\n",
    "package_format": "The plugin package format: ``plugin.yaml`` (``manifest``), the archive a version is published\n"
                      "as (``archive``) and the one YAML reader (``yamlio``).\n",
    "state": "The laptop's own state: per-user paths (``home``), directories made with explicit modes\n"
             "(``directories``), file locks (``filelock``), the credential variables (``credentials``), plugin\n"
             "code run in a process group of its own (``process_group``) and the user config (``userconfig``).\n",
    "prep": "``forge prep``: the data-prep plugin's verified bytes, params and provenance (``run``) and the\n"
            "child that streams the JSONL through it (``child``: standard library and ``starforge.cluster``\n"
            "only, run from a zip under any interpreter). Imports nothing: the child's zip carries this file.\n",
    "jobs": "A job on the laptop: the one owner of a staged job (``staged``) and its binding (``binding``), the\n"
            "jobs store and its records (``store``, ``jobrecord``, ``jobindex``), what an ended job left\n"
            "(``outputs``, ``log_outputs``, ``log_provenance``, ``node_cleanup``) and its removal\n"
            "(``cleanup``, ``jobdir``, ``leftovers``). Backends run jobs; they import from here, never the reverse.\n",
}


# vendored code; this script; the measurements' log, which names the code as it was when measured
SKIP_DIRS = ("starforge/cluster/_vendor/", ".relayout/", "bench/results/")
REPO = Path(__file__).resolve().parents[1]
PKG = "starforge"


def die(message: str, hint: str | None = None) -> None:
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    sys.exit(1)


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout


def old_path(dotted: str) -> str:
    return f"{PKG}/{dotted.replace('.', '/')}.py"


# ----- names ---------------------------------------------------------------------------------

ABS = {f"{PKG}.{k}": f"{PKG}.{v}" for k, v in MOVES.items()}


def new_module(module: str) -> str:
    """The new dotted name of *module* (an old one), or *module* itself when it did not move."""
    for old in sorted(ABS, key=len, reverse=True):
        if module == old or module.startswith(old + "."):
            return ABS[old] + module[len(old):]
    return module


# starforge.<old>  (not after a word character or a dot: media types such as vnd.starforge.x stay)
DOTTED = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in sorted(ABS, key=len, reverse=True)) + r")\b(?!-)")
# backends.<job module> without the package prefix, as docs and docstrings write it
SHORT_JOBS = {k: v for k, v in MOVES.items() if k.startswith("backends.")}
SHORT = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in SHORT_JOBS) + r")\b(?![-(])")
# file paths: starforge/x.py, starforge/backends/x.py, backends/x.py, and a loose module's bare x.py
LOOSE = {k: v for k, v in MOVES.items() if "." not in k}
BARE_AMBIGUOUS = {"prep"}  # cli/prep.py exists too: only the prefixed path is rewritten
PATHS = re.compile(
    r"(?<![\w./-])((?:starforge/)?(?:backends/)?)(" + "|".join(sorted({k.split(".")[-1] for k in MOVES}, key=len, reverse=True))
    + r")\.py\b")


# a moved test's path: tests/test_x.py, or test_x.py as docs/security.md names it (below tests/)
TEST_PATHS = re.compile(r"(?<![\w/.-])((?:tests/)?)(" + "|".join(re.escape(Path(p).stem) for p in TEST_MOVES) + r")\.py\b")
TEST_NEW = {Path(old).stem: new[len("tests/"):] for old, new in TEST_MOVES.items()}


def new_path_token(match: re.Match) -> str:
    prefix, name = match.group(1), match.group(2)
    in_backends = prefix.endswith("backends/")
    key = f"backends.{name}" if in_backends else name
    if key not in MOVES or (not prefix and key in BARE_AMBIGUOUS):
        return match.group(0)
    new = MOVES[key].replace(".", "/") + ".py"
    return ("starforge/" if prefix.startswith("starforge/") else "") + new


# a relative import written out in text (source code a test writes to a file below the package root)
RELATIVE = re.compile(r"(from \.\.+)(" + "|".join(sorted(MOVES, key=len, reverse=True)).replace(".", r"\.") + r")\b(?=\s+import)")


def rewrite_text(text: str) -> str:
    text = RELATIVE.sub(lambda m: m.group(1) + MOVES[m.group(2)], text)
    text = DOTTED.sub(lambda m: ABS[m.group(1)], text)
    text = SHORT.sub(lambda m: SHORT_JOBS[m.group(1)], text)
    text = TEST_PATHS.sub(lambda m: m.group(1) + TEST_NEW[m.group(2)], text)
    return PATHS.sub(new_path_token, text)


# ----- imports -------------------------------------------------------------------------------

def module_of(path: str) -> tuple[str, bool]:
    parts = path[:-3].split("/")
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def relative(target: str, module: str, is_package: bool) -> str:
    here = module.split(".") if is_package else module.split(".")[:-1]
    there = target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    return "." * (len(here) - common + 1) + ".".join(there[common:])


def rewrite_imports(text: str, old_module: str, new_mod: str, is_package: bool) -> list[tuple[int, int, str]]:
    """``(start, end, replacement)`` character spans of every ``from … import`` of a moved module
    (relative imports re-made from the file's new place; a group of names split by new package)."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:
        line = lines[lineno - 1]
        return starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8"))

    spans = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level and not old_module.startswith(PKG + ".") and old_module != PKG:
            continue  # a relative import outside the package (tests/cluster/) is not ours
        base = absolute(node, old_module, is_package)
        if not (base == PKG or base.startswith(PKG + ".")):
            continue
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            full = f"{base}.{alias.name}"
            if full in ABS:
                parent, _, name = ABS[full].rpartition(".")
                bound = alias.asname or alias.name
                spelled = name if bound == name else f"{name} as {bound}"
            else:
                parent = new_module(base)
                spelled = alias.name if not alias.asname else f"{alias.name} as {alias.asname}"
            groups.setdefault(parent, []).append(spelled)
        start, end = offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)
        source = text[start:end]
        spec = lambda target: relative(target, new_mod, is_package) if node.level else target  # noqa: E731
        if len(groups) == 1:
            (parent, spelled), = groups.items()
            plain = [a.name if not a.asname else f"{a.name} as {a.asname}" for a in node.names]
            if spelled == plain:
                head = re.match(r"from\s+([.\w]+)\s+import", source)
                new_spec = spec(parent)
                if head.group(1) != new_spec:
                    spans.append((start + head.start(1), start + head.end(1), new_spec))
                continue
        indent = " " * node.col_offset
        made = [f"from {spec(parent)} import {', '.join(names)}" for parent, names in groups.items()]
        spans.append((start, end, f"\n{indent}".join(made)))
    return spans


def rewrite_python(text: str, old_module: str, new_mod: str, is_package: bool) -> str:
    spans = sorted(rewrite_imports(text, old_module, new_mod, is_package))
    out, last = [], 0
    for start, end, replacement in spans:
        out.append(rewrite_text(text[last:start]))
        out.append(replacement)
        last = end
    out.append(rewrite_text(text[last:]))
    return "".join(out)


# ----- pyproject -----------------------------------------------------------------------------

def rewrite_pyproject(text: str) -> str:
    head, sep, rest = text.partition("packages = [\n")
    if not sep:
        die("pyproject.toml has no `packages = [` list", "add the new packages by hand")
    body, close, tail = rest.partition("]\n")
    names = [line.strip().strip(",").strip('"') for line in body.splitlines() if line.strip()]
    names = sorted(set(names) | {f"{PKG}.{p}" for p in PACKAGES}, key=lambda n: (n != PKG, n))
    return head + sep + "".join(f'    "{n}",\n' for n in names) + close + tail


# ----- hand edits ----------------------------------------------------------------------------
# What the move needs beyond the mapping, applied to the rewritten text (paths are the new ones).
# ("once", file, old, new): *old* found exactly once; ("all", …): at least once;
# ("between", file, start, end, new): the text from *start* to *end* (both included), each found once.

LAYERS_TABLE = """LAYERS = (
    # the cluster side and its public names; `forge prep`'s child (and its package's empty __init__),
    # run from a zip under any interpreter; the templates `forge plugin init` writes (installed as data)
    ("cluster", "plugins", "patching", "launch", "prep", "prep.child", "schemas", "plugin_templates"),
    # the small shared modules, and the lower modules of the packages by concept
    ("errors", "urls", "terminal_text",
     "state", "state.home", "state.directories", "state.filelock", "state.credentials", "state.process_group",
     "package_format", "package_format.yamlio", "package_format.archive",
     "signatures", "signatures.sigstore_bundle", "signatures.model_signature"),
    ("package_format.manifest", "state.userconfig"),
    ("signatures.signing", "authoring"),
    ("registry",),
    ("jobs",),
    ("backends",),
    ("experiment", "bundle", "prep.run", "catalog"),
    ("cli", "__main__"),
)


def placed(module: str, level: dict) -> str:
    \"\"\"The entry of *level* that places *module*: its longest dotted prefix below ``starforge.``
    (``starforge.state.home`` → ``state.home``; ``starforge.jobs.store`` → ``jobs``), else its top-level name.\"\"\"
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in level:
            return ".".join(parts[:n])
    return parts[0] if parts else ""  # "": the package's __init__ (its version), below everything


def layer_violations(graph: dict, layers=LAYERS) -> list:
    \"\"\"``module -> target`` for each import of a higher layer, and ``unplaced: name`` for each
    top-level name of the package in no layer. A package is placed whole (``jobs``) or module by
    module (``state.home``): a module takes the layer of its longest placed prefix.\"\"\"
    level = {name: i for i, names in enumerate(layers) for name in names}

    out = sorted({f"unplaced: {placed(m, level)}" for m in graph if placed(m, level) and placed(m, level) not in level})
    for module, edges in graph.items():
        for target, lines in edges.items():
            a, b = placed(module, level), placed(target, level)
            if a in level and b in level and level[b] > level[a]:
                out.append(f"{module} -> {target} (line {lines[0]})")
    return sorted(out)
"""

LAYER_TEST_ADDED = """

def test_a_module_placed_on_its_own_keeps_to_its_layer_inside_its_package(tmp_path):
    root = tmp_path / "starforge"
    (root / "state").mkdir(parents=True)
    (root / "registry").mkdir()
    for f in ("__init__.py", "state/__init__.py", "registry/__init__.py"):
        (root / f).write_text("")
    (root / "state" / "userconfig.py").write_text("from ..registry import x\\n")
    (root / "state" / "home.py").write_text("def f():\\n    from .userconfig import load\\n")
    assert layer_violations(package_graph(root, "starforge")) == [
        "starforge.state.home -> starforge.state.userconfig (line 2)",
        "starforge.state.userconfig -> starforge.registry (line 1)"]
"""

LAYERS_DOC = """**The layers**, bottom up: `cluster/` (with `plugins`, `patching`, `launch`, the prep child
`prep/child.py` with its package's empty `prep/`, and the data folders `schemas/`, `plugin_templates/`);
the small shared modules (`errors`, `urls`, `terminal_text`) and the lower modules of the packages by
concept: the laptop's own state (`state/`: `state/home.py`, `state/directories.py`, `state/filelock.py`,
`state/credentials.py`, `state/process_group.py`), the package format (`package_format/`:
`package_format/yamlio.py`, `package_format/archive.py`) and the signatures (`signatures/`:
`signatures/sigstore_bundle.py`, `signatures/model_signature.py`); `package_format/manifest.py` and
`state/userconfig.py`; `signatures/signing.py` and `authoring/`; `registry/`; `jobs/`; `backends/`;
`experiment/`, `bundle/`, `prep/run.py` and `catalog/`; `cli/` and `__main__.py`. No import runs back up"""

LAPTOP_DOC = """**Laptop side** (`cli/`, `authoring/`, `registry/`, `experiment/`, `jobs/`, `backends/`, `bundle/`,
`catalog/`, `signatures/`, `package_format/`, `state/`, `prep/run.py`, `errors.py`, `urls.py`,
`terminal_text.py`) may use click"""

EDITS: list[tuple] = [
    # prep's child runs from a zip: its package's (empty) __init__ goes in with it, found beside run.py
    ("once", "starforge/prep/run.py",
     'sources["starforge/prep/child.py"] = str(Path(__file__).with_name("prep/child.py"))',
     'sources["starforge/prep/__init__.py"] = str(Path(__file__).with_name("__init__.py"))\n'
     '    sources["starforge/prep/child.py"] = str(Path(__file__).with_name("child.py"))'),
    # the cluster contract covers the child's package too; the copy under test is a plain file
    ("once", "tests/launch/test_cluster_contract.py",
     '"starforge.prep.child": "prep/child.py"}',
     '"starforge.prep": "prep/__init__.py", "starforge.prep.child": "prep/child.py"}'),
    ("once", "tests/launch/test_cluster_contract.py", 'child = tmp_path / "prep/child.py"', 'child = tmp_path / "child.py"'),
    # a moved test that finds the checkout from its own place is one folder deeper
    ("once", "tests/prep/test_prep.py", "Path(__file__).resolve().parents[1]", "Path(__file__).resolve().parents[2]"),
    # the layer table places every new package, module by module where a package spans layers
    ("between", "tests/test_import_cycles.py", "LAYERS = (\n", '    return sorted(out)\n', LAYERS_TABLE),
    ("once", "tests/test_import_cycles.py",
     '        == [["cluster", "launch"], ["__main__", "cli"]]\n',
     '        == [["cluster", "launch"], ["__main__", "cli"]]\n' + LAYER_TEST_ADDED),
    ("once", "tests/test_import_cycles.py",
     'return [sorted(re.sub(r"(/|\\.py)$", "", name) for name',
     'return [sorted(re.sub(r"(/|\\.py)$", "", name).replace("/", ".") for name'),
    ("once", "tests/test_import_cycles.py",
     '(``cluster/`` → ``cluster``, ``prep.py`` → ``prep``)',
     '(``cluster/`` → ``cluster``, ``state/home.py`` → ``state.home``)'),
    # the upward-arrow finder's own test builds a signing module where it now lives
    ("once", "tests/test_import_cycles.py",
     '    for f in ("__init__.py", "registry/__init__.py", "registry/cache.py"):\n        (root / f).write_text("")\n'
     '    (root / "signatures/signing.py").write_text("def verify():\\n    from .registry.cache import remember\\n")',
     '    (root / "signatures").mkdir()\n'
     '    for f in ("__init__.py", "registry/__init__.py", "registry/cache.py", "signatures/__init__.py"):\n'
     '        (root / f).write_text("")\n'
     '    (root / "signatures/signing.py").write_text("def verify():\\n    from ..registry.cache import remember\\n")'),
    ("between", "tests/test_import_cycles.py", "# Arrows that would run back up", "# and bundle/, then cli/.",
     "# Arrows that would run back up the layers (low module -> package above it). The laptop's\n"
     "# layers, bottom up: cluster/, then package_format/manifest and signatures/signing, then registry/,\n"
     "# then experiment/ and bundle/, then cli/."),
    # docs/architecture.md: the layers, the laptop side, and the job modules' own row
    ("between", "docs/architecture.md", "**The layers**, bottom up:", "No import runs back up", LAYERS_DOC),
    ("between", "docs/architecture.md", "**Laptop side** (", ") may use click", LAPTOP_DOC),
    ("all", "docs/architecture.md", "`prep.py`", "`prep/run.py`"),
    ("split-row", "docs/architecture.md", "| `backends/` | ", "; `staged.py`: ",
     "| `jobs/` | a job on the laptop, below the backends that run it (`backends/` imports it, never the reverse): "
     "`staged.py`: "),
]


# ----- the run -------------------------------------------------------------------------------

def apply_edit(kind: str, rel: str, text: str, *args: str) -> str:
    def once(needle: str) -> int:
        if text.count(needle) != 1:
            die(f"{rel}: {needle!r} is found {text.count(needle)} times, not once",
                "the file changed since the script was written: update EDITS in .relayout/apply.py")
        return text.index(needle)

    if kind == "once":
        old, new = args
        once(old)
        return text.replace(old, new)
    if kind == "all":
        old, new = args
        if old not in text:
            die(f"{rel}: {old!r} is not found", "update EDITS in .relayout/apply.py")
        return text.replace(old, new)
    if kind == "between":
        start, end, new = args
        i = once(start)
        j = text.index(end, i) + len(end)
        return text[:i] + new + text[j:]
    if kind == "split-row":  # a table row split in two at *at*: the rest becomes a row of its own
        row_start, at, new_head = args
        i = once("\n" + row_start) + 1
        line_end = text.index("\n", i)
        k = text.find(at, i, line_end)
        if k < 0:
            die(f"{rel}: the row {row_start!r} has no {at!r}", "update EDITS in .relayout/apply.py")
        row_tail = text[k + len(at):line_end]
        return text[:k] + " |\n" + new_head + row_tail + text[line_end:]
    raise ValueError(kind)


def main(argv: list[str]) -> int:
    dry = "--dry-run" in argv
    if any(a not in ("--dry-run",) for a in argv):
        die(f"unknown argument {' '.join(a for a in argv if a != '--dry-run')}", "usage: python .relayout/apply.py [--dry-run]")
    done = [f"{PKG}/{p}/" for p in PACKAGES if (REPO / PKG / p / "__init__.py").exists()]
    if done:
        die(f"already applied: {', '.join(done)} exists", "the move runs once; nothing was changed")
    missing = [p for p in [old_path(k) for k in MOVES] + list(TEST_MOVES) if not (REPO / p).is_file()]
    if missing:
        die(f"not found: {', '.join(missing)}", "a module was renamed or moved since the table was written: update MOVES")
    if git("status", "--porcelain", "--untracked-files=no").strip() and not dry:
        die("the work tree has uncommitted changes", "commit them first, so the move is a commit of its own")

    files = [f for f in git("ls-files").splitlines() if not f.startswith(SKIP_DIRS)]
    moved_to = {old_path(k): old_path(v) for k, v in MOVES.items()} | TEST_MOVES
    changed: list[str] = []
    new_text: dict[str, str] = {}
    for path in files:
        full = REPO / path
        if not full.is_file() or full.is_symlink():
            continue
        try:
            text = full.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        target = moved_to.get(path, path)
        if path.endswith(".py"):
            old_mod, is_package = module_of(path)
            new_mod, _ = module_of(target)
            if not target.startswith(PKG + "/"):
                old_mod = new_mod = "_outside"  # relative imports outside the package are not ours
            result = rewrite_python(text, old_mod, new_mod, is_package)
        elif path == "pyproject.toml":
            result = rewrite_pyproject(rewrite_text(text))
        else:
            result = rewrite_text(text)
        if result != text or target != path:
            new_text[target] = result
            changed.append(f"{path} -> {target}" if target != path else path)

    for kind, rel, *args in EDITS:
        text = new_text[rel] if rel in new_text else (REPO / rel).read_text(encoding="utf-8")
        new_text[rel] = apply_edit(kind, rel, text, *args)
        if not any(c == rel or c.endswith(" -> " + rel) for c in changed):
            changed.append(rel)

    for line in changed:
        print(("would change " if dry else "changed ") + line)
    for pkg in PACKAGES:
        print(("would create " if dry else "created ") + f"{PKG}/{pkg}/__init__.py")
    if dry:
        return 0

    for pkg in PACKAGES:
        (REPO / PKG / pkg).mkdir(exist_ok=True)  # a folder left holding only __pycache__ may be there
    for new in TEST_MOVES.values():
        (REPO / new).parent.mkdir(exist_ok=True)
    for old, new in moved_to.items():
        git("mv", old, new)
    for pkg, doc in PACKAGES.items():
        (REPO / PKG / pkg / "__init__.py").write_text(f'"""{doc}"""\n', encoding="utf-8")
    for rel, text in new_text.items():
        (REPO / rel).write_text(text, encoding="utf-8")

    stale = REPO / "build" / "lib" / PKG  # setuptools' build output would reinstall the old modules beside the new
    if stale.is_dir():
        shutil.rmtree(stale)
        print(f"removed {stale.relative_to(REPO)} (stale build output)")
    ruff = shutil.which("ruff", path=str(REPO / ".venv" / "bin")) or shutil.which("ruff")
    if ruff:
        py = sorted({p for p in new_text if p.endswith(".py")} | {f"{PKG}/{p}/__init__.py" for p in PACKAGES})
        subprocess.run([ruff, "check", "-q", "--fix", "--select", "I", *py], cwd=REPO, check=False)
        print("imports re-sorted with ruff (rule I)")
    else:
        print("warning: ruff not found; run `ruff check --fix --select I starforge tests` for the import order")
    loose = sorted(p.name for p in (REPO / PKG).glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    print(f"loose modules left under starforge/: {len(loose)} ({', '.join(loose)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
