"""The signature facts a lock records are enforced (SPEC §7), on a directory and a real OCI registry.

An entry locked as signed by key K needs a valid envelope by K over the locked statement:
at ``submit`` and ``bundle create`` (cache first, so staging works offline, else the
registry) and at ``lock --check`` (the registry). Deleting the envelope, or replacing it by
one of another key, is caught and named; a re-sign with a second key beside it breaks
nothing; ``forge lock --accept-signature NAME`` records the change, version unchanged.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
from pathlib import Path

from support.registry_world import OWNER, User, write_experiment, write_plugin

NAME, VERSION = "opsd-patch", "1.0.0"


def key_id(user: User, name: str) -> str:
    keys = user.forge("key", "list", "--json").stdout
    return next(k["key_id"] for k in json.loads(keys) if k["name"] == name)


def signed_and_locked(user: User, registry: str, tmp_path: Path, *, trusted: bool) -> Path:
    user.forge("key", "generate")
    user.forge("key", "generate", "--name", "second")
    if trusted:
        user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry, "--sign")
    exp = write_experiment(tmp_path / "exp", registry)
    user.forge("lock", exp)
    assert json.loads((exp / "plugins.lock.json").read_text())["plugins"][0]["signature"]["key_id"] == key_id(user, "default")
    return exp


def envelope_by(user: User, registry: str, key: str) -> bytes:
    """A valid envelope over the version's publish statement, signed by *key* (a key name)."""
    from starforge.registry.factory import open_registry
    from starforge.signatures.signing import sign_statement

    info = open_registry(registry).get(OWNER, NAME, VERSION)
    return sign_statement(user.home / "keys" / f"{key}.key", owner=OWNER, name=NAME, version=VERSION,
                          tree_digest=info.tree_digest, artifact_digest=info.artifact_digest)


def both_keys(first: bytes, second: bytes) -> bytes:
    """One envelope carrying both signatures over the same payload."""
    a, b = json.loads(first), json.loads(second)
    assert a["payload"] == b["payload"]
    a["signatures"] = a["signatures"] + b["signatures"]
    return (json.dumps(a, indent=2, sort_keys=True) + "\n").encode()


def set_envelopes(registry: str, envelopes: list, *, keep: bool = False) -> None:
    """Make the registry serve exactly *envelopes* for the version (with *keep*: beside the old
    ones), each with its Sigstore bundle, as someone who can write the registry would."""
    if not registry.startswith("oci://"):
        from starforge.registry.directory import DirectoryRegistry

        plugin_dir = Path(registry) / "plugins" / OWNER / NAME
        if not keep:
            (plugin_dir / f"{VERSION}.dsse.json").unlink(missing_ok=True)
            shutil.rmtree(plugin_dir / f"{VERSION}.signatures", ignore_errors=True)
        reg = DirectoryRegistry(registry)
        for envelope in envelopes:
            assert reg.attach_signature(reg.get(OWNER, NAME, VERSION), envelope)
        return
    from starforge.registry.oci import OciRegistry

    with OciRegistry(registry) as reg:
        repo = reg.repository(OWNER, NAME)
        got = reg.client.get_manifest(repo, VERSION)
        if not keep:
            from starforge.registry.artifact import BUNDLE_TYPE, SIGNATURE_TYPE, canonical_json, referrers_tag
            from starforge.registry.oci_client import OCI_INDEX

            for kind in (SIGNATURE_TYPE, BUNDLE_TYPE):
                for desc in reg._signatures(repo, got.digest, kind):
                    reg.client.delete_manifest(repo, desc["digest"])
            index = reg.client.get_manifest(repo, referrers_tag(got.digest), accept=(OCI_INDEX,))
            if index is not None:  # a registry without the referrers API: empty the referrers tag too
                emptied = {**index.json(), "manifests": []}
                reg.client.put_manifest(repo, referrers_tag(got.digest), canonical_json(emptied), OCI_INDEX)
        subject = {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": got.digest, "size": len(got.body)}
        for envelope in envelopes:
            reg._attach_signature(repo, subject, envelope, f"{OWNER}/{NAME}@{VERSION}")


def forget_cache(user: User) -> None:
    shutil.rmtree(user.home / "cache", ignore_errors=True)


def _refused(proc, user: User, now: str) -> None:
    assert proc.returncode == 9, proc.stdout + proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"error: alice/opsd-patch@1.0.0 is locked as signed by key {key_id(user, 'default')} (sha256:")
    assert first.endswith(now), first
    assert "forge lock --accept-signature opsd-patch" in proc.stderr


