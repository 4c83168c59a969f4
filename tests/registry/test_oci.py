"""The OCI registry kind against a real registry (Debian docker-registry on 127.0.0.1)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from support.racing import all_at_once

from starforge.cluster.digest import digest_of_bytes
from starforge.errors import ImmutableVersionError, NotFoundError, RegistryError, UsageError
from starforge.package_format.archive import pack_tree
from starforge.registry.base import PublishedVersion
from starforge.registry.factory import open_registry
from starforge.registry.oci import ARTIFACT_TYPE, CONFIG_TYPE, LAYER_TYPE, SIGNATURE_TYPE, OciRegistry
from starforge.registry.oci_auth import parse_challenge
from starforge.registry.oci_client import OciClient
from starforge.registry.oci_location import parse_oci_url

pytestmark = pytest.mark.oci


def make_plugin(tmp_path: Path, owner: str, name: str, version: str, body: str = "", big: int = 0):
    """Pack a small plugin tree; return (archive, PublishedVersion, {relpath: bytes})."""
    module = name.replace("-", "_")
    root = tmp_path / f"src-{owner}-{name}-{version}-{hashlib.sha256(body.encode()).hexdigest()[:8]}"
    files = {
        "plugin.yaml": (f"schema: forge/plugin/v1\nname: {name}\nversion: {version}\nkind: algorithm\n"
                        f"entrypoint: {module}:install\n").encode(),
        f"{module}/__init__.py": f"def install(params):\n    return {body!r}\n".encode(),
    }
    if big:
        files[f"{module}/weights.bin"] = os.urandom(big)  # random: gzip cannot shrink it
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    packed = pack_tree(root, list(files), tmp_path / f"{root.name}.tar.gz")
    manifest = {"schema": "forge/plugin/v1", "name": name, "version": version, "kind": "algorithm",
                "entrypoint": f"{module}:install", "load": "eager"}
    info = PublishedVersion(owner=owner, name=name, version=version, tree_digest=packed.tree_digest,
                            artifact_digest=packed.artifact_digest, manifest=manifest, files=packed.files,
                            top_level=(module,))
    assert packed.tree_digest == digest_of_bytes(files)
    return Path(packed.path), info, files


def blob_file(storage: Path, digest: str) -> Path:
    hexpart = digest.split(":", 1)[1]
    return storage / "docker" / "registry" / "v2" / "blobs" / "sha256" / hexpart[:2] / hexpart / "data"


# -- round trips ------------------------------------------------------------------------------

def test_publish_get_download_round_trip(oci_registry, tmp_path):
    reg = open_registry(oci_registry.url)
    assert isinstance(reg, OciRegistry)
    reg.settle_delay = 0  # no racing publisher here (the settle read has tests of its own below)
    archive, info, _ = make_plugin(tmp_path, "rt-owner", "opsd-patch", "1.2")
    assert reg.versions("rt-owner", "opsd-patch") == []
    seen = []
    result = reg.publish(archive, info, progress=lambda done, total: seen.append((done, total)))
    assert result.created is True
    assert result.version.version == "1.2"
    assert seen[-1] == (archive.stat().st_size, archive.stat().st_size)

    got = reg.get("rt-owner", "opsd-patch", "1.2.0")  # PEP 440-equal spelling finds it
    assert (got.version, got.tree_digest, got.artifact_digest) == ("1.2", info.tree_digest, info.artifact_digest)
    assert got.files == info.files and got.manifest == info.manifest and got.top_level == ("opsd_patch",)
    assert got.size == archive.stat().st_size and got.signed is False

    reg.publish(*make_plugin(tmp_path, "rt-owner", "opsd-patch", "1.10.0", body="b")[:2])
    reg.publish(*make_plugin(tmp_path, "rt-owner", "other", "0.1.0")[:2])
    assert reg.versions("rt-owner", "opsd-patch") == ["1.2", "1.10.0"]  # PEP 440 order, not string order
    assert reg.plugins("rt-owner") == [("rt-owner", "opsd-patch"), ("rt-owner", "other")]
    assert ("rt-owner", "other") in reg.plugins()

    dest = tmp_path / "pulled" / "a.tar.gz"
    reg.download(got, dest)
    assert dest.read_bytes() == archive.read_bytes()

    again = reg.publish(archive, info)
    assert again.created is False and again.version.tree_digest == info.tree_digest

    with pytest.raises(NotFoundError, match="1.3.0"):
        reg.get("rt-owner", "opsd-patch", "1.3.0")
    assert reg.versions("rt-owner", "nothing-here") == []


def test_catalog_pages_are_followed(oci_registry, tmp_path):
    reg = OciRegistry(oci_registry.url, settle_delay=0)  # no racing publisher here: no settle wait
    for name in ("pa", "pb", "pc", "pd", "pe"):
        reg.publish(*make_plugin(tmp_path, "pager", name, "1.0.0")[:2])
    reg.client.catalog_page = 2  # five repositories → at least three pages linked by Link headers
    assert reg.plugins("pager") == [("pager", n) for n in ("pa", "pb", "pc", "pd", "pe")]


def test_basic_auth_round_trip_from_environment(oci_registry_auth, tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_REGISTRY_USER", oci_registry_auth.user)
    monkeypatch.setenv("FORGE_REGISTRY_PASSWORD", oci_registry_auth.password)
    reg = OciRegistry(oci_registry_auth.url)
    archive, info, _ = make_plugin(tmp_path, "authed", "p", "1.0.0")
    assert reg.publish(archive, info).created is True
    assert reg.versions("authed", "p") == ["1.0.0"]
    assert reg.plugins("authed") == [("authed", "p")]
    dest = tmp_path / "out.tar.gz"
    reg.download(reg.get("authed", "p", "1.0.0"), dest)
    assert dest.read_bytes() == archive.read_bytes()


def test_basic_auth_from_docker_config(oci_registry_auth, tmp_path, monkeypatch):
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir(exist_ok=True)
    token = base64.b64encode(f"{oci_registry_auth.user}:{oci_registry_auth.password}".encode()).decode()
    host = f"127.0.0.1:{oci_registry_auth.port}"
    (config_dir / "config.json").write_text(json.dumps({"auths": {f"http://{host}": {"auth": token}}}))
    reg = OciRegistry(oci_registry_auth.url)
    archive, info, _ = make_plugin(tmp_path, "dockercfg", "p", "1.0.0")
    assert reg.publish(archive, info).created is True
    assert reg.get("dockercfg", "p", "1.0.0").tree_digest == info.tree_digest


def test_credential_helper_from_docker_config(oci_registry_auth, tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    helper = bindir / "docker-credential-forgetest"
    answer = json.dumps({"Username": oci_registry_auth.user, "Secret": oci_registry_auth.password})
    helper.write_text(f"#!/bin/sh\nread server\n[ \"$1\" = get ] && echo '{answer}'\n")
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir(exist_ok=True)
    host = f"127.0.0.1:{oci_registry_auth.port}"
    (config_dir / "config.json").write_text(json.dumps({"credHelpers": {host: "forgetest"}}))
    reg = OciRegistry(oci_registry_auth.url)
    archive, info, _ = make_plugin(tmp_path, "helper", "p", "1.0.0")
    assert reg.publish(archive, info).created is True


def test_missing_and_wrong_credentials_are_clear_errors(oci_registry_auth, tmp_path, monkeypatch):
    archive, info, _ = make_plugin(tmp_path, "denied", "p", "1.0.0")
    with pytest.raises(RegistryError, match="requires a login") as anonymous:
        OciRegistry(oci_registry_auth.url).versions("denied", "p")
    assert "FORGE_REGISTRY_USER" in anonymous.value.hint

    monkeypatch.setenv("FORGE_REGISTRY_USER", oci_registry_auth.user)
    monkeypatch.setenv("FORGE_REGISTRY_PASSWORD", "wrong-password")
    with pytest.raises(RegistryError, match="refused the credentials of 'alice'") as wrong:
        OciRegistry(oci_registry_auth.url).publish(archive, info)
    assert "FORGE_REGISTRY_PASSWORD" in wrong.value.hint
    # listing needs the catalog; wrong credentials there are still wrong credentials, not a
    # catalog the registry hides from this account
    with pytest.raises(RegistryError, match="refused the credentials of 'alice' \\(HTTP 401\\)") as listing:
        OciRegistry(oci_registry_auth.url).plugins()
    assert "does not list its repositories" not in str(listing.value)
    assert "FORGE_REGISTRY_PASSWORD" in listing.value.hint


# -- immutability and races ------------------------------------------------------------------

def test_published_version_is_immutable(oci_registry, tmp_path):
    reg = OciRegistry(oci_registry.url)
    archive_a, info_a, _ = make_plugin(tmp_path, "immut", "p", "2.0.0", body="a")
    archive_b, info_b, _ = make_plugin(tmp_path, "immut", "p", "2.0", body="b")  # PEP 440-equal version
    reg.publish(archive_a, info_a)
    with pytest.raises(ImmutableVersionError) as refused:
        reg.publish(archive_b, info_b)
    assert info_a.tree_digest in str(refused.value) and info_b.tree_digest in str(refused.value)
    assert reg.versions("immut", "p") == ["2.0.0"]
    dest = tmp_path / "out.tar.gz"
    reg.download(reg.get("immut", "p", "2.0.0"), dest)
    assert dest.read_bytes() == archive_a.read_bytes()


def test_publisher_that_loses_the_race_during_upload_reports_the_conflict(oci_registry, tmp_path):
    """B publishes the same version while A's layer is on the wire: A must not overwrite B."""
    reg_a, reg_b = OciRegistry(oci_registry.url, chunk_size=1 << 20), OciRegistry(oci_registry.url)
    archive_a, info_a, _ = make_plugin(tmp_path, "race", "p", "1.0.0", body="a", big=3 << 20)
    archive_b, info_b, _ = make_plugin(tmp_path, "race", "p", "1.0.0", body="b")
    b_results = []

    def during_a_upload(done, total):
        if not b_results:
            b_results.append(reg_b.publish(archive_b, info_b))

    with pytest.raises(ImmutableVersionError) as lost:
        reg_a.publish(archive_a, info_a, progress=during_a_upload)
    assert b_results[0].created is True
    assert info_a.tree_digest in str(lost.value) and info_b.tree_digest in str(lost.value)
    assert reg_a.get("race", "p", "1.0.0").tree_digest == info_b.tree_digest


