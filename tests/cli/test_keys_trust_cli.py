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
    assert ("'forge plugin sign alice/opsd-patch@1.2.0 --from DIR' (DIR: the publisher's copy of its files; "
            "or --lock FILE, a lock that pinned them) adds a signature to a published version") in refused.stderr
    forge(env, "plugin", "publish", str(src), "--sign")  # the fix the hint names
    forge(env, "plugin", "pull", "alice/opsd-patch", "-o", str(tmp_path / "out"))


def test_key_takes_a_key_name_or_a_path_and_refuses_a_bare_value_that_is_both(tmp_path, env):
    import shutil

    keys = Path(env["FORGE_HOME"]) / "keys"
    release = json.loads(forge(env, "key", "generate", "--name", "release", "--json").stdout)["key_id"]
    other = json.loads(forge(env, "key", "generate", "--name", "other", "--json").stdout)["key_id"]
    src = plugin(tmp_path / "p")
    work = tmp_path / "work"
    work.mkdir()
    # a name, as key generate --name and key export NAME take it (it used to be "no signing key at release")
    out = run_forge("plugin", "publish", str(src), "--sign", "--key", "release", env=env, cwd=work, timeout=60)
    assert out.returncode == 0 and f"signed with key {release}" in out.stdout, out.stderr
    # a value with a '/' is a path
    shutil.copy(keys / "other.key", work / "ci.key")
    signed = run_forge("plugin", "sign", "alice/opsd-patch@1.2.0", "--from", str(src), "--key", "./ci.key", env=env, cwd=work, timeout=60)
    assert signed.returncode == 0 and f"signed with key {other}" in signed.stdout, signed.stderr
    # a bare value that is a file here and a key name: refused, naming both
    shutil.copy(keys / "other.key", work / "release")
    both = run_forge("plugin", "sign", "alice/opsd-patch@1.2.0", "--from", str(src), "--key", "release", env=env, cwd=work, timeout=60)
    assert both.returncode == 2 and both.stderr.splitlines() == [
        f"error: --key release is ambiguous: both the file ./release and your key 'release' ({keys / 'release.key'})",
        f"hint: for the file write --key ./release; for the key, --key {keys / 'release.key'}",
    ]
    # a bare value that is only a file here is not taken for a key name: the hint gives the path spelling
    only_file = run_forge("plugin", "sign", "alice/opsd-patch@1.2.0", "--from", str(src), "--key", "ci.key", env=env, cwd=work, timeout=60)
    assert only_file.returncode == 2
    assert only_file.stderr.splitlines()[1] == "hint: a value without '/' names a key; for the file ci.key here, write --key ./ci.key"
    # a misspelt name gets the closest key and the keys that exist
    typo = run_forge("plugin", "publish", str(src), "--sign", "--key", "relase", env=env, cwd=work, timeout=60)
    assert typo.returncode == 2 and "Traceback" not in typo.stderr
    assert typo.stderr.splitlines() == [
        f"error: --key relase: no key named 'relase' in {keys} (did you mean 'release'?)",
        "hint: keys here: other, release; a path to a key file holds a '/' (--key ./FILE)",
    ]
    missing = run_forge("plugin", "publish", str(src), "--sign", "--key", "./nope.key", env=env, cwd=work, timeout=60)
    assert missing.returncode == 2 and missing.stderr.startswith("error: no signing key at ./nope.key\n")


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
        f"hint: sign it with a key trusted for alice: forge plugin sign alice/opsd-patch@1.2.0 --from {src}",
    ]
    forge(env, "plugin", "sign", "alice/opsd-patch@1.2.0", "--from", str(src))  # the fix the hint names
    assert "warning" not in forge(env, "plugin", "publish", str(src)).stderr
    assert "warning" not in forge(env, "plugin", "publish", str(src), "--owner", "bob").stderr  # no key trusted for bob
