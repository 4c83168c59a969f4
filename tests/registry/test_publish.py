"""publish_plugin: checks, pack, store; then resolve and pull give back the same tree."""

from __future__ import annotations

import pytest
from plugin_builders import write_plugin

from starforge.cluster.digest import tree_digest
from starforge.errors import CheckError, ImmutableVersionError, UsageError
from starforge.registry.cache import materialize
from starforge.registry.directory import DirectoryRegistry
from starforge.registry.publish import default_owner, publish_plugin
from starforge.registry.resolve import resolve


def test_publish_resolve_pull_round_trip_keeps_the_tree_digest(tmp_path):
    src = write_plugin(tmp_path / "opsd-patch", extra="SCALE = 1.0\n")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "opsd_patch.cpython-311.pyc").write_bytes(b"debris")
    expected = tree_digest(src, ["opsd_patch.py", "plugin.yaml"])
    reg = DirectoryRegistry(tmp_path / "reg")
    result = publish_plugin(src, reg, "alice")
    assert result.created is True
    info = result.version
    assert (info.ref, info.tree_digest) == ("alice/opsd-patch@1.2.0", expected)
    assert info.manifest["entrypoint"] == "opsd_patch:install"
    assert info.top_level == ("opsd_patch",)
    assert sorted(info.files) == ["opsd_patch.py", "plugin.yaml"]
    got = resolve(reg, "alice/opsd-patch@~=1.2")
    assert got.tree_digest == expected and got.artifact_digest == info.artifact_digest
    pulled = materialize(reg, got, tmp_path / "pulled")
    assert tree_digest(pulled) == expected  # every file, no excludes: the debris stayed home
    assert (pulled / "opsd_patch.py").read_text() == (src / "opsd_patch.py").read_text()


def test_republishing_unchanged_is_a_no_op_and_changed_content_needs_a_new_version(tmp_path):
    src = write_plugin(tmp_path / "opsd-patch")
    reg = DirectoryRegistry(tmp_path / "reg")
    first = publish_plugin(src, reg, "alice").version
    assert publish_plugin(src, reg, "alice").created is False
    (src / "opsd_patch.py").write_text("def install(params):\n    return 1\n")
    changed = tree_digest(src, ["opsd_patch.py", "plugin.yaml"])
    with pytest.raises(ImmutableVersionError) as err:
        publish_plugin(src, reg, "alice")
    assert first.tree_digest in err.value.message and changed in err.value.message
    assert "bump" in err.value.hint


def test_a_plugin_that_fails_its_checks_is_not_published(tmp_path):
    src = write_plugin(tmp_path / "opsd-patch")
    (src / "plugin.yaml").write_text((src / "plugin.yaml").read_text().replace("entrypoint", "entry_point"))
    reg = DirectoryRegistry(tmp_path / "reg")
    with pytest.raises(CheckError):
        publish_plugin(src, reg, "alice")
    assert not (tmp_path / "reg").exists()


def test_a_signed_publish_stores_an_envelope(tmp_path):
    from starforge.registry.store import verify_published
    from starforge.signatures.signing import generate_key, load_trust, trust_add

    key = generate_key(tmp_path / "keys" / "alice.key")
    reg = DirectoryRegistry(tmp_path / "reg")
    info = publish_plugin(write_plugin(tmp_path / "p"), reg, "alice", sign_key=key.private).version
    assert info.signed is True and reg.signature(info) is not None
    trust_add("alice", key.public)
    assert verify_published(reg, info, load_trust()) == "verified"


def test_owner_comes_from_flag_then_env_then_config_then_login(forge_home, monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: "loginname")
    assert default_owner() == "loginname"
    forge_home.mkdir(parents=True, exist_ok=True)
    (forge_home / "config.yaml").write_text("owner: carol\n")
    assert default_owner() == "carol"
    monkeypatch.setenv("FORGE_OWNER", "bob")
    assert default_owner() == "bob"
    assert default_owner("alice") == "alice"
    with pytest.raises(UsageError, match="'Alice.Smith'"):
        default_owner("Alice.Smith")


