"""``forge plugin sign``: a signature binds to files the signer holds, never to what the registry serves.

The registry is untrusted (docs/security.md): whoever can write it may remove a version's
record and publish other files under the same name and version. Signing "whatever it serves
now" would turn that into "signature verified" for everyone who trusts the owner. So the
signer names the files (``--from DIR``, or ``--lock FILE`` made before), the registry must
serve exactly them, in an archive that holds them, and ``publish --sign`` of a version
already published follows the same rule.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.registry_world import OWNER, User, write_experiment, write_plugin

NAME, VERSION = "opsd-patch", "1.0.0"
REF = f"{OWNER}/{NAME}@{VERSION}"


def _oci(request, tmp_path: Path) -> str:
    server = request.getfixturevalue("oci_registry")
    return f"oci://127.0.0.1:{server.port}/ps-{tmp_path.name.replace('_', '-').lower()[-40:]}"


def _registry(kind: str, request, tmp_path: Path) -> str:
    return _oci(request, tmp_path) if kind == "oci" else str(tmp_path / "registry")


def _remove_version(registry: str) -> None:
    """What a registry writer does first: the version's record goes (the tag, in OCI)."""
    from starforge.registry.factory import open_registry

    if registry.startswith("oci://"):
        reg = open_registry(registry)
        repo = reg.repository(OWNER, NAME)
        assert reg.client.delete_manifest(repo, reg.client.manifest_digest(repo, VERSION))
    else:
        (Path(registry) / "plugins" / OWNER / NAME / f"{VERSION}.json").unlink()


def _signers(registry: str) -> list:
    from starforge.registry.factory import open_registry
    from starforge.registry.store import PluginStore

    reg = open_registry(registry)
    return [json.loads(e)["signatures"][0]["keyid"] for e in PluginStore(reg).envelopes(reg.get(OWNER, NAME, VERSION))]


def _key_id(user: User) -> str:
    return json.loads(user.forge("key", "list", "--json").stdout)[0]["key_id"]


@pytest.mark.parametrize("kind", ["directory", pytest.param("oci", marks=pytest.mark.oci)])
def test_a_version_another_writer_replaced_is_not_signed_and_a_lock_or_the_files_sign_the_real_one(
        kind, request, tmp_path):
    registry = _registry(kind, request, tmp_path)
    alice, writer = User(tmp_path / "alice"), User(tmp_path / "writer")
    src = write_plugin(tmp_path / "src")
    alice.forge("plugin", "publish", src, "--registry", registry)
    exp = write_experiment(tmp_path / "exp", registry)
    alice.forge("lock", exp)
    lock = exp / "plugins.lock.json"
    mine = alice.forge("plugin", "digest", src).stdout.strip()
    assert json.loads(lock.read_text())["plugins"][0]["digest"] == mine

    # someone with write access replaces the version: a consistent record and archive of their own files
    _remove_version(registry)
    theirs_src = write_plugin(tmp_path / "theirs")
    (theirs_src / "opsd_patch.py").write_text("def install(params):\n    print('not alice', flush=True)\n")
    writer.forge("plugin", "publish", theirs_src, "--owner", OWNER, "--registry", registry)
    theirs = alice.forge("plugin", "digest", theirs_src).stdout.strip()
    assert theirs != mine

    alice.forge("key", "generate")
    alice.forge("trust", "add", OWNER, alice.home / "keys" / "default.pub")

    # the fix the docs named before: sign REF alone. Now it names what to bind to, and prints no served digest
    bare = alice.forge("plugin", "sign", REF, "--registry", registry, ok=False)
    assert bare.returncode == 2, bare.stderr
    assert "needs the files you vouch for: --from DIR or --lock FILE" in bare.stderr
    assert theirs not in bare.stdout + bare.stderr
    pasted = alice.forge("plugin", "sign", REF, "--registry", registry, "--digest", theirs, ok=False)
    assert pasted.returncode == 2 and "--digest only confirms one of them" in pasted.stderr

    # bound to what alice holds: refused, naming both digests; nothing signed
    for held, source in (("--from", src), ("--lock", lock), ("--lock", exp)):
        refused = alice.forge("plugin", "sign", REF, held, source, "--registry", registry, ok=False)
        assert refused.returncode == 9, refused.stderr
        first = refused.stderr.splitlines()[0]
        assert first.startswith(f"error: refusing to sign {REF}: the registry serves {theirs}, but "), first
        assert first.endswith(f" holds {mine}"), first
        assert "nothing was signed" in refused.stderr and f"'forge plugin show {REF}' shows what it serves" in refused.stderr
    both = alice.forge("plugin", "sign", REF, "--from", src, "--digest", theirs, "--registry", registry, ok=False)
    assert both.returncode == 2 and f"{src} holds {mine}, but --digest names {theirs}" in both.stderr
    again = alice.forge("plugin", "publish", src, "--sign", "--registry", registry, ok=False)
    assert again.returncode == 8, again.stderr  # the re-publish: other content under the version
    assert _signers(registry) == []
    # so nobody who trusts alice is shown the writer's files as hers
    pulled = alice.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "out", ok=False)
    assert pulled.returncode == 9 and not (tmp_path / "out").exists()
    assert theirs in alice.forge("plugin", "show", REF, "--registry", registry).stdout  # the command the hint names

    # the registry's owner restores alice's files: a script re-signs from the lock, and the digest is printed
    _remove_version(registry)
    alice.forge("plugin", "publish", src, "--registry", registry)
    signed = alice.forge("plugin", "sign", REF, "--lock", lock, "--digest", mine, "--registry", registry)
    assert signed.stdout.splitlines() == [f"signed with key {_key_id(alice)} ({REF} {mine})"]
    kept = alice.forge("plugin", "sign", REF, "--from", src, "--registry", registry)
    assert kept.stdout.splitlines() == [f"already signed with your key {_key_id(alice)} ({REF} {mine}); nothing attached"]
    assert _signers(registry) == [_key_id(alice)]
    shown = json.loads(alice.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "ok", "--json").stdout)
    assert shown["signature"]["status"] == "verified" and shown["tree_digest"] == mine


def test_an_archive_that_does_not_hold_the_recorded_files_is_not_signed_by_sign_or_publish(tmp_path):
    """The record still names alice's tree digest, but the archive it names holds other files:
    a statement naming that archive would let cosign pass the writer's archive as alice's."""
    registry = tmp_path / "registry"
    alice = User(tmp_path / "alice")
    src = write_plugin(tmp_path / "src")
    alice.forge("plugin", "publish", src, "--registry", registry)
    alice.forge("key", "generate")
    theirs_src = write_plugin(tmp_path / "theirs")
    (theirs_src / "opsd_patch.py").write_text("def install(params):\n    print('not alice', flush=True)\n")
    packed = tmp_path / "theirs.tar.gz"
    alice.forge("plugin", "pack", theirs_src, "-o", packed)
    import hashlib

    hex_ = hashlib.sha256(packed.read_bytes()).hexdigest()
    shutil.copyfile(packed, registry / "blobs" / "sha256" / hex_)
    path = registry / "plugins" / OWNER / NAME / f"{VERSION}.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "artifact_digest": f"sha256:{hex_}", "size": packed.stat().st_size}))

    for args in (("plugin", "sign", REF, "--from", src), ("plugin", "publish", src, "--sign")):
        refused = alice.forge(*args, "--registry", registry, ok=False)
        assert refused.returncode == 9, refused.stderr
        assert (f"error: refusing to sign {REF}: the archive the registry serves (sha256:{hex_}) does not hold the "
                f"files of {record['tree_digest']}") in refused.stderr
    assert _signers(str(registry)) == []
