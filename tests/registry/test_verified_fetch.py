"""registry/verified_fetch.py: the one place a published version is fetched as verified.

Pull, show, prep, bundle verify, lock and staging all judge a version's signature and keep
a verified envelope through :func:`fetch_verified`; a source check keeps it that way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import starforge
from starforge.errors import SignatureError
from starforge.registry.cache import cached_signature
from starforge.registry.directory import DirectoryRegistry
from starforge.registry.publish import publish_plugin
from starforge.registry.verified_fetch import fetch_verified
from starforge.signing import generate_key, trust_add

ROOT = Path(starforge.__file__).parent
ONE_PLACE = ("verify_published_envelope", "remember_verified")


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
    fetched = fetch_verified(reg, info, tmp_path / "out")
    assert fetched.status == "verified" and fetched.envelope is not None
    assert cached_signature(info.owner, info.name, info.version, info.tree_digest) == fetched.envelope  # offline staging
    assert sorted(p.name for p in fetched.dest.iterdir()) == ["opsd_patch.py", "plugin.yaml"]
    assert fetch_verified(reg, info).dest is None  # the verdict alone, nothing unpacked


def test_a_trusted_owners_unsigned_version_is_refused_and_nothing_is_unpacked(tmp_path):
    key = generate_key(tmp_path / "keys" / "alice.key")
    trust_add("alice", key.public)
    reg = DirectoryRegistry(tmp_path / "reg")
    info = _publish(tmp_path, reg, "alice")
    with pytest.raises(SignatureError):
        fetch_verified(reg, info, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _calls(tree: ast.AST) -> set:
    return {n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            for n in ast.walk(tree) if isinstance(n, ast.Call)}


def test_only_the_verified_fetch_judges_and_remembers_a_published_signature():
    callers = sorted(
        str(path.relative_to(ROOT)) for path in ROOT.rglob("*.py")
        if "_vendor" not in path.parts and _calls(ast.parse(path.read_text(encoding="utf-8"))) & set(ONE_PLACE)
    )
    # signing.verify_published wraps the verdict for its own callers; nothing else fetches "as verified"
    assert callers == ["registry/verified_fetch.py", "signing.py"]
