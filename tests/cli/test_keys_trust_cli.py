"""Keys and trust as a new user meets them: the owner's key is found, keys are listed,
trust is removed, and a refused unsigned version says how to sign it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.cli import forge as run_forge



@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    e.update(FORGE_HOME=str(tmp_path / "home"), FORGE_OWNER="alice")
    return e


def forge(env, *args, ok=True):
    proc = run_forge(*args, env=env, timeout=60)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def plugin(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "plugin.yaml").write_text(
        "schema: forge/plugin/v1\nname: opsd-patch\nversion: '1.2.0'\nkind: algorithm\nentrypoint: opsd_patch:install\n"
    )
    (root / "opsd_patch.py").write_text("def install(params):\n    return None\n")
    return root


def test_publish_sign_uses_the_key_named_after_the_owner(tmp_path, env):
    made = json.loads(forge(env, "key", "generate", "--name", "alice", "--json").stdout)
    out = forge(env, "plugin", "publish", str(plugin(tmp_path / "p")), "--owner", "alice", "--sign").stdout
    assert f"signed with key {made['key_id']}" in out


def test_no_key_for_the_owner_lists_the_keys_that_exist(tmp_path, env):
    forge(env, "key", "generate", "--name", "laptop")
    proc = forge(env, "plugin", "publish", str(plugin(tmp_path / "p")), "--owner", "bob", "--sign", ok=False)
    assert proc.returncode == 2
    error, hint = proc.stderr.strip().splitlines()
    assert error.startswith("error: no signing key for owner bob") and "bob.key" in error and "default.key" in error
    assert "keys here: laptop" in hint and "forge key generate --name bob" in hint


def test_key_list_shows_names_and_ids(env):
    assert forge(env, "key", "list").stderr.startswith("no signing keys")
    a = json.loads(forge(env, "key", "generate", "--name", "alice", "--json").stdout)
    d = json.loads(forge(env, "key", "generate", "--json").stdout)
    lines = forge(env, "key", "list").stdout.splitlines()
    assert lines[0].split()[:3] == ["NAME", "KEY", "ID"]
    assert [line.split()[:2] for line in lines[1:]] == [["alice", a["key_id"]], ["default", d["key_id"]]]
    rows = json.loads(forge(env, "key", "list", "--json").stdout)
    assert [(r["name"], r["key_id"], r["encrypted"]) for r in rows] == [("alice", a["key_id"], False), ("default", d["key_id"], False)]


def test_trust_remove_by_key_id_prefix_or_every_key(env):
    one = json.loads(forge(env, "key", "generate", "--name", "one", "--json").stdout)
    two = json.loads(forge(env, "key", "generate", "--name", "two", "--json").stdout)
    added = json.loads(forge(env, "trust", "add", "alice", one["public"], "--json").stdout)
    assert added["owner"] == "alice" and added["key_id"] == one["key_id"]
    forge(env, "trust", "add", "alice", two["public"])
    removed = json.loads(forge(env, "trust", "remove", "alice", one["key_id"][:12], "--json").stdout)
    assert removed["removed"] == [one["key_id"]]
    assert json.loads(forge(env, "trust", "list", "--json").stdout) == [{"owner": "alice", "key_id": two["key_id"]}]
    missing = forge(env, "trust", "remove", "alice", "ffff", ok=False)
    assert missing.returncode == 7 and "matches no key trusted for alice" in missing.stderr and two["key_id"] in missing.stderr
    assert forge(env, "trust", "remove", "alice").stdout.startswith(f"no longer trusting key {two['key_id']} for alice")
    assert json.loads(forge(env, "trust", "list", "--json").stdout) == []
    nobody = forge(env, "trust", "remove", "alice", ok=False)
    assert nobody.returncode == 7 and "no key is trusted for owner alice" in nobody.stderr


def test_unsigned_version_of_a_trusted_owner_says_how_to_sign_it(tmp_path, env):
    src = plugin(tmp_path / "p")
    forge(env, "plugin", "publish", str(src))
    made = json.loads(forge(env, "key", "generate", "--json").stdout)
    forge(env, "trust", "add", "alice", made["public"])
    refused = forge(env, "plugin", "pull", "alice/opsd-patch", "-o", str(tmp_path / "out"), ok=False)
    assert refused.returncode == 9
    assert "'forge plugin sign alice/opsd-patch@1.2.0' adds a signature to a published version" in refused.stderr
    forge(env, "plugin", "publish", str(src), "--sign")  # the fix the hint names
    forge(env, "plugin", "pull", "alice/opsd-patch", "-o", str(tmp_path / "out"))


def test_an_unsigned_publish_for_an_owner_with_trusted_keys_warns_at_once(tmp_path, env):
    src = plugin(tmp_path / "p")
    assert "warning" not in forge(env, "plugin", "publish", str(src)).stderr  # nobody trusted for alice yet
    made = json.loads(forge(env, "key", "generate", "--json").stdout)
    forge(env, "trust", "add", "alice", made["public"])
    again = forge(env, "plugin", "publish", str(src))  # published (it was already), and said before forge lock refuses it
    assert again.stdout.startswith("already published alice/opsd-patch@1.2.0 ")
    assert again.stderr.splitlines() == [
        "warning: alice/opsd-patch@1.2.0 has no signature, but owner alice has trusted keys: "
        "forge lock, submit and pull refuse alice/opsd-patch@1.2.0 until it is signed",
        "hint: sign it with a key trusted for alice: forge plugin sign alice/opsd-patch@1.2.0",
    ]
    forge(env, "plugin", "sign", "alice/opsd-patch@1.2.0")  # the fix the hint names
    assert "warning" not in forge(env, "plugin", "publish", str(src)).stderr
    assert "warning" not in forge(env, "plugin", "publish", str(src), "--owner", "bob").stderr  # no key trusted for bob