def test_a_deleted_envelope_fails_check_submit_and_bundle_and_is_accepted_only_on_request(user, registry, tmp_path):
    exp = signed_and_locked(user, registry, tmp_path, trusted=False)
    before = (exp / "plugins.lock.json").read_text()
    set_envelopes(registry, [])
    _refused(user.forge("lock", "--check", exp, ok=False), user, "it serves no signature")
    _refused(user.forge("lock", exp, ok=False), user, "it serves no signature")
    assert (exp / "plugins.lock.json").read_text() == before
    forget_cache(user)  # another machine: nothing cached, so the registry is asked
    _refused(user.forge("submit", exp, ok=False), user, "it serves no signature")
    _refused(user.forge("bundle", "create", exp, "-o", tmp_path / "b.tar", ok=False), user, "it serves no signature")
    assert not (tmp_path / "b.tar").exists()

    accepted = user.forge("lock", exp, "--accept-signature", NAME)
    assert f"alice/opsd-patch@1.0.0: signature changed: key {key_id(user, 'default')[:4]}… -> none" in accepted.stdout
    entry = json.loads((exp / "plugins.lock.json").read_text())["plugins"][0]
    assert entry["signature"] is None and entry["version"] == VERSION
    user.forge("lock", "--check", exp)


def test_an_envelope_replaced_by_another_keys_is_refused_then_accepted(user, registry, tmp_path):
    exp = signed_and_locked(user, registry, tmp_path, trusted=False)
    set_envelopes(registry, [envelope_by(user, registry, "second")])
    second = key_id(user, "second")
    _refused(user.forge("lock", "--check", exp, ok=False), user, f"it serves signatures by key {second} only")
    forget_cache(user)
    _refused(user.forge("submit", exp, ok=False), user, f"it serves signatures by key {second} only")

    assert user.forge("lock", "--check", exp, "--accept-signature", NAME, ok=False).returncode == 2
    assert user.forge("lock", exp, "--accept-signature", "nope", ok=False).returncode == 2
    accepted = user.forge("lock", exp, "--accept-signature", NAME)
    assert f"signature changed: key {key_id(user, 'default')[:4]}… -> {second[:4]}…" in accepted.stdout
    entry = json.loads((exp / "plugins.lock.json").read_text())["plugins"][0]
    assert entry["signature"]["key_id"] == second and entry["version"] == VERSION
    user.forge("lock", "--check", exp)
    assert "trainer sees opsd.scale=1.0" in user.forge("submit", exp).stdout


def test_a_re_sign_with_a_second_key_beside_the_locked_one_breaks_nothing(user, registry, tmp_path):
    exp = signed_and_locked(user, registry, tmp_path, trusted=True)
    before = (exp / "plugins.lock.json").read_bytes()
    first, second = envelope_by(user, registry, "default"), envelope_by(user, registry, "second")
    if registry.startswith("oci://"):
        set_envelopes(registry, [second], keep=True)  # a second referrer, the newest
    else:
        set_envelopes(registry, [both_keys(first, second)])  # one envelope, both signatures
    user.forge("lock", "--check", exp)
    out = user.forge("lock", exp)
    assert "unchanged" in out.stdout and "signature verified" in out.stdout
    assert (exp / "plugins.lock.json").read_bytes() == before
    forget_cache(user)
    assert "trainer sees opsd.scale=1.0" in user.forge("submit", exp).stdout
    user.forge("bundle", "create", exp, "-o", tmp_path / "b.tar")
    user.forge("bundle", "verify", tmp_path / "b.tar")


def test_a_locked_signed_experiment_stages_offline_from_the_cache(user, registry, tmp_path):
    exp = signed_and_locked(user, registry, tmp_path, trusted=True)
    if registry.startswith("oci://"):
        with socket.socket() as unused:  # a loopback port nothing listens on
            unused.bind(("127.0.0.1", 0))
            gone = f"oci://127.0.0.1:{unused.getsockname()[1]}/nothing-here"
    else:
        gone = str(tmp_path / "moved-away")
        shutil.move(registry, gone + ".bak")
    run = user.forge("submit", exp, "--registry", gone)
    assert "trainer sees opsd.scale=1.0" in run.stdout
    spec = json.loads(next((exp / ".forge" / "jobs").glob("*/jobspec.json")).read_text())
    carried = json.loads(spec["plugins"][0]["signature"])
    assert base64.b64decode(carried["payload"])  # the locked envelope travels with the job
    assert carried["signatures"][0]["keyid"] == key_id(user, "default")
