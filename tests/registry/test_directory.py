"""The directory registry: layout, immutability, PEP 440 version equality, concurrency."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from starforge.errors import ImmutableVersionError, NotFoundError, RegistryError
from starforge.registry import open_registry
from starforge.registry.directory import DirectoryRegistry


def test_publish_then_get_and_download_round_trip(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    result = reg.publish(archive, info)
    assert result.created is True
    got = reg.get("alice", "opsd-patch", "1.2.0")
    assert (got.ref, got.tree_digest, got.artifact_digest) == ("alice/opsd-patch@1.2.0", info.tree_digest, info.artifact_digest)
    assert got.files == info.files and got.top_level == ("opsd_patch",) and got.size == archive.stat().st_size
    assert got.manifest["entrypoint"] == "opsd_patch:install"
    assert got.signed is False
    out = tmp_path / "copy.tar.gz"
    reg.download(got, out)
    assert out.read_bytes() == archive.read_bytes()
    # The documented layout.
    hex_ = info.artifact_digest.removeprefix("sha256:")
    assert (tmp_path / "reg" / "blobs" / "sha256" / hex_).read_bytes() == archive.read_bytes()
    record = json.loads((tmp_path / "reg" / "plugins" / "alice" / "opsd-patch" / "1.2.0.json").read_text())
    assert record["tree_digest"] == info.tree_digest
    assert reg.versions("alice", "opsd-patch") == ["1.2.0"]
    assert reg.plugins() == [("alice", "opsd-patch")]


def test_republishing_the_same_tree_is_a_no_op(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    reg.publish(archive, info)
    record = tmp_path / "reg" / "plugins" / "alice" / "opsd-patch" / "1.2.0.json"
    before = record.read_bytes()
    again = reg.publish(archive, info)
    assert again.created is False
    assert again.version.tree_digest == info.tree_digest
    assert record.read_bytes() == before


def test_other_content_under_a_published_version_is_refused_naming_both_digests(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive1, info1 = make_version(extra="A = 1\n")
    archive2, info2 = make_version(extra="A = 2\n")
    assert info1.tree_digest != info2.tree_digest
    reg.publish(archive1, info1)
    with pytest.raises(ImmutableVersionError) as err:
        reg.publish(archive2, info2)
    assert info1.tree_digest in err.value.message and info2.tree_digest in err.value.message
    assert "alice/opsd-patch@1.2.0" in err.value.message
    assert reg.get("alice", "opsd-patch", "1.2.0").tree_digest == info1.tree_digest
    # The refused archive left no blob behind.
    blobs = os.listdir(tmp_path / "reg" / "blobs" / "sha256")
    assert blobs == [info1.artifact_digest.removeprefix("sha256:")]


def test_versions_equal_by_pep440_are_one_version(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version(version="1.2.0")
    reg.publish(archive, info)
    # "1.2" with the same files is the same version: a no-op that reports the stored spelling.
    same = reg.publish(archive, dataclasses.replace(info, version="1.2"))
    assert (same.created, same.version.version) == (False, "1.2.0")
    archive2, info2 = make_version(version="1.2", extra="B = 1\n")
    with pytest.raises(ImmutableVersionError, match="1.2.0"):
        reg.publish(archive2, info2)
    assert reg.get("alice", "opsd-patch", "1.2").version == "1.2.0"
    assert reg.versions("alice", "opsd-patch") == ["1.2.0"]


def test_versions_sort_by_pep440_not_by_text(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    for v in ("1.10.0", "1.9.0", "1.10.0rc1", "2.0.0"):
        reg.publish(*make_version(version=v, extra=f"V = '{v}'\n"))
    assert reg.versions("alice", "opsd-patch") == ["1.9.0", "1.10.0rc1", "1.10.0", "2.0.0"]


def test_plugins_lists_pairs_optionally_for_one_owner(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    reg.publish(*make_version(owner="bob", name="clip"))
    reg.publish(*make_version(owner="alice", name="opsd-patch"))
    reg.publish(*make_version(owner="alice", name="norm"))
    assert reg.plugins() == [("alice", "norm"), ("alice", "opsd-patch"), ("bob", "clip")]
    assert reg.plugins("bob") == [("bob", "clip")]
    assert reg.plugins("carol") == []


def test_missing_version_and_plugin_errors_say_what_exists(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    reg.publish(*make_version(version="1.0.0"))
    with pytest.raises(NotFoundError) as err:
        reg.get("alice", "opsd-patch", "3.0")
    assert "no version 3.0" in err.value.message and err.value.hint == "available: 1.0.0"
    with pytest.raises(NotFoundError, match="no plugin alice/other"):
        reg.get("alice", "other", "1.0")


def test_a_missing_registry_directory_is_an_error_but_the_default_is_just_empty(tmp_path, forge_home):
    missing = DirectoryRegistry(tmp_path / "nowhere")
    with pytest.raises(NotFoundError, match="no registry at"):
        missing.versions("alice", "opsd-patch")
    assert open_registry().plugins() == []  # the embedded default, not created yet
    assert not (forge_home / "registry").exists()


def test_a_directory_that_is_not_a_registry_is_refused(tmp_path, make_version):
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    reg = DirectoryRegistry(other)
    with pytest.raises(RegistryError, match="not a StarForge registry"):
        reg.plugins()
    with pytest.raises(RegistryError, match="not a StarForge registry"):
        reg.publish(*make_version())
    assert os.listdir(other) == ["cat.jpg"]


def test_an_archive_that_does_not_match_its_declared_digest_is_not_published(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    archive.write_bytes(archive.read_bytes() + b"\0")
    with pytest.raises(RegistryError, match="archive digest"):
        reg.publish(archive, info)
    assert not (tmp_path / "reg").exists()


def test_a_corrupt_blob_is_refused_on_download_and_nothing_is_left(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    reg.publish(archive, info)
    blob = tmp_path / "reg" / "blobs" / "sha256" / info.artifact_digest.removeprefix("sha256:")
    blob.write_bytes(blob.read_bytes()[:40])
    out = tmp_path / "out.tar.gz"
    with pytest.raises(RegistryError, match="corrupt"):
        reg.download(info, out)
    assert not out.exists()


def test_signature_is_stored_beside_the_version(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    reg.publish(archive, info)
    assert reg.signature(info) is None
    # A signature for the same content may be attached later; another one (another key) is
    # kept beside it, never in its place; the same one again adds nothing.
    again = reg.publish(archive, info, signature=b'{"first": 1}')
    assert again.created is False and again.version.signed is True and again.signature_attached is True
    assert reg.publish(archive, info, signature=b'{"second": 2}').signature_attached is True
    assert reg.publish(archive, info, signature=b'{"first": 1}').signature_attached is False
    assert reg.signatures(info) == [b'{"first": 1}', b'{"second": 2}']
    assert reg.signature(info) == b'{"second": 2}'  # the newest
    assert reg.get("alice", "opsd-patch", "1.2").signed is True


def test_publish_leaves_no_temporary_files(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    reg.publish(*make_version(), signature=b"{}")
    names = [n for _, _, files in os.walk(tmp_path / "reg") for n in files]
    assert not [n for n in names if n.endswith(".tmp")]


def test_progress_is_reported_while_publishing_and_downloading(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    seen = []
    reg.publish(archive, info, progress=lambda done, total: seen.append((done, total)))
    size = archive.stat().st_size
    assert seen[-1] == (size, size)
    seen.clear()
    reg.download(info, tmp_path / "x.tar.gz", progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (size, size)


_PUBLISHER = r"""
import json, os, sys, time
from pathlib import Path
from starforge.errors import ImmutableVersionError
from starforge.registry.base import PublishedVersion
from starforge.registry.directory import DirectoryRegistry

