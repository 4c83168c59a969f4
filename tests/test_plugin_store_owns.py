"""One module decides whether a plugin version may run, and from which bytes: registry/store.py.

Read from the source with ast (lazy imports and calls included). What only the store may
do, and the few modules that implement the parts it is built on:

- import the pull cache (``registry/cache.py``: the store's private storage);
- load the trust file (``load_trust``, ``read_trust``): besides the store, ``signatures/signing.py``,
  which defines it and edits it (``forge trust add/remove/list``), and ``cluster/``, where
  the launcher reads ``FORGE_TRUST`` on the node;
- verify a signature envelope or the Sigstore bundles beside it (``verify_envelope``,
  ``check_bundles``): besides the store, ``cluster/`` (``dsse.py`` holds the check, the
  launcher runs it) and ``signatures/sigstore_bundle.py``, which defines ``check_bundles``;
- unpack an archive (import ``archive.unpack``): besides the store, the cache;
- download from a registry (``download``, ``signature``, ``signatures``,
  ``sigstore_bundles``): besides the store, the cache and the registry kinds that
  implement them (``base``, ``directory``, ``oci``);
- judge a yank (``yank_facts``): besides the store, ``yank.py``, which defines it.

And the functions that made these decisions before the store did are defined nowhere else,
so no façade over them can stand in for it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import starforge

ROOT = Path(starforge.__file__).parent
STORE = "registry/store.py"

CACHE = "starforge.registry.cache"
UNPACK = "starforge.package_format.archive.unpack"
# what only the store may call, and who else may (the definers and the parts it is built on)
ONLY_THE_STORE = {
    "load_trust": ("signatures/signing.py", "cluster/"),
    "read_trust": ("signatures/signing.py", "cluster/"),
    "verify_envelope": ("cluster/",),
    "check_bundles": ("signatures/sigstore_bundle.py",),
    "download": ("registry/cache.py", "registry/base.py", "registry/directory.py", "registry/oci.py"),
    "signature": ("registry/base.py", "registry/directory.py", "registry/oci.py"),
    "signatures": ("registry/base.py", "registry/directory.py", "registry/oci.py"),
    "sigstore_bundles": ("registry/base.py", "registry/directory.py", "registry/oci.py"),
    "yank_facts": ("registry/yank.py",),
}
# the decisions that moved into the store: defined nowhere else
MOVED = ("verify_signatures", "carried_signatures", "served_version", "materialize_locked", "get_locked",
         "checked_tree", "staged_envelope", "check_served", "locked_envelope", "checked_envelopes",
         "verify_published_envelope", "stored_envelopes", "fetch_verified", "fetch_to_sign", "verified_tree",
         "moved_tag_error", "registry_hint")


def _module_name(rel: str) -> str:
    parts = ["starforge", *Path(rel).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str) -> list:
    """The absolute modules an import node names (``from . import cache`` names ``….cache``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = module.split(".")
    if node.level:
        base = base[: len(base) - node.level]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    return [target] + [f"{target}.{a.name}" for a in node.names]


def violations(source: str, rel: str) -> list:
    """``rel:line: what`` for everything *source* (the module at *rel* under starforge/) does that only the store may."""
    if rel == STORE:
        return []
    module = _module_name(rel)
    is_package = rel.endswith("__init__.py")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and rel != "registry/cache.py":
            names = _imported(node, module + (".__init__" if is_package else ""))
            if any(n == CACHE or n.startswith(CACHE + ".") for n in names):
                found.append(f"{rel}:{node.lineno}: imports the cache")
            if UNPACK in names:
                found.append(f"{rel}:{node.lineno}: unpacks an archive")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in ONLY_THE_STORE and not any(rel == a or (a.endswith("/") and rel.startswith(a))
                                                  for a in ONLY_THE_STORE[name]):
                found.append(f"{rel}:{node.lineno}: calls {name}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in MOVED:
            found.append(f"{rel}:{node.lineno}: defines {node.name}")
    return sorted(found, key=lambda v: int(v.split(":")[1]))


def test_the_check_finds_what_only_the_store_may_do():
    source = (
        "from ..registry.cache import fetch\n"
        "from ..signatures.signing import load_trust\n"
        "def served_version(entry, registry):\n"
        "    trust = load_trust()\n"
        "    registry.download(info, dest)\n"
        "    from ..package_format.archive import unpack\n"
        "    unpack(archive, dest)\n"
        "    verify_envelope(envelope, trust=trust)\n"
        "    return registry.signature(info)\n"
    )
    assert violations(source, "experiment/stage.py") == [
        "experiment/stage.py:1: imports the cache",
        "experiment/stage.py:3: defines served_version",
        "experiment/stage.py:4: calls load_trust",
        "experiment/stage.py:5: calls download",
        "experiment/stage.py:6: unpacks an archive",
        "experiment/stage.py:8: calls verify_envelope",
        "experiment/stage.py:9: calls signature",
    ]
    assert violations("from . import cache\n", "registry/verified.py") == ["registry/verified.py:1: imports the cache"]
    assert violations("import starforge.registry.cache as c\n", "cli/x.py") == ["cli/x.py:1: imports the cache"]
    assert violations(source, STORE) == []
    assert violations("from ..package_format.archive import unpack\n", "registry/verified.py") == [
        "registry/verified.py:1: unpacks an archive"]


def test_only_the_store_decides_whether_a_version_may_run_and_from_which_bytes():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if "_vendor" in rel.split("/"):
            continue
        found += violations(path.read_text(encoding="utf-8"), rel)
    assert found == []


def test_no_module_outside_registry_imports_the_cache():
    importers = sorted(
        rel for rel in (path.relative_to(ROOT).as_posix() for path in ROOT.rglob("*.py") if "_vendor" not in path.parts)
        if rel == STORE or any("imports the cache" in v for v in violations((ROOT / rel).read_text(encoding="utf-8"), rel))
    )
    assert importers == [STORE]


def test_the_architecture_doc_names_the_owner_and_nothing_it_replaced():
    text = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "store.PluginStore" in text and "tests/test_plugin_store_owns.py" in text
    assert [m for m in ("verified_fetch", "locked_signature", "remember_verified", "verify_published_envelope") if m in text] == []
