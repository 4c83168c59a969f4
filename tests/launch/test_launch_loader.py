"""The snapshot finder, in this process: verified bytes compiled in memory, nothing on disk."""

from __future__ import annotations

import sys

import pytest

from starforge.cluster import loader
from starforge.cluster.digest import digest_of_bytes, verify_tree


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path / "home"


@pytest.fixture
def importing():
    """Remove the finders and modules a test adds."""
    before_path, before_mods = list(sys.meta_path), set(sys.modules)
    yield
    sys.meta_path[:] = before_path
    for name in set(sys.modules) - before_mods:
        del sys.modules[name]


def make_tree(root, files):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_package_namespace_and_module_load_from_the_snapshot(tmp_path, cache_home, importing):
    root = tmp_path / "snap-plugin"
    files = {
        "snapplug/__init__.py": "from .inner import VALUE\n",
        "snapplug/inner.py": "VALUE = 41\n",
        "snapns/deep/mod.py": "X = 'namespace'\n",
        "snapsolo.py": "import snapplug\nRESULT = snapplug.VALUE + 1\n",
    }
    make_tree(root, files)
    contents = verify_tree(root, digest_of_bytes({k: v.encode() for k, v in files.items()}))
    # The bytes on disk change after verification; the import still sees the verified ones.
    (root / "snapplug" / "inner.py").write_text("VALUE = 0\n")
    sys.meta_path.insert(0, loader.SnapshotFinder(str(root), contents, label="test/snap@1"))
    import snapsolo
    from snapns.deep import mod

    assert snapsolo.RESULT == 42
    assert mod.X == "namespace"
    assert snapsolo.__file__ == str(root / "snapsolo.py")
    assert [p.name for p in root.rglob("__pycache__")] == []
    # compiled in memory: nothing written under FORGE_HOME either
    assert not cache_home.exists()


def test_code_comes_from_the_snapshot_even_with_compiled_files_beside_it(tmp_path, cache_home, importing):
    """A .pyc planted in the plugin tree (or a cache) is never what runs."""
    import importlib.util
    import marshal

    root = tmp_path / "pyc-plugin"
    files = {"pycplug.py": "VALUE = 'verified'\n"}
    make_tree(root, files)
    contents = verify_tree(root, digest_of_bytes({k: v.encode() for k, v in files.items()}))
    planted = marshal.dumps(compile("VALUE = 'planted'\n", str(root / "pycplug.py"), "exec"))
    cache = root / "__pycache__"
    cache.mkdir()
    (cache / f"pycplug.{sys.implementation.cache_tag}.pyc").write_bytes(
        importlib.util.MAGIC_NUMBER + b"\0" * 12 + planted
    )
    sys.meta_path.insert(0, loader.SnapshotFinder(str(root), contents, label="test/pyc@1"))
    import pycplug

    assert pycplug.VALUE == "verified"
