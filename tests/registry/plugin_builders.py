"""Builders for registry tests: an isolated FORGE_HOME and small packed plugin versions.

Imported by the registry test modules (pytest puts this directory on ``sys.path``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from starforge.package_format.archive import pack_tree
from starforge.registry.base import PublishedVersion


@pytest.fixture(autouse=True)
def forge_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("FORGE_HOME", str(home))
    for var in ("FORGE_REGISTRY", "FORGE_OWNER", "FORGE_KEY_PASSPHRASE"):
        monkeypatch.delenv(var, raising=False)
    return home


def write_plugin(root: Path, name: str = "opsd-patch", version: str = "1.2.0", extra: str = "") -> Path:
    """A minimal valid plugin tree: plugin.yaml and one module named after the plugin."""
    module = name.replace("-", "_")
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugin.yaml").write_text(
        f"schema: forge/plugin/v1\nname: {name}\nversion: '{version}'\nkind: algorithm\nentrypoint: {module}:install\n"
    )
    (root / f"{module}.py").write_text(f"def install(params):\n    return None\n{extra}")
    return root


def packed(tmp: Path, owner: str = "alice", name: str = "opsd-patch", version: str = "1.2.0", extra: str = ""):
    """(archive path, PublishedVersion) for a fresh plugin tree, packed without the registry."""
    import hashlib

    tag = f"{owner}-{name}-{version}-{hashlib.sha256(extra.encode()).hexdigest()[:12]}"
    module = name.replace("-", "_")
    tree = write_plugin(tmp / "src" / tag, name, version, extra)
    archive = tmp / "archives" / f"{tag}.tar.gz"
    archive.parent.mkdir(parents=True, exist_ok=True)
    p = pack_tree(tree, ["plugin.yaml", f"{module}.py"], archive)
    info = PublishedVersion(
        owner=owner,
        name=name,
        version=version,
        tree_digest=p.tree_digest,
        artifact_digest=p.artifact_digest,
        manifest={"schema": "forge/plugin/v1", "name": name, "version": version, "kind": "algorithm",
                  "entrypoint": f"{module}:install", "load": "eager"},
        files=p.files,
        top_level=(module,),
        size=archive.stat().st_size,
    )
    return archive, info


@pytest.fixture
def make_version(tmp_path):
    """``make_version(owner=, name=, version=, extra=)`` -> (archive, PublishedVersion)."""

    def make(owner="alice", name="opsd-patch", version="1.2.0", extra=""):
        return packed(tmp_path, owner, name, version, extra)

    return make
