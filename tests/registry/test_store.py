"""registry/store.py: the one place a published version is fetched as verified.

Pull, show, prep, bundle verify, lock and staging all judge a version's signature and keep
a verified envelope through ``PluginStore.fetch_verified``; ``tests/test_plugin_store_owns.py``
keeps every other module from doing it.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

import pytest

import starforge
from starforge.cluster.digest import tree_digest
from starforge.errors import LockError, RegistryError, SignatureError
from starforge.registry.cache import cached_signature
from starforge.registry.directory import DirectoryRegistry
from starforge.registry.publish import publish_plugin
from starforge.registry.store import Pin, PluginStore
from starforge.signatures.signing import generate_key, trust_add

ROOT = Path(starforge.__file__).parent
ONE_PLACE = ("remember_signature", "remember_envelope")  # an envelope kept for offline staging


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


def test_a_pinned_version_unpacks_from_the_cache_with_no_registry_at_all(tmp_path):
    reg = DirectoryRegistry(tmp_path / "reg")
    info = _publish(tmp_path, reg, "alice")
    PluginStore(reg).unpack(info, tmp_path / "first")  # pulled once: the cache holds its files
    pin = Pin(owner="alice", name="opsd-patch", version="1.0.0", tree_digest=info.tree_digest)
    again = PluginStore(None).unpack_pin(pin, tmp_path / "again")
    assert tree_digest(again) == info.tree_digest
    with pytest.raises(RegistryError, match="no registry was given"):
        PluginStore(None).unpack_pin(replace(pin, tree_digest="sf1:" + "1" * 64), tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_a_pin_the_registry_serves_other_files_for_is_a_moved_tag_naming_both(tmp_path):
    reg = DirectoryRegistry(tmp_path / "reg")
    info = _publish(tmp_path, reg, "alice")
    pin = Pin(owner="alice", name="opsd-patch", version="1.0.0", tree_digest="sf1:" + "1" * 64)
    with pytest.raises(LockError, match="moved tag") as raised:
        PluginStore(reg, locked_from="oci://elsewhere/forge").unpack_pin(pin, tmp_path / "out")
    assert info.tree_digest in raised.value.message and pin.tree_digest in raised.value.message
    assert "oci://elsewhere/forge" in raised.value.hint
    assert not (tmp_path / "out").exists()


def _calls(tree: ast.AST) -> set:
    return {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            for n in ast.walk(tree) if isinstance(n, ast.Call)}


def test_only_the_store_judges_and_remembers_a_published_signature():
    callers = sorted(
        str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
        if "_vendor" not in path.parts and _calls(ast.parse(path.read_text(encoding="utf-8"))) & set(ONE_PLACE)
    )
    # the cache keeps what the store hands it; nothing else fetches "as verified"
    assert callers == ["registry/store.py"]