root, archive, info_json, go = sys.argv[1:5]
info = PublishedVersion(**json.loads(info_json))
while not os.path.exists(go):
    time.sleep(0.002)
try:
    result = DirectoryRegistry(root).publish(Path(archive), info)
    print(json.dumps({"created": result.created, "digest": result.version.tree_digest}))
except ImmutableVersionError as exc:
    print(json.dumps({"refused": exc.message}))
"""


def test_of_eight_concurrent_publishers_of_one_version_exactly_one_wins(tmp_path, make_version):
    root = tmp_path / "reg"
    go = tmp_path / "go"
    candidates = [make_version(version="1.0.0", extra=f"WHO = {i}\n") for i in range(8)]
    procs = []
    for archive, info in candidates:
        payload = json.dumps(dataclasses.asdict(info))
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _PUBLISHER, str(root), str(archive), payload, str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    time.sleep(0.3)  # let every interpreter start and wait at the barrier
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    winners = [r for r in results if r.get("created") is True]
    refused = [r for r in results if "refused" in r]
    assert len(winners) == 1 and len(refused) == 7
    winner_digest = winners[0]["digest"]
    for r, (_, info) in zip(results, candidates):
        if "refused" in r:
            assert winner_digest in r["refused"] and info.tree_digest in r["refused"]
    reg = DirectoryRegistry(root)
    assert reg.versions("alice", "opsd-patch") == ["1.0.0"]
    stored = reg.get("alice", "opsd-patch", "1.0.0")
    assert stored.tree_digest == winner_digest
    (winning_archive, winning_info), = [c for c in candidates if c[1].tree_digest == winner_digest]
    assert stored.artifact_digest == winning_info.artifact_digest
    reg.download(stored, tmp_path / "w.tar.gz")
    assert (tmp_path / "w.tar.gz").read_bytes() == winning_archive.read_bytes()
    # One consistent version: the only blob is the winner's, nothing half-written remains.
    assert os.listdir(root / "blobs" / "sha256") == [winning_info.artifact_digest.removeprefix("sha256:")]
    assert sorted(os.listdir(root / "plugins" / "alice" / "opsd-patch")) == [".lock", "1.0.0.json"]
    assert hashlib.sha256(winning_archive.read_bytes()).hexdigest() == winning_info.artifact_digest[7:]


def test_download_of_an_archive_this_registry_does_not_serve_says_so_not_damaged(tmp_path, make_version):
    reg = DirectoryRegistry(tmp_path / "reg")
    archive, info = make_version()
    reg.publish(archive, info)
    # Another registry's archive of the same version (e.g. a mirror that packed it differently).
    elsewhere = dataclasses.replace(info, artifact_digest="sha256:" + "ab" * 32)
    with pytest.raises(RegistryError) as exc:
        reg.download(elsewhere, tmp_path / "out")
    assert f"serves alice/opsd-patch@1.2.0 as archive {info.artifact_digest}, not sha256:{'ab' * 32}" in exc.value.message
    assert "damaged" not in (exc.value.hint or "")
    # A blob its own record names but that is gone: that is damage.
    os.unlink(tmp_path / "reg" / "blobs" / "sha256" / info.artifact_digest.removeprefix("sha256:"))
    with pytest.raises(RegistryError) as exc:
        reg.download(reg.get("alice", "opsd-patch", "1.2.0"), tmp_path / "out")
    assert "is missing from registry" in exc.value.message and "damaged" in exc.value.hint