KILLED_MIDWAY = """
import os, signal, sys
from pathlib import Path
from starforge.registry.directory import DirectoryRegistry
from starforge.registry.publish import publish_plugin

def die(done, total):
    if done >= (1 << 20):
        os.kill(os.getpid(), signal.SIGKILL)

publish_plugin(Path(sys.argv[1]), DirectoryRegistry(sys.argv[2]), "alice", progress=die)
"""


def _publish_killed_midway(tmp_path):
    """A publish of a 4 MiB plugin to a directory registry, killed (-9) midway, with a TMPDIR
    of its own: ``(plugin source, registry dir, TMPDIR)``."""
    import os
    import subprocess
    import sys

    src = write_plugin(tmp_path / "opsd-patch")
    (src / "weights.bin").write_bytes(os.urandom(4 << 20))  # random: the archive stays 4 MiB
    reg_dir, tmp_dir = tmp_path / "reg", tmp_path / "tmp"
    tmp_dir.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_dir))
    killed = subprocess.run([sys.executable, "-c", KILLED_MIDWAY, str(src), str(reg_dir)], env=env, timeout=120)
    assert killed.returncode == -9
    return src, reg_dir, tmp_dir


def _debris(reg_dir, tmp_dir) -> tuple[list, list]:
    """``(temp files in the registry, publish folders in TMPDIR)``."""
    temps = sorted(p for p in reg_dir.rglob("*.tmp"))
    return temps, [p for p in tmp_dir.iterdir() if p.name.startswith("forge-publish-")]


def _publish_again(src, reg_dir, tmp_dir) -> None:
    """The same publish, left to finish."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, TMPDIR=str(tmp_dir))
    retry = subprocess.run([sys.executable, "-c", KILLED_MIDWAY.replace("progress=die", "progress=None"), str(src), str(reg_dir)],
                           env=env, timeout=120, capture_output=True, text=True)
    assert retry.returncode == 0, retry.stderr


def test_a_publisher_killed_midway_leaves_debris_that_the_next_publish_sweeps(tmp_path):
    import os
    import time

    src, reg_dir, tmp_dir = _publish_killed_midway(tmp_path)
    temps, publish_dirs = _debris(reg_dir, tmp_dir)
    assert temps and publish_dirs, "the kill left nothing to sweep"
    an_hour_ago = time.time() - 3600
    for path in temps + publish_dirs:
        os.utime(path, (an_hour_ago, an_hour_ago))

    _publish_again(src, reg_dir, tmp_dir)
    assert _debris(reg_dir, tmp_dir) == ([], [])
    assert DirectoryRegistry(reg_dir).get("alice", "opsd-patch", "1.2.0").size > 4 << 20


def test_a_killed_publishers_debris_on_this_host_goes_with_the_very_next_publish(tmp_path):
    """kill -9 of a publish to a directory registry, then a retry at once: nothing stays.

    Temp names carry the host (and PID namespace): a dead writer of this host is swept
    without waiting; only another host's temp files on a shared directory keep the 600 s
    grace."""

    from starforge.cluster.atomic import writer_tag

    src, reg_dir, tmp_dir = _publish_killed_midway(tmp_path)
    temps, publish_dirs = _debris(reg_dir, tmp_dir)
    assert temps and publish_dirs, "the kill left nothing to sweep"
    assert all(p.name.endswith(f"@{writer_tag()}.tmp") for p in temps), temps
    # A temp file of a writer on another host of the shared directory, being written now.
    other = reg_dir / "blobs" / "sha256" / f".{'b' * 64}.4242-1@other-host+4026531836.tmp"
    other.write_bytes(b"in flight elsewhere")

    _publish_again(src, reg_dir, tmp_dir)
    assert _debris(reg_dir, tmp_dir) == ([other], [])  # ours gone at once; the other host's kept (600 s rule)
    assert DirectoryRegistry(reg_dir).get("alice", "opsd-patch", "1.2.0").size > 4 << 20
