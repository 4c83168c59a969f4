"""The registry commands as a user runs them: publish, list, show, pull, key, trust."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from support.cli import forge as run_forge


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    e.update(FORGE_HOME=str(tmp_path / "home"), FORGE_OWNER="alice")
    return e


def forge(env, *args, cwd=None, ok=True):
    proc = run_forge(*args, env=env, cwd=cwd, timeout=60)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def plugin(root: Path, version="1.2.0", body="") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugin.yaml").write_text(
        f"schema: forge/plugin/v1\nname: opsd-patch\nversion: '{version}'\nkind: algorithm\nentrypoint: opsd_patch:install\n"
        "params:\n  opsd.scale: {type: float, default: 1.0, description: advantage multiplier}\n"
    )
    (root / "opsd_patch.py").write_text(f"def install(params):\n    return None\n{body}")
    return root


def digest_of(env, path) -> str:
    """The tree digest of a plugin directory holding only what `plugin` writes."""
    from starforge.cluster.digest import tree_digest

    assert sorted(p.name for p in Path(path).iterdir()) == ["opsd_patch.py", "plugin.yaml"]
    return tree_digest(path)


def test_publish_list_show_pull_round_trip(tmp_path, env):
    src = plugin(tmp_path / "src" / "opsd-patch")
    digest = digest_of(env, src)
    out = forge(env, "plugin", "publish", str(src)).stdout
    assert out == f"published alice/opsd-patch@1.2.0 {digest}\n"
    again = forge(env, "plugin", "publish", str(src)).stdout
    assert again == f"already published alice/opsd-patch@1.2.0 {digest} (same content)\n"
    plugin(tmp_path / "v13", version="1.3.0rc1", body="X = 1\n")
    forge(env, "plugin", "publish", str(tmp_path / "v13"))

    rows = json.loads(forge(env, "plugin", "list", "--json").stdout)
    assert rows == [{"ref": "alice/opsd-patch", "owner": "alice", "name": "opsd-patch", "latest": "1.2.0",
                     "versions": ["1.2.0", "1.3.0rc1"], "yanked": {}}]
    listed = forge(env, "plugin", "list", "alice").stdout.splitlines()
    assert listed[0].split() == ["PLUGIN", "LATEST", "VERSIONS"]
    assert listed[1].split() == ["alice/opsd-patch", "1.2.0", "1.2.0,", "1.3.0rc1"]

    shown = json.loads(forge(env, "plugin", "show", "alice/opsd-patch@~=1.2", "--json").stdout)
    assert (shown["ref"], shown["tree_digest"], shown["signature"]["status"]) == ("alice/opsd-patch@1.2.0", digest, "unsigned")
    text = forge(env, "plugin", "show", "alice/opsd-patch").stdout
    assert text.startswith("alice/opsd-patch@1.2.0\n") and f"tree digest:     {digest}" in text
    assert "opsd.scale (float, default 1.0): advantage multiplier" in text

    work = tmp_path / "work"
    work.mkdir()
    proc = forge(env, "plugin", "pull", "alice/opsd-patch", cwd=work)
    assert proc.stdout == f"pulled alice/opsd-patch@1.2.0 {digest} into opsd-patch (signature: unsigned)\n"
    assert proc.stderr == ""  # no progress bar off a terminal
    assert digest_of(env, work / "opsd-patch") == digest
    proc = forge(env, "plugin", "pull", "alice/opsd-patch", cwd=work, ok=False)
    assert proc.returncode == 2 and "opsd-patch already exists" in proc.stderr
    pulled = json.loads(forge(env, "plugin", "pull", "alice/opsd-patch@~=1.2", "-o", "again", "--json", cwd=work).stdout)
    artifact = json.loads(forge(env, "plugin", "show", "alice/opsd-patch@1.2.0", "--json").stdout)["artifact_digest"]
    assert pulled == {
        "ref": "alice/opsd-patch@1.2.0", "owner": "alice", "name": "opsd-patch", "version": "1.2.0",
        "request": "alice/opsd-patch@~=1.2", "tree_digest": digest, "artifact_digest": artifact,
        "directory": str((work / "again").resolve()), "registry": str(Path(env["FORGE_HOME"]) / "registry"),
        "signature": {"status": "unsigned"},
    }
    assert digest_of(env, work / "again") == digest
    forge(env, "plugin", "pull", "alice/opsd-patch@1.3.0rc1", "-o", str(tmp_path / "rc"))
    assert (tmp_path / "rc" / "opsd_patch.py").read_text().endswith("X = 1\n")


def test_changed_content_under_a_published_version_is_refused_with_both_digests(tmp_path, env):
    src = plugin(tmp_path / "p")
    old = digest_of(env, src)
    forge(env, "plugin", "publish", str(src))
    (src / "opsd_patch.py").write_text("def install(params):\n    return 2\n")
    new = digest_of(env, src)
    proc = forge(env, "plugin", "publish", str(src), ok=False)
    assert proc.returncode == 8
    assert proc.stderr.splitlines() == [
        f"error: alice/opsd-patch@1.2.0 is already published with {old}; refusing other content {new}",
        "hint: published versions are immutable: bump 'version' in plugin.yaml and publish again",
    ]


def test_missing_plugin_version_and_registry_are_one_line_errors(tmp_path, env):
    forge(env, "plugin", "publish", str(plugin(tmp_path / "p")))
    cases = [
        (("plugin", "show", "alice/nothing"), 7, "error: no plugin alice/nothing in registry"),
        (("plugin", "pull", "alice/opsd-patch@2.0"), 7, "error: no version of alice/opsd-patch matches '==2.0'"),
        (("plugin", "list", "--registry", str(tmp_path / "nowhere")), 7, f"error: no registry at {tmp_path / 'nowhere'}"),
        (("plugin", "show", "alice/"), 2, "error: 'alice/': '' is not a valid name"),
    ]
    for args, code, first in cases:
        proc = forge(env, *args, ok=False, cwd=tmp_path)
        assert proc.returncode == code, (args, proc.stderr)
        assert proc.stderr.startswith(first), proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 2  # error + hint


def test_signed_publish_verified_through_trust_and_stripped_signature_refused(tmp_path, env):
    out = forge(env, "key", "generate").stdout
    home = Path(env["FORGE_HOME"])
    private, public = home / "keys" / "default.key", home / "keys" / "default.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    key_id = next(line.split()[-1] for line in out.splitlines() if line.startswith("key id:"))
    assert forge(env, "trust", "add", "alice", str(public)).stdout.startswith(f"trusted key {key_id} for alice")
    assert json.loads(forge(env, "trust", "list", "--json").stdout) == [{"owner": "alice", "key_id": key_id}]

    published = forge(env, "plugin", "publish", str(plugin(tmp_path / "p")), "--sign").stdout.splitlines()
    assert published[1] == f"signed with key {key_id}"
    shown = json.loads(forge(env, "plugin", "show", "alice/opsd-patch", "--json").stdout)
    assert shown["signature"] == {"status": "verified", "error": None}

    (home / "registry" / "plugins" / "alice" / "opsd-patch" / "1.2.0.dsse.json").unlink()
    proc = forge(env, "plugin", "pull", "alice/opsd-patch", "-o", str(tmp_path / "out"), ok=False)
    assert proc.returncode == 9
    assert proc.stderr.startswith("error: alice/opsd-patch@1.2.0 has no signature, but owner alice has trusted keys")
    assert not (tmp_path / "out").exists()


def test_publish_sign_again_attaches_another_keys_signature_and_keeps_ones_own(tmp_path, env):
    def kid(out):
        return next(line.split()[-1] for line in out.splitlines() if line.startswith("key id:"))

    mine = kid(forge(env, "key", "generate").stdout)
    other = kid(forge(env, "key", "generate", "--name", "other").stdout)
    other_key = str(Path(env["FORGE_HOME"]) / "keys" / "other.key")
    src = plugin(tmp_path / "p")
    digest = digest_of(env, src)
    forge(env, "plugin", "publish", str(src))  # unsigned first
    attached = forge(env, "plugin", "publish", str(src), "--sign").stdout.splitlines()
    assert attached == [
        f"already published alice/opsd-patch@1.2.0 {digest} (same content)",
        f"signed with key {mine}",
    ]
    again = forge(env, "plugin", "publish", str(src), "--sign").stdout.splitlines()
    assert again[1] == f"already signed with your key {mine}; nothing attached"
    by_other = forge(env, "plugin", "publish", str(src), "--sign", "--key", other_key).stdout.splitlines()
    assert by_other[1] == f"signed with key {other}"  # beside the first signature, not instead of it
    as_json = json.loads(forge(env, "plugin", "publish", str(src), "--sign", "--key", other_key, "--json").stdout)
    assert (as_json["created"], as_json["signed"], as_json["signature_attached"], as_json["signature_kept"]) == (
        False, True, False, True)
    from starforge.registry.directory import DirectoryRegistry
    from starforge.registry.store import PluginStore

    reg = DirectoryRegistry(Path(env["FORGE_HOME"]) / "registry")
    signers = [json.loads(e)["signatures"][0]["keyid"] for e in PluginStore(reg).envelopes(reg.get("alice", "opsd-patch", "1.2.0"))]
    assert signers == [mine, other]


def test_key_generate_with_a_passphrase_and_signing_with_it(tmp_path, env):
    secret = tmp_path / "pass.txt"
    secret.write_text("correct horse\n")
    forge(env, "key", "generate", "--name", "ci", "--passphrase-file", str(secret))
    key = Path(env["FORGE_HOME"]) / "keys" / "ci.key"
    assert b"ENCRYPTED PRIVATE KEY" in key.read_bytes()
    src = plugin(tmp_path / "p")
    proc = forge(env, "plugin", "publish", str(src), "--sign", "--key", str(key), ok=False)
    assert proc.returncode == 9 and "is encrypted" in proc.stderr
    forge({**env, "FORGE_KEY_PASSPHRASE": "correct horse"}, "plugin", "publish", str(src), "--sign", "--key", str(key))
    assert json.loads(forge(env, "plugin", "show", "alice/opsd-patch", "--json").stdout)["signed"] is True


def test_owner_flag_and_an_invalid_login_owner(tmp_path, env):
    src = plugin(tmp_path / "p")
    out = forge(env, "plugin", "publish", str(src), "--owner", "bob").stdout
    assert out.startswith("published bob/opsd-patch@1.2.0 ")
    proc = forge({**env, "FORGE_OWNER": "Bob.Smith"}, "plugin", "publish", str(src), ok=False)
    assert proc.returncode == 2 and "owner 'Bob.Smith' (from FORGE_OWNER) is not a valid owner name" in proc.stderr


def test_every_registry_command_has_help_with_an_example(env):
    for cmd in (("plugin", "publish"), ("plugin", "list"), ("plugin", "show"), ("plugin", "pull"),
                ("key", "generate"), ("trust", "add"), ("trust", "list")):
        out = forge(env, *cmd, "--help").stdout
        assert "Example:" in out and f"forge {' '.join(cmd)}" in out, cmd


@pytest.mark.parametrize("url", ["oci://ciuser:S3cr3tPass@127.0.0.1:5999/forge", "http://ciuser:S3cr3tPass@127.0.0.1:5999/forge"])
def test_credentials_in_a_registry_url_are_masked_in_every_message(env, url):
    for args in (("plugin", "list", "--registry", url), ("plugin", "pull", "alice/x@1.0.0", "--registry", url)):
        proc = forge(env, *args, ok=False)
        assert proc.returncode == 2, proc.stderr
        assert "S3cr3tPass" not in proc.stderr + proc.stdout and "ciuser" not in proc.stderr
        assert "***@127.0.0.1:5999/forge" in proc.stderr
    env = dict(env, FORGE_REGISTRY=url)
    proc = forge(env, "plugin", "list", ok=False)
    assert "S3cr3tPass" not in proc.stderr and "***@" in proc.stderr


def test_show_lists_a_params_choices(tmp_path, env):
    root = tmp_path / "mode-pick"
    root.mkdir()
    (root / "plugin.yaml").write_text(
        "schema: forge/plugin/v1\nname: mode-pick\nversion: 1.0.0\nkind: algorithm\nentrypoint: mode_pick:install\n"
        "params:\n  pick.mode: {type: str, default: fast, choices: [fast, exact], description: how}\n"
    )
    (root / "mode_pick.py").write_text("def install(params):\n    return None\n")
    forge(env, "plugin", "publish", str(root))
    text = forge(env, "plugin", "show", "alice/mode-pick").stdout
    assert 'pick.mode (str, default "fast", one of "fast", "exact"): how' in text
    shown = json.loads(forge(env, "plugin", "show", "alice/mode-pick", "--json").stdout)
    assert shown["manifest"]["params"]["pick.mode"]["choices"] == ["fast", "exact"]