def race_publishers(url: str, plugins: list) -> list:
    """Publish every ``(archive, info, ...)`` of *plugins* at once, one thread each, released
    together; each publisher's PublishResult or ImmutableVersionError (None: it hung)."""
    barrier = threading.Barrier(len(plugins))
    outcomes: list = [None] * len(plugins)

    def run(i):
        reg = OciRegistry(url)
        barrier.wait()
        try:
            outcomes[i] = reg.publish(*plugins[i][:2])
        except ImmutableVersionError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(plugins))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return outcomes


def test_concurrent_publishers_leave_the_tag_on_a_reported_winner(oci_registry, tmp_path):
    """Threads racing on one version: the tag ends on a winner; a loser reports or is detectable."""
    for round_ in range(4):
        version = f"3.0.{round_}"
        plugins = [make_plugin(tmp_path, "threads", "p", version, body=f"{round_}-{i}") for i in range(3)]
        outcomes = race_publishers(oci_registry.url, plugins)
        final = OciRegistry(oci_registry.url).get("threads", "p", version).tree_digest
        winners = [i for i, o in enumerate(outcomes) if not isinstance(o, Exception)]
        assert any(plugins[i][1].tree_digest == final for i in winners), outcomes
        for i, outcome in enumerate(outcomes):
            assert outcome is not None  # every publisher either returned or raised the conflict
            if isinstance(outcome, Exception):
                assert plugins[i][1].tree_digest in str(outcome)
        # A publisher that returned while its content is not under the tag lost inside the
        # millisecond window between another's last check and write: no tag write is
        # conditional. `forge lock --check` catches that later, since the tag shows `final`.


