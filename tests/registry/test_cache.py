"""The pull cache: looked up first (offline staging), verified before use, never poisoned."""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
from pathlib import Path

import pytest

from starforge.errors import ArchiveError, RegistryError, UsageError
from starforge.registry.cache import cached_path, fetch, materialize
from starforge.registry.directory import DirectoryRegistry
from starforge.registry.progress import transfer_progress


def _blob(reg_root: Path, info) -> Path:
    return reg_root / "blobs" / "sha256" / info.artifact_digest.removeprefix("sha256:")


def _cache_files(home: Path) -> list:
    root = home / "cache" / "blobs"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_fetch_fills_the_cache_and_later_works_without_the_registry(tmp_path, forge_home, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    reg.publish(archive, info)
    path = fetch(reg, info)
    hex_ = info.artifact_digest.removeprefix("sha256:")
    assert path == forge_home / "cache" / "blobs" / "sha256" / hex_
    assert path.read_bytes() == archive.read_bytes()
    shutil.rmtree(tmp_path / "reg")  # offline: the registry is gone
    assert fetch(reg, info) == path
    dest = materialize(reg, info, tmp_path / "staged" / "opsd-patch")
    assert sorted(os.listdir(dest)) == ["opsd_patch.py", "plugin.yaml"]


def test_a_truncated_blob_in_the_registry_is_refused_and_not_cached(tmp_path, forge_home, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    reg.publish(archive, info)
    blob = _blob(tmp_path / "reg", info)
    blob.write_bytes(archive.read_bytes()[:-10])
    with pytest.raises(RegistryError):
        fetch(reg, info)
    with pytest.raises(RegistryError):
        materialize(reg, info, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert _cache_files(forge_home) == []  # nothing cached, no partial file left
    blob.write_bytes(archive.read_bytes())  # repaired
    assert fetch(reg, info).read_bytes() == archive.read_bytes()


class _LyingMirror(DirectoryRegistry):
    """A mirror that serves the stored bytes with the last kilobyte flipped and checks nothing."""

    def download(self, info, dest, progress=None):
        data = bytearray(_blob(self.root, info).read_bytes())
        data[-1] ^= 0xFF
        Path(dest).write_bytes(bytes(data))


def test_the_cache_checks_the_digest_itself_whatever_the_registry_serves(tmp_path, forge_home, make_version):
    archive, info = make_version()
    DirectoryRegistry(tmp_path / "reg").publish(archive, info)
    mirror = _LyingMirror(tmp_path / "reg")
    with pytest.raises(RegistryError) as err:
        fetch(mirror, info)
    assert info.artifact_digest in err.value.message
    assert _cache_files(forge_home) == []


def test_a_damaged_cache_entry_is_replaced_by_a_fresh_download(tmp_path, forge_home, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    reg.publish(archive, info)
    path = fetch(reg, info)
    path.write_bytes(b"garbage")
    assert fetch(reg, info).read_bytes() == archive.read_bytes()
    assert path == cached_path(info.artifact_digest)


def test_materialize_writes_the_verified_tree(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version(extra="SCALE = 2.0\n")
    reg.publish(archive, info)
    empty = tmp_path / "empty"
    empty.mkdir()
    dest = materialize(reg, info, empty)
    assert (dest / "opsd_patch.py").read_text().endswith("SCALE = 2.0\n")
    from starforge.cluster.digest import tree_digest

    assert tree_digest(dest) == info.tree_digest
    with pytest.raises(UsageError, match="not an empty directory"):
        materialize(reg, info, dest)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_record_whose_tree_digest_does_not_match_the_archive_is_refused(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version(extra="A = 1\n")
    _, other = make_version(extra="A = 2\n")
    # A registry record that claims other files than its archive holds.
    liar = dataclasses.replace(info, tree_digest=other.tree_digest, files=other.files)
    reg.publish(archive, liar)
    with pytest.raises(ArchiveError) as err:
        materialize(reg, liar, tmp_path / "out")
    assert "changed: opsd_patch.py" in err.value.message
    assert other.tree_digest in err.value.message
    assert not (tmp_path / "out").exists()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_progress_bar_is_drawn_only_on_a_terminal():
    with transfer_progress("pull alice/opsd-patch@1.2.0", 2048, stream=io.StringIO()) as update:
        assert update is None
    screen = _Terminal()
    with transfer_progress("pull alice/opsd-patch@1.2.0", 2048, stream=screen) as update:
        update(1024, 2048)
        update(2048, 2048)
    assert "pull alice/opsd-patch@1.2.0" in screen.getvalue()


def test_a_pull_killed_midway_leaves_a_temp_file_that_the_next_fetch_sweeps(tmp_path, forge_home, make_version):
    import subprocess
    import sys
    import time

    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    reg.publish(archive, info)
    killed = subprocess.run([sys.executable, "-c", (
        "import os, signal, sys\n"
        "from starforge.registry.directory import DirectoryRegistry\n"
        "from starforge.registry.resolve import resolve\n"
        "from starforge.registry.cache import fetch\n"
        "reg = DirectoryRegistry(sys.argv[1])\n"
        "info = resolve(reg, 'alice/opsd-patch')\n"
        "def die(*a, **k): os.kill(os.getpid(), signal.SIGKILL)\n"
        "reg.download = lambda info, dest, progress=None: (open(dest, 'wb').write(b'half'), die())\n"
        "fetch(reg, info)\n"), str(tmp_path / "reg")], env=dict(os.environ, FORGE_HOME=str(forge_home)), timeout=60)
    assert killed.returncode == -9
    [left] = _cache_files(forge_home)
    assert left.endswith(".tmp")
    old = time.time() - 3600
    os.utime(forge_home / "cache" / "blobs" / left, (old, old))
    fetch(reg, info)
    assert _cache_files(forge_home) == ["sha256/" + info.artifact_digest.removeprefix("sha256:")]
