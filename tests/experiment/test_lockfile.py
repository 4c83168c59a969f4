"""plugins.lock.json as a file: stable bytes, no needless rewrite, staleness, refusals."""

import json
import os

import pytest

from starforge.cluster.jobspec import PluginEntry
from starforge.errors import LockError
from starforge.experiment.config import parse_request
from starforge.experiment.lockfile import (
    LoadedPlugin,
    LockEntry,
    LockFile,
    check_conflicts,
    read_lock,
    stale_reasons,
    write_lock,
)

D1 = "sf1:" + "1" * 64
D2 = "sf1:" + "2" * 64


def entry(name="opsd-patch", owner="alice", version="1.2.0", request=None, digest=D1, **kw):
    plugin = PluginEntry(
        name=name,
        version=version,
        tree_digest=digest,
        kind=kw.pop("kind", "algorithm"),
        load=kw.pop("load", "eager"),
        entrypoint=kw.pop("entrypoint", "opsd_patch:install"),
        owner=owner,
        top_level=kw.pop("top_level", ("opsd_patch",)),
        params={"opsd.scale": {"type": "float", "default": 1.0}},
        files={"plugin.yaml": "b" * 64},
    )
    return LockEntry(plugin=plugin, request=request or f"{owner}/{name}@~=1.2", artifact_digest="sha256:" + "a" * 64, **kw)


def test_serialization_is_sorted_indented_and_round_trips(tmp_path):
    lock = LockFile(plugins=(entry(),), registry="oci://127.0.0.1:5000/forge")
    text = lock.to_json()
    assert text.endswith("}\n") and text.startswith('{\n  "plugins": [\n    {\n      "artifact_digest"')
    data = json.loads(text)
    assert list(data) == ["plugins", "registry", "schema"]
    assert list(data["plugins"][0]) == sorted(data["plugins"][0])
    path = tmp_path / "plugins.lock.json"
    assert write_lock(lock, path) is True
    assert path.read_text() == text
    assert read_lock(path) == lock


def test_unchanged_lock_is_not_rewritten_and_a_mirror_does_not_count_as_a_change(tmp_path):
    path = tmp_path / "plugins.lock.json"
    write_lock(LockFile(plugins=(entry(),), registry="/srv/registry"), path)
    before = os.stat(path)
    assert write_lock(LockFile(plugins=(entry(),), registry="oci://mirror.example/forge"), path) is False
    after = os.stat(path)
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert read_lock(path).registry == "/srv/registry"
    assert write_lock(LockFile(plugins=(entry(digest=D2),)), path) is True
    assert read_lock(path).plugins[0].tree_digest == D2
    assert [p.name for p in tmp_path.iterdir()] == ["plugins.lock.json"]  # no temp file left


def test_malformed_lock_is_a_lock_error(tmp_path):
    path = tmp_path / "plugins.lock.json"
    path.write_text("{not json")
    with pytest.raises(LockError, match="not valid JSON"):
        read_lock(path)
    path.write_text(json.dumps({"schema": "forge/lock/v1", "plugins": [{"name": "x"}]}))
    with pytest.raises(LockError, match=r"plugins\[0\].owner"):
        read_lock(path)
    assert read_lock(tmp_path / "absent.json") is None


def reqs(*texts):
    return [parse_request(t) for t in texts]


def test_stale_reasons():
    lock = LockFile(plugins=(entry(), entry("gspo", request="alice/gspo", version="1.0.0", top_level=("gspo",))))
    assert stale_reasons(reqs("alice/opsd-patch@~=1.2", "alice/gspo"), lock) == []
    assert stale_reasons(reqs("alice/opsd-patch@~=1.3", "alice/gspo"), lock) == [
        "opsd-patch: forge.yaml requests alice/opsd-patch@~=1.3, the lock was made for alice/opsd-patch@~=1.2"
    ]
    assert stale_reasons(reqs("alice/opsd-patch@~=1.2"), lock) == ["alice/gspo is locked but no longer requested in forge.yaml"]
    assert stale_reasons(reqs("alice/opsd-patch@~=1.2", "alice/gspo", "bob/dr-grpo"), lock) == [
        "bob/dr-grpo is requested in forge.yaml but not locked"
    ]
    assert stale_reasons(reqs("alice/gspo", "alice/opsd-patch@~=1.2"), lock) == [
        "the lock lists opsd-patch, gspo but forge.yaml's load order is gspo, opsd-patch"
    ]
    hand_edited = LockFile(plugins=(entry(version="2.0.0"),))
    assert stale_reasons(reqs("alice/opsd-patch@~=1.2"), hand_edited) == [
        "opsd-patch: locked version 2.0.0 does not satisfy alice/opsd-patch@~=1.2"
    ]


def pkg(name, top, kind="algorithm", label=None):
    return LoadedPlugin(label=label or f"alice/{name}@1.0.0", name=name, kind=kind, top_level=tuple(top))


def builtin(name, top, kind="algorithm"):
    return LoadedPlugin(label=f"built-in {name}", name=name, kind=kind, top_level=tuple(top), builtin=True)


def test_conflicts_refused():
    with pytest.raises(LockError, match="alice/a@1.0.0 and alice/b@1.0.0 both provide the top-level module 'common'"):
        check_conflicts([pkg("a", ["a", "common"]), pkg("b", ["common"])])
    with pytest.raises(LockError, match="alice/a@1.0.0 and built-in clip both provide the top-level module 'a'"):
        check_conflicts([pkg("a", ["a"])], [builtin("clip", ["a"])])
    with pytest.raises(LockError, match="have the same manifest name 'x'"):
        check_conflicts([pkg("x", ["x1"], label="alice/x@1.0.0"), pkg("x", ["x2"], label="bob/x@1.0.0")])
    with pytest.raises(LockError, match="alice/prep@1.0.0 is a data-prep plugin"):
        check_conflicts([pkg("prep", ["prep"], kind="data-prep")])


def test_a_shadowed_builtin_is_not_loaded_so_its_modules_do_not_clash():
    shadowed = check_conflicts([pkg("reward-clip", ["reward_clip"])], [builtin("reward-clip", ["reward_clip"]), builtin("other", ["other"])])
    assert shadowed == ["reward-clip"]


def test_environment_entries_carry_a_note():
    from starforge.experiment.lockfile import ENVIRONMENT_NOTE

    e = entry(kind="environment", note=ENVIRONMENT_NOTE)
    assert e.to_dict()["note"].startswith("environment plugin")
    assert "note" not in entry().to_dict()


def test_the_registry_hint_is_written_without_credentials(tmp_path):
    path = tmp_path / "plugins.lock.json"
    write_lock(LockFile(plugins=(entry(),), registry="oci://ci:S3cr3t@registry.example/forge"), path)
    assert "S3cr3t" not in path.read_text()
    assert read_lock(path).registry == "oci://registry.example/forge"