# -- failures in transit ----------------------------------------------------------------------

def test_registry_killed_during_upload_leaves_no_version(private_registry, tmp_path):
    server = private_registry()
    archive, info, _ = make_plugin(tmp_path, "crash", "big", "1.0.0", big=6 << 20)
    reg = OciRegistry(server.url, chunk_size=1 << 20, retries=2, backoff=0.05)

    def kill_midway(done, total):
        if done >= 2 << 20:
            server.kill()

    with pytest.raises(RegistryError, match="cannot reach registry"):
        reg.publish(archive, info, progress=kill_midway)
    server.start()  # same port, same storage
    reg = OciRegistry(server.url, chunk_size=1 << 20)
    assert reg.versions("crash", "big") == []
    assert reg.plugins() == []
    with pytest.raises(NotFoundError):
        reg.get("crash", "big", "1.0.0")
    assert reg.publish(archive, info).created is True
    dest = tmp_path / "out.tar.gz"
    reg.download(reg.get("crash", "big", "1.0.0"), dest)
    assert dest.read_bytes() == archive.read_bytes()


@pytest.mark.parametrize("damage", ["flip", "truncate", "append"])
def test_download_refuses_a_damaged_blob(private_registry, tmp_path, damage):
    server = private_registry()
    reg = OciRegistry(server.url)
    archive, info, _ = make_plugin(tmp_path, "damage", "p", "1.0.0", big=200_000)
    reg.publish(archive, info)
    info = reg.get("damage", "p", "1.0.0")
    data = blob_file(server.storage, info.artifact_digest)
    raw = bytearray(data.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0xFF
        expect = "does not match its digest"
    elif damage == "truncate":
        raw = raw[: len(raw) - 1000]
        expect = "truncated"
    else:
        raw += b"extra bytes"
        expect = "larger than"
    data.write_bytes(bytes(raw))
    dest = tmp_path / "pulled" / "p.tar.gz"
    with pytest.raises(RegistryError, match=expect):
        reg.download(info, dest)
    assert not dest.parent.exists() or os.listdir(dest.parent) == []  # no partial file left


# -- interop ----------------------------------------------------------------------------------

def test_skopeo_sees_our_artifact_and_the_layer_holds_the_annotated_tree(oci_registry, skopeo, tmp_path):
    reg = OciRegistry(oci_registry.url)
    archive, info, files = make_plugin(tmp_path, "alice", "p", "1.0.0")
    reg.publish(archive, info)
    out = subprocess.run(
        [skopeo, "inspect", "--raw", "--tls-verify=false", f"docker://127.0.0.1:{oci_registry.port}/forge/alice/p:1.0.0"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    manifest = json.loads(out.stdout)
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["artifactType"] == ARTIFACT_TYPE == "application/vnd.starforge.plugin.v1"
    assert manifest["config"]["mediaType"] == CONFIG_TYPE
    [layer] = manifest["layers"]
    assert layer["mediaType"] == LAYER_TYPE

    blob = httpx.get(f"{oci_registry.http}/v2/forge/alice/p/blobs/{layer['digest']}").content
    assert "sha256:" + hashlib.sha256(blob).hexdigest() == layer["digest"]
    extracted = {}
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                extracted[member.name] = tar.extractfile(member).read()
    assert extracted == files
    assert digest_of_bytes(extracted) == manifest["annotations"]["org.starforge.plugin.tree-digest"]


def test_signature_is_a_referrer_found_through_the_tag_fallback(oci_registry, tmp_path):
    reg = OciRegistry(oci_registry.url)
    envelope = json.dumps({"payloadType": "application/vnd.in-toto+json", "payload": "e30=",
                           "signatures": [{"keyid": "k", "sig": "c2ln"}]}).encode()
    archive, info, _ = make_plugin(tmp_path, "signer", "p", "1.0.0")
    assert reg.publish(archive, info, signature=envelope).version.signed is True
    got = reg.get("signer", "p", "1.0.0")
    assert got.signed is True
    assert reg.signature(got) == envelope

    # This registry has no referrers API: the signature is listed in the sha256-<hex> tag's index.
    manifest = httpx.get(f"{oci_registry.http}/v2/forge/signer/p/manifests/1.0.0",
                         headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    subject = "sha256:" + hashlib.sha256(manifest.content).hexdigest()
    assert httpx.get(f"{oci_registry.http}/v2/forge/signer/p/referrers/{subject}").status_code == 404
    index = httpx.get(f"{oci_registry.http}/v2/forge/signer/p/manifests/sha256-{subject[7:]}",
                      headers={"Accept": "application/vnd.oci.image.index.v1+json"}).json()
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    # the envelope's manifest, and beside it its Sigstore bundle's (cosign's artifact type)
    assert sorted(d["artifactType"] for d in index["manifests"]) == sorted(
        [SIGNATURE_TYPE, "application/vnd.dev.sigstore.bundle.v0.3+json"])
    [desc] = [d for d in index["manifests"] if d["artifactType"] == SIGNATURE_TYPE]
    sig_manifest = httpx.get(f"{oci_registry.http}/v2/forge/signer/p/manifests/{desc['digest']}",
                             headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
    assert sig_manifest["subject"]["digest"] == subject
    assert reg.versions("signer", "p") == ["1.0.0"]  # the referrers tag is not a version

    # Unsigned, then signed on a same-content republish: the signature is added, the version kept.
    archive2, info2, _ = make_plugin(tmp_path, "signer", "q", "1.0.0")
    reg.publish(archive2, info2)
    assert reg.signature(reg.get("signer", "q", "1.0.0")) is None
    result = reg.publish(archive2, info2, signature=envelope)
    assert result.created is False and result.version.signed is True and result.signature_attached is True
    assert reg.signature(reg.get("signer", "q", "1.0.0")) == envelope
    assert reg.publish(archive2, info2, signature=envelope).signature_attached is False  # already there
    another = reg.publish(archive2, info2, signature=b'{"another": 1}')  # e.g. another key's: kept beside it
    assert another.created is False and another.signature_attached is True
    assert reg.signatures(reg.get("signer", "q", "1.0.0")) == [envelope, b'{"another": 1}']


def test_concurrent_signed_publishes_of_one_content_keep_a_signature(oci_registry, tmp_path):
    """The referrers tag is read-modify-write without a conditional PUT: concurrent signers may
    drop each other's entries, but the last writer always lists its own."""
    archive, info, _ = make_plugin(tmp_path, "cosign", "p", "1.0.0")
    envelopes = [json.dumps({"payloadType": "t", "payload": "", "signatures": [{"keyid": str(i)}]}).encode()
                 for i in range(3)]

    def run(envelope, go):
        reg = OciRegistry(oci_registry.url)
        go()
        reg.publish(archive, info, signature=envelope)

    assert all_at_once(run, envelopes) == []
    reg = OciRegistry(oci_registry.url)
    got = reg.get("cosign", "p", "1.0.0")
    assert got.signed is True
    assert reg.signature(got) in envelopes


class BlobBeingCommitted:
    """Puts a real registry, at a chosen manifest PUT, in the state it is in while another
    publisher commits a blob this one pushed too.

    Debian's docker-registry (distribution 2.8, filesystem storage) rewrites a repository's
    link file to a blob in place on every commit of that blob (truncate, then write). A
    manifest PUT whose check of the blob reads the link in between finds it empty and is
    refused with HTTP 400 ``DIGEST_INVALID`` + ``MANIFEST_BLOB_UNKNOWN``: the flake of three
    concurrent publishers of one content. This hook (an httpx request hook of the publisher's
    client) empties that link file just before the PUT, which makes the interleaving happen
    every time instead of one run in eight. The other publisher's commit is left unfinished
    (the link stays empty), so only pushing the blob again repairs it.

    ``which`` picks the PUT and the link: ``layer`` / ``config`` (the plugin manifest's, PUT
    by tag), ``signature-config`` (the signature manifest's empty config, shared by every
    signer) or ``referrers-index`` (the referrers tag's index, which names our signature
    manifest: its revision link).
    """

    def __init__(self, server, repo: str, which: str, times: int = 1):
        self.repos = server.storage / "docker" / "registry" / "v2" / "repositories" / repo
        self.which, self.times = which, times
        self.emptied: list[str] = []  # digests whose link was emptied, one per forced PUT
        self.refused: list[dict] = []  # the registry's error bodies for manifest PUTs
        self.manifest_puts = 0
        self.uploads_after_refusal: list[str] = []  # digests of blob uploads committed after a refusal

    def _target(self, request: httpx.Request) -> tuple[str, Path] | None:
        path = request.url.path
        if request.method != "PUT" or "/manifests/" not in path:
            return None
        reference = path.rsplit("/", 1)[1]
        body = json.loads(request.content)
        if self.which in ("layer", "config") and body.get("artifactType") == ARTIFACT_TYPE and not reference.startswith("sha256"):
            digest = body["layers"][0]["digest"] if self.which == "layer" else body["config"]["digest"]
            return digest, self.repos / "_layers" / "sha256" / digest.split(":")[1] / "link"
        if self.which == "signature-config" and body.get("artifactType") == SIGNATURE_TYPE:
            digest = body["config"]["digest"]
            return digest, self.repos / "_layers" / "sha256" / digest.split(":")[1] / "link"
        if self.which == "referrers-index" and reference.startswith("sha256-"):
            digest = body["manifests"][-1]["digest"]
            return digest, self.repos / "_manifests" / "revisions" / "sha256" / digest.split(":")[1] / "link"
        return None

    def on_request(self, request: httpx.Request) -> None:
        path = request.url.path
        if request.method == "PUT" and "/blobs/uploads/" in path and self.refused:
            self.uploads_after_refusal.append(request.url.params.get("digest", ""))
        target = self._target(request)
        if target is None:
            return
        self.manifest_puts += 1
        if len(self.emptied) >= self.times:
            return
        digest, link = target
        assert link.read_text() == digest  # the blob is there, its link whole: our push worked
        link.write_text("")  # another commit of the same blob is between truncate and write
        self.emptied.append(digest)

    def on_response(self, response: httpx.Response) -> None:
        request = response.request
        if request.method == "PUT" and "/manifests/" in request.url.path and response.status_code == 400:
            response.read()
            self.refused.append(response.json())

    def install(self, reg: OciRegistry) -> OciRegistry:
        reg.client._http.event_hooks["request"].append(self.on_request)
        reg.client._http.event_hooks["response"].append(self.on_response)
        return reg


def codes(body: dict) -> set:
    return {e.get("code") for e in body.get("errors", [])}


@pytest.mark.parametrize("which", ["layer", "config", "signature-config", "referrers-index"])
def test_manifest_put_refused_while_a_blob_is_being_committed_pushes_it_again(oci_registry, tmp_path, which):
    """The interleaving behind the concurrent-publish flake, forced: the registry refuses our
    manifest because another publisher is committing one of its blobs; publish pushes that
    blob again (the registry checks its digest and rewrites the link) and the PUT succeeds."""
    archive, info, _ = make_plugin(tmp_path, "interleave", which, "1.0.0")
    envelope = json.dumps({"payloadType": "t", "payload": "", "signatures": [{"keyid": which}]}).encode()
    hook = BlobBeingCommitted(oci_registry, f"forge/interleave/{which}", which)
    reg = hook.install(OciRegistry(oci_registry.url, backoff=0.01))
    result = reg.publish(archive, info, signature=envelope)
    assert result.created is True and result.signature_attached is True
    assert len(hook.emptied) == 1 and len(hook.refused) == 1
    assert {"MANIFEST_BLOB_UNKNOWN", "DIGEST_INVALID"} <= codes(hook.refused[0])  # what the flake saw
    if which != "referrers-index":  # a blob: uploaded again first (the index names a manifest: PUT again)
        assert hook.uploads_after_refusal[0] == hook.emptied[0]
    got = OciRegistry(oci_registry.url).get("interleave", which, "1.0.0")
    assert got.tree_digest == info.tree_digest and got.signed is True
    assert OciRegistry(oci_registry.url).signature(got) == envelope
    dest = tmp_path / "out.tar.gz"
    reg.download(got, dest)
    assert dest.read_bytes() == archive.read_bytes()


def test_without_pushing_again_the_forced_interleaving_fails_as_the_flake_did(oci_registry, tmp_path, monkeypatch):
    """The hook reproduces the failure, so the test above can fail: one attempt, no re-push."""
    monkeypatch.setattr("starforge.registry.oci.BLOB_RACE_ATTEMPTS", 1)
    archive, info, _ = make_plugin(tmp_path, "interleave", "once", "1.0.0")
    hook = BlobBeingCommitted(oci_registry, "forge/interleave/once", "layer")
    reg = hook.install(OciRegistry(oci_registry.url, backoff=0.01))
    with pytest.raises(RegistryError, match="HTTP 400.*DIGEST_INVALID.*MANIFEST_BLOB_UNKNOWN"):
        reg.publish(archive, info)
    assert OciRegistry(oci_registry.url).versions("interleave", "once") == []


def test_a_blob_the_registry_keeps_losing_is_an_error_after_a_bounded_number_of_pushes(oci_registry, tmp_path):
    """Not a blanket retry: a registry that loses the blob after every push gets
    BLOB_RACE_ATTEMPTS manifest PUTs, then the refusal is reported (exit 6)."""
    from starforge.registry.oci import BLOB_RACE_ATTEMPTS

    archive, info, _ = make_plugin(tmp_path, "interleave", "lossy", "1.0.0")
    hook = BlobBeingCommitted(oci_registry, "forge/interleave/lossy", "layer", times=100)
    reg = hook.install(OciRegistry(oci_registry.url, backoff=0.01))
    with pytest.raises(RegistryError) as refused:
        reg.publish(archive, info)
    assert type(refused.value) is RegistryError and refused.value.exit_code == 6
    assert "still refused after pushing" in str(refused.value) and info.artifact_digest in str(refused.value)
    assert "storage" in (refused.value.hint or "")
    assert hook.manifest_puts == BLOB_RACE_ATTEMPTS == len(hook.refused)
    assert hook.uploads_after_refusal == [info.artifact_digest] * (BLOB_RACE_ATTEMPTS - 1)


def test_a_refusal_naming_a_blob_we_did_not_push_is_not_retried(oci_registry, tmp_path):
    """MANIFEST_BLOB_UNKNOWN for a digest that is not ours is a real error: raised at once."""
    client = OciClient(parse_oci_url(oci_registry.url))
    missing = "sha256:" + "ab" * 32
    body = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": missing, "size": 2},
                       "layers": []}).encode()
    reg = OciRegistry(oci_registry.url)
    puts = []
    reg.client._http.event_hooks["request"].append(lambda r: puts.append(r) if r.method == "PUT" else None)
    with pytest.raises(RegistryError, match="MANIFEST_BLOB_UNKNOWN") as refused:
        reg._put_manifest("forge/interleave/foreign", "1.0.0", body, "application/vnd.oci.image.manifest.v1+json",
                          {"sha256:" + "cd" * 32: lambda: pytest.fail("pushed a blob the registry did not name")})
    assert missing in str(refused.value) and len(puts) == 1
    client.close()


# -- a Bearer-token front and fault injection, via a loopback proxy ----------------------------

class TokenProxy:
    """In front of a registry: demands ``Bearer`` tokens from its own /token endpoint (Basic
    login there), checks each token's scope, and can answer 503 to the next N requests."""

    def __init__(self, upstream: str, user: str, password: str):
        self.upstream = upstream
        self.user, self.password = user, password
        self.fail_next = 0
        self.before_tag_write = None  # called once before the first manifest PUT by tag
        self.immutable_tags = False  # refuse a manifest PUT to an existing tag (like Harbor, ECR)
        self.catalog_denied = False  # answer 403 to /v2/_catalog (like Harbor for non-administrators)
        self.catalog_denied_status = 403  # 401: a valid token without the catalog scope (insufficient_scope)
        self.scopes_asked: list = []
        # One client for every forwarded request (a new one per request made its own TLS context,
        # about 0.2 s, and publish's settle wait grows with how slowly the registry answers).
        self.up = httpx.Client(timeout=60)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes

            def log_message(self, *args):
                pass

            def do_any(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path.startswith("/token"):
                    return self.token(body)
                if proxy.fail_next > 0:
                    proxy.fail_next -= 1
                    return self.reply(503, {}, b"busy")
                needed = proxy.needed_scope(self.command, self.path)
                auth = self.headers.get("authorization", "")
                if auth != f"Bearer tok:{needed}" and not (needed.endswith(":pull") and
                                                          auth == f"Bearer tok:{needed[:-5]}:pull,push"):
                    realm = f"http://127.0.0.1:{proxy.port}/token"
                    challenge = f'Bearer realm="{realm}",service="forge-test",scope="{needed}"'
                    return self.reply(401, {"WWW-Authenticate": challenge}, b"{}")
                if proxy.catalog_denied and self.path.startswith("/v2/_catalog"):
                    if proxy.catalog_denied_status == 401:
                        realm = f"http://127.0.0.1:{proxy.port}/token"
                        challenge = (f'Bearer realm="{realm}",service="forge-test",scope="{needed}",'
                                     'error="insufficient_scope"')
                        return self.reply(401, {"WWW-Authenticate": challenge, "Content-Type": "application/json"},
                                          b'{"errors":[{"code":"UNAUTHORIZED"}]}')
                    return self.reply(403, {"Content-Type": "application/json"}, b'{"errors":[{"code":"DENIED"}]}')
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("authorization", "host")}
                headers["Host"] = f"127.0.0.1:{proxy.port}"
                reference = self.path.rsplit("/manifests/", 1)[-1] if "/manifests/" in self.path else ""
                if self.command == "PUT" and reference and not reference.startswith("sha256:"):
                    hook, proxy.before_tag_write = proxy.before_tag_write, None
                    if hook:
                        hook()
                    existing = proxy.up.get(proxy.upstream + self.path, headers={"Accept": headers.get("Content-Type", "")})
                    if proxy.immutable_tags and existing.status_code == 200:
                        error = {"errors": [{"code": "DENIED", "message": "the tag is immutable"}]}
                        return self.reply(412, {"Content-Type": "application/json"}, json.dumps(error).encode())
                r = proxy.up.request(self.command, proxy.upstream + self.path, headers=headers, content=body)
                out = {k: v for k, v in r.headers.items()
                       if k.lower() not in ("content-length", "transfer-encoding", "connection")}
                self.reply(r.status_code, out, r.content, r.headers.get("content-length"))

            def token(self, body):
                from urllib.parse import parse_qs, urlsplit

                if self.command == "POST":  # OAuth2 refresh-token grant (docker login's identity token)
                    form = parse_qs(body.decode())
                    if form.get("grant_type") != ["refresh_token"] or form.get("refresh_token") != [proxy.password]:
                        return self.reply(401, {}, b'{"details":"bad refresh token"}')
                    scope = " ".join(form.get("scope", []))
                    proxy.scopes_asked.append(scope)
                    answer = {"access_token": f"tok:{scope}"}
                else:
                    query = parse_qs(urlsplit(self.path).query)
                    expected = "Basic " + base64.b64encode(f"{proxy.user}:{proxy.password}".encode()).decode()
                    if self.headers.get("authorization") != expected:
                        return self.reply(401, {}, b'{"details":"bad login"}')
                    scope = " ".join(query.get("scope", []))
                    proxy.scopes_asked.append(scope)
                    answer = {"token": f"tok:{scope}"}
                self.reply(200, {"Content-Type": "application/json"}, json.dumps(answer).encode())

            def reply(self, status, headers, body, head_length=None):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                length = head_length if self.command == "HEAD" and head_length else str(len(body))
                self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = do_any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def needed_scope(method: str, path: str) -> str:
        path = path.split("?", 1)[0]
        if path.startswith("/v2/_catalog"):
            return "registry:catalog:*"
        if path in ("/v2/", "/v2"):
            return ""
        for marker in ("/blobs/", "/manifests/", "/tags/", "/referrers/"):
            if marker in path:
                repo = path[len("/v2/"):path.index(marker)]
                return f"repository:{repo}:" + ("pull" if method in ("GET", "HEAD") else "pull,push")
        return "unknown"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.up.close()


def test_bearer_token_challenge_is_answered_with_scoped_tokens(oci_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_REGISTRY_USER", "bob")
    monkeypatch.setenv("FORGE_REGISTRY_PASSWORD", "hunter2")
    with TokenProxy(oci_registry.http, "bob", "hunter2") as proxy:
        reg = OciRegistry(f"oci://127.0.0.1:{proxy.port}/forge")
        archive, info, _ = make_plugin(tmp_path, "bearer", "p", "1.0.0")
        assert reg.publish(archive, info).created is True
        assert reg.plugins("bearer") == [("bearer", "p")]
        dest = tmp_path / "out.tar.gz"
        reg.download(reg.get("bearer", "p", "1.0.0"), dest)
        assert dest.read_bytes() == archive.read_bytes()
        assert "repository:forge/bearer/p:pull,push" in proxy.scopes_asked
        assert "registry:catalog:*" in proxy.scopes_asked
        proxy.catalog_denied = True
        with pytest.raises(RegistryError, match="does not list its repositories") as no_catalog:
            reg.plugins()
        assert "forge plugin show" in no_catalog.value.hint
        # a token the registry accepts but without the catalog scope: 401 insufficient_scope is
        # the restricted catalog too, not wrong credentials
        proxy.catalog_denied_status = 401
        with pytest.raises(RegistryError, match=r"does not list its repositories to this account \(HTTP 401\)"):
            reg.plugins()
        assert reg.versions("bearer", "p") == ["1.0.0"]  # a plugin is still reachable by name

        monkeypatch.setenv("FORGE_REGISTRY_PASSWORD", "wrong")
        with pytest.raises(RegistryError, match="refused the credentials of 'bob'"):
            OciRegistry(f"oci://127.0.0.1:{proxy.port}/forge").versions("bearer", "p")


def test_identity_token_from_docker_config_is_exchanged_for_access_tokens(oci_registry, tmp_path):
    with TokenProxy(oci_registry.http, "<token>", "refresh-me") as proxy:
        config_dir = tmp_path / "docker-config"
        config_dir.mkdir(exist_ok=True)
        (config_dir / "config.json").write_text(
            json.dumps({"auths": {f"127.0.0.1:{proxy.port}": {"auth": "", "identitytoken": "refresh-me"}}}))
        reg = OciRegistry(f"oci://127.0.0.1:{proxy.port}/forge")
        archive, info, _ = make_plugin(tmp_path, "idtoken", "p", "1.0.0")
        assert reg.publish(archive, info).created is True
        assert "repository:forge/idtoken/p:pull,push" in proxy.scopes_asked


def test_registry_side_tag_immutability_turns_a_lost_race_into_a_conflict(oci_registry, tmp_path, monkeypatch):
    """B writes the tag between A's last check and A's write; the registry refuses A's write."""
    monkeypatch.setenv("FORGE_REGISTRY_USER", "bob")
    monkeypatch.setenv("FORGE_REGISTRY_PASSWORD", "hunter2")
    archive_a, info_a, _ = make_plugin(tmp_path, "guarded", "p", "1.0.0", body="a")
    archive_b, info_b, _ = make_plugin(tmp_path, "guarded", "p", "1.0.0", body="b")
    with TokenProxy(oci_registry.http, "bob", "hunter2") as proxy:
        proxy.immutable_tags = True
        proxy.before_tag_write = lambda: OciRegistry(oci_registry.url).publish(archive_b, info_b)
        with pytest.raises(ImmutableVersionError) as lost:
            OciRegistry(f"oci://127.0.0.1:{proxy.port}/forge").publish(archive_a, info_a)
    assert info_a.tree_digest in str(lost.value) and info_b.tree_digest in str(lost.value)
    assert OciRegistry(oci_registry.url).get("guarded", "p", "1.0.0").tree_digest == info_b.tree_digest


def test_transient_503s_are_retried_and_persistent_ones_reported(oci_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_REGISTRY_USER", "bob")
    monkeypatch.setenv("FORGE_REGISTRY_PASSWORD", "hunter2")
    with TokenProxy(oci_registry.http, "bob", "hunter2") as proxy:
        reg = OciRegistry(f"oci://127.0.0.1:{proxy.port}/forge", backoff=0.01)
        archive, info, _ = make_plugin(tmp_path, "flaky", "p", "1.0.0")
        reg.versions("flaky", "p")  # settle the scheme probe and the token first
        proxy.fail_next = 2
        assert reg.publish(archive, info).created is True
        assert proxy.fail_next == 0

        proxy.fail_next = 1000
        with pytest.raises(RegistryError, match="HTTP 503"):
            reg.versions("flaky", "p")
        assert 1000 - proxy.fail_next == reg.client.retries  # bounded: exactly `retries` attempts


# -- URL and header parsing (no network) -------------------------------------------------------

def test_oci_url_rules():
    loc = parse_oci_url("oci://Registry.Example.com:5000/Team/forge/")
    assert (loc.host, loc.prefix, loc.is_loopback) == ("registry.example.com:5000", "team/forge", False)
    assert loc.repository("alice", "opsd-patch") == "team/forge/alice/opsd-patch"
    assert parse_oci_url("oci://localhost:5000").is_loopback
    assert parse_oci_url("oci://[::1]:5000/x").is_loopback
    assert parse_oci_url("oci://127.0.0.2/x").is_loopback
    # A remote host is HTTPS unless --insecure; deciding that sends nothing.
    assert OciClient(parse_oci_url("oci://registry.example.com/forge")).base == "https://registry.example.com"
    for bad in ("oci://user:pw@host/x", "oci:///x", "oci://host/UP per", "oci://host:port/x"):
        with pytest.raises(UsageError):
            parse_oci_url(bad)


def test_www_authenticate_parsing():
    scheme, params = parse_challenge(
        'Bearer realm="https://auth.example.com/token",service="registry.example.com",'
        'scope="repository:team/p:pull,push"')
    assert scheme == "bearer"
    assert params == {"realm": "https://auth.example.com/token", "service": "registry.example.com",
                      "scope": "repository:team/p:pull,push"}
    assert parse_challenge('Basic realm="forge"') == ("basic", {"realm": "forge"})


def test_a_tag_moved_on_the_registry_is_never_repinned_by_lock_upgrade(oci_registry, tmp_path):
    """Lock alice's 1.2.0, then move the tag (delete the manifest, push other content as
    1.2.0): --check, plain lock and --upgrade all stop with the moved-tag error."""
    from starforge.errors import LockError
    from starforge.experiment.config import load_experiment
    from starforge.experiment.lock import check_lock, lock_experiment

    reg = OciRegistry(oci_registry.url)
    archive_a, info_a, _ = make_plugin(tmp_path, "movedtag", "p", "1.2.0", body="a")
    archive_b, info_b, _ = make_plugin(tmp_path, "movedtag", "p", "1.2.0", body="b")
    reg.publish(archive_a, info_a)
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    (exp_dir / "forge.yaml").write_text(
        "schema: forge/job/v1\nname: moved\nentrypoint: python -m train\nplugins: [movedtag/p@~=1.2]\n"
    )
    exp = load_experiment(exp_dir)
    lock_experiment(exp, reg)
    locked = (exp_dir / "plugins.lock.json").read_bytes()

    repo = reg.repository("movedtag", "p")
    assert reg.client.delete_manifest(repo, reg.client.manifest_digest(repo, "1.2.0"))
    assert reg.publish(archive_b, info_b).created is True  # the tag now names other content

    for attempt in (lambda: check_lock(exp, reg), lambda: lock_experiment(exp, reg),
                    lambda: lock_experiment(exp, reg, upgrade="p"), lambda: lock_experiment(exp, reg, upgrade="*")):
        with pytest.raises(LockError) as moved:
            attempt()
        assert (f"moved tag: movedtag/p@1.2.0 is locked at {info_a.tree_digest}, but registry {reg.url} "
                f"now serves {info_b.tree_digest}") == moved.value.message
        assert f"the lock was made with registry {reg.url}" in moved.value.hint
        assert "--upgrade" not in moved.value.hint
    assert (exp_dir / "plugins.lock.json").read_bytes() == locked


def test_an_artifact_of_another_owner_under_the_asked_for_tag_is_a_tampered_registry(oci_registry, tmp_path):
    """Someone with push rights copies mallory's artifact into alice's repository and tag."""
    reg = OciRegistry(oci_registry.url)
    archive, info, _ = make_plugin(tmp_path, "mallory", "spoofed", "0.1.0")
    reg.publish(archive, info)
    _copy_tag(oci_registry.http, "forge/mallory/spoofed", "forge/alice/spoofed", "0.1.0")

    with pytest.raises(RegistryError, match=r"is tampered: .* answers for mallory/spoofed@0.1.0, asked for alice/spoofed@0.1.0"):
        reg.get("alice", "spoofed", "0.1.0")
    from starforge.registry.resolve import resolve

    with pytest.raises(RegistryError, match="is tampered"):
        resolve(reg, "alice/spoofed")


def _copy_tag(http: str, src_repo: str, dst_repo: str, tag: str) -> None:
    """Write *src_repo:tag*'s manifest under *dst_repo:tag* (blobs mounted across), as a racing publisher would."""
    body = httpx.get(f"{http}/v2/{src_repo}/manifests/{tag}",
                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).content
    manifest = json.loads(body)
    for desc in [manifest["config"], *manifest["layers"]]:
        r = httpx.post(f"{http}/v2/{dst_repo}/blobs/uploads/", params={"mount": desc["digest"], "from": src_repo})
        assert r.status_code == 201, r.text
    r = httpx.put(f"{http}/v2/{dst_repo}/manifests/{tag}", content=body,
                  headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("settle", [0.5, 0.0])
def test_a_racing_write_that_lands_after_the_read_back_is_caught_by_the_settle_read(oci_registry, tmp_path, monkeypatch, settle):
    """B read the tag before A wrote it and writes its own just after A read it back: only
    the read after the settle delay can see it."""
    import starforge.registry.oci as oci_module

    version = "1.0.0" if settle else "1.0.1"
    archive_a, info_a, _ = make_plugin(tmp_path, "settle", "p", version, body="a")
    archive_b, info_b, _ = make_plugin(tmp_path, "settle", "p", version, body="b")
    OciRegistry(f"oci://127.0.0.1:{oci_registry.port}/racer").publish(archive_b, info_b)
    slept = []

    def b_lands_meanwhile(seconds):
        slept.append(seconds)
        _copy_tag(oci_registry.http, "racer/settle/p", "forge/settle/p", version)

    monkeypatch.setattr(oci_module.time, "sleep", b_lands_meanwhile)
    reg_a = OciRegistry(oci_registry.url, settle_delay=settle)
    if settle:
        with pytest.raises(ImmutableVersionError, match="the tag moved while publishing") as lost:
            reg_a.publish(archive_a, info_a)
        # one settle wait, of at least the delay (longer when the registry answers slowly)
        assert len(slept) == 1 and slept[0] >= settle and info_b.tree_digest in str(lost.value)
    else:  # without the settle read, A tells its user "published", and B's write lands after
        assert reg_a.publish(archive_a, info_a).created is True and slept == []
        _copy_tag(oci_registry.http, "racer/settle/p", "forge/settle/p", version)
    assert OciRegistry(oci_registry.url).get("settle", "p", version).tree_digest == info_b.tree_digest


def test_eight_racing_publishers_the_tag_holder_was_told_published_the_rest_of_the_conflict(oci_registry, tmp_path):
    """Bounded version of bench/oci_publish_race.py: 2 rounds of 8 racing publishers.

    What always holds is asserted: the publisher whose write the tag holds was told
    "published", every other one either was too or was told of the conflict naming its
    digest. That only one is told "published" is best effort on a registry without
    conditional writes (SPEC §5): a publisher stalled between its last read and its write
    for longer than the winner's settle wait (a thread starved on a loaded CI worker) lands
    after that wait. The settle read itself is pinned by the deterministic interleaving of
    the test above; how often two are told "published" is measured by the bench
    (docs/registry.md), not asserted here."""
    for round_ in range(2):
        version = f"4.0.{round_}"
        plugins = [make_plugin(tmp_path, "racers", "p", version, body=f"{round_}-{i}") for i in range(8)]
        same = make_plugin(tmp_path, "racers", "p", version, body=f"{round_}-0")  # the same files as publisher 0
        plugins.append(same)
        outcomes = race_publishers(oci_registry.url, plugins)
        final = OciRegistry(oci_registry.url).get("racers", "p", version).tree_digest
        told_published = {plugins[i][1].tree_digest for i, o in enumerate(outcomes) if not isinstance(o, Exception)}
        assert final in told_published, outcomes  # the tag holder heard "published"
        for i, outcome in enumerate(outcomes):
            assert outcome is not None
            if isinstance(outcome, Exception):
                assert plugins[i][1].tree_digest in str(outcome)  # and the digest it found, maybe a later loser's
