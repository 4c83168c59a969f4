"""The snapshot finder and the private compiled-code cache, in this process."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from starforge.digest import verify_tree, digest_of_bytes
from starforge.launch import loader


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("FORGE_BYTECODE_CACHE", raising=False)
    monkeypatch.setattr(loader, "_cache_dir", False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return tmp_path / "home" / "cache" / "bytecode"


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
    # compiled code went to the private per-user cache, one entry per source
    assert len(os.listdir(cache_home)) == 4
    assert stat.S_IMODE(os.stat(cache_home).st_mode) == 0o700


def test_cache_hit_reuses_code_and_a_shared_cache_dir_is_ignored(tmp_path, cache_home, importing):
    code = loader.compile_cached(b"A = 1\n", str(tmp_path / "x.py"))
    (entry,) = os.listdir(cache_home)
    again = loader.compile_cached(b"A = 1\n", str(tmp_path / "x.py"))
    assert again.co_filename == code.co_filename and again.co_code == code.co_code
    # A different file name is another entry (tracebacks name the real file).
    loader.compile_cached(b"A = 1\n", str(tmp_path / "y.py"))
    assert len(os.listdir(cache_home)) == 2
    os.chmod(cache_home, 0o777)
    loader._cache_dir = False
    loader.compile_cached(b"B = 2\n", str(tmp_path / "z.py"))
    assert len(os.listdir(cache_home)) == 2  # not written: others could plant code there


def test_cache_can_be_turned_off(tmp_path, cache_home, monkeypatch):
    monkeypatch.setenv("FORGE_BYTECODE_CACHE", "0")
    loader.compile_cached(b"A = 1\n", str(tmp_path / "x.py"))
    assert not cache_home.exists()
    monkeypatch.delenv("FORGE_BYTECODE_CACHE")
    monkeypatch.setattr(loader, "_cache_dir", False)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # python -B / PYTHONDONTWRITEBYTECODE
    loader.compile_cached(b"A = 1\n", str(tmp_path / "x.py"))
    assert not cache_home.exists()
