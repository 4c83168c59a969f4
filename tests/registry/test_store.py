"""registry/store.py: the one place a published version is fetched as verified.

Pull, show, prep, bundle verify, lock and staging all judge a version's signature and keep
a verified envelope through ``PluginStore.fetch_verified``; ``tests/test_plugin_store_owns.py``
keeps every other module from doing it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from starforge.errors import SignatureError
from starforge.registry.cache import cached_signature
from starforge.registry.directory import DirectoryRegistry
from starforge.registry.publish import publish_plugin
from starforge.registry.store import PluginStore
from starforge.signing import generate_key, trust_add


@pytest.fixture(autouse=True)
def forge_home(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))


def _publish(tmp_path: Path, reg, owner: str, key=None, version: str = "1.0.0"):
    src = tmp_path / "src" / f"{owner}-{version}"
    src.mkdir(parents=True)
    (src / "plugin.yaml").write_text(f"schema: forge/plugin/v1\nname: opsd-patch\nversion: '{version}'\nkind: algorithm\n"
                                     "entrypoint: opsd_patch:install\n")
    (src / "opsd_patch.py").write_text("def install(params):\n    return None\n")
    return publish_plugin(src, reg, owner, sign_key=key).version


def test_a_signed_version_is_judged_remembered_and_unpacked_verified(tmp_path):
    key = generate_key(tmp_path / "keys" / "alice.key")
    trust_add("alice", key.public)
    reg = DirectoryRegistry(tmp_path / "reg")
    info = _publish(tmp_path, reg, "alice", key.private)
    assert cached_signature(info.owner, info.name, info.version, info.tree_digest) is None
    fetched = PluginStore(reg).fetch_verified(info, tmp_path / "out")
    assert fetched.status == "verified" and fetched.envelope is not None
    assert cached_signature(info.owner, info.name, info.version, info.tree_digest) == fetched.envelope  # offline staging
    assert sorted(p.name for p in fetched.dest.iterdir()) == ["opsd_patch.py", "plugin.yaml"]
    assert PluginStore(reg).fetch_verified(info).dest is None  # the verdict alone, nothing unpacked


def test_a_trusted_owners_unsigned_version_is_refused_and_nothing_is_unpacked(tmp_path):
    key = generate_key(tmp_path / "keys" / "alice.key")
    trust_add("alice", key.public)
    reg = DirectoryRegistry(tmp_path / "reg")
    info = _publish(tmp_path, reg, "alice")
    with pytest.raises(SignatureError):
        PluginStore(reg).fetch_verified(info, tmp_path / "out")
    assert not (tmp_path / "out").exists()
