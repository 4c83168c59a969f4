"""forge's signatures checked by tools a security team already trusts, offline and without forge.

Every signature is also a Sigstore bundle v0.3 (public-key hint + forge's DSSE envelope),
stored beside the envelope (an OCI referrer of artifact type
``application/vnd.dev.sigstore.bundle.v0.3+json``); ``forge plugin pull --export`` writes the
archive the registry serves, the bundle and the signer's public key; sigstore-js (pinned in
tests/sigstore_js/package-lock.json, installed by .ci/setup) verifies it, and the statement's
archive subject is the archive's sha256 (the ``sha256sum`` step). With an ECDSA P-256 key,
``forge plugin sign --model-signature`` writes a signature OpenSSF model-signing accepts.
Signing that cannot be undone is checked first; a version can be signed after publishing.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import httpx
import pytest
from support.racing import all_at_once
from support.registry_world import OWNER, User, write_plugin

ROOT = Path(__file__).resolve().parents[2]
SIGSTORE_JS = ROOT / ".venv-sigstore-js" / "node_modules"
MODEL_SIGNING = ROOT / ".venv-model-signing" / "bin" / "model_signing"
NAME, VERSION = "opsd-patch", "1.0.0"
REF = f"{OWNER}/{NAME}@{VERSION}"
ARCHIVE = f"{OWNER}-{NAME}-{VERSION}.tar.gz"
BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


def _oci(request, tmp_path: Path) -> str:
    server = request.getfixturevalue("oci_registry")
    return f"oci://127.0.0.1:{server.port}/sg-{tmp_path.name.replace('_', '-').lower()[-40:]}"


def sigstore_js(bundle: Path, key: Path) -> subprocess.CompletedProcess:
    if not (SIGSTORE_JS / "@sigstore" / "verify").is_dir() or shutil.which("node") is None:
        pytest.skip("sigstore-js is not installed (bash .ci/setup installs it with npm ci)")
    return subprocess.run(["node", str(ROOT / "tests" / "sigstore_js" / "verify.js"), str(bundle), str(key)],
                          env={**os.environ, "NODE_PATH": str(SIGSTORE_JS)}, capture_output=True, text=True, timeout=60)


def _key_id(user: User, name: str) -> str:
    return next(k["key_id"] for k in json.loads(user.forge("key", "list", "--json").stdout) if k["name"] == name)


@pytest.mark.oci  # a real registry: left out of --quick
@pytest.mark.parametrize("key_type", ["ed25519", "ecdsa-p256"])
def test_sigstore_js_verifies_what_forge_exports_and_the_subject_names_the_served_archive(key_type, request, tmp_path):
    registry = _oci(request, tmp_path)
    user = User(tmp_path / "user")
    user.forge("key", "generate", "--name", "release", "--type", key_type)
    user.forge("key", "generate", "--name", "other", "--type", key_type)
    user.forge("trust", "add", OWNER, user.home / "keys" / "release.pub")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry, "--sign",
               "--key", user.home / "keys" / "release.key")

    out = tmp_path / "export"
    shown = json.loads(user.forge("plugin", "pull", REF, "--registry", registry, "--export", out, "--json").stdout)
    kid = _key_id(user, "release")
    assert shown["signature"]["status"] == "verified" and shown["directory"] is None
    archive, bundle, key = out / ARCHIVE, out / f"{ARCHIVE}.sigstore.json", out / f"{kid}.pem"
    assert sorted(p.name for p in out.iterdir()) == sorted([archive.name, bundle.name, key.name])
    assert "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest() == shown["artifact_digest"]

    # sigstore-js: the signature, offline, with the signer's public key only
    ok = sigstore_js(bundle, key)
    assert ok.returncode == 0 and ok.stdout.startswith("verified"), ok.stdout + ok.stderr
    other = tmp_path / "other.pem"
    other.write_text(user.forge("key", "export", "other").stdout)
    refused = sigstore_js(bundle, other)
    assert refused.returncode == 1 and "not verified" in refused.stderr

    # the subject check, a step of its own: the statement names the archive's sha256
    doc = json.loads(bundle.read_text())
    assert doc["mediaType"] == BUNDLE_TYPE and doc["verificationMaterial"]["publicKey"]["hint"] == kid
    statement = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    subjects = {s["name"]: s["digest"] for s in statement["subject"]}
    assert subjects[ARCHIVE] == {"sha256": hashlib.sha256(archive.read_bytes()).hexdigest()}
    changed = archive.read_bytes() + b"\0"
    assert hashlib.sha256(changed).hexdigest() != subjects[ARCHIVE]["sha256"]

    # the registry lists the bundle as a referrer of the plugin manifest, with cosign's artifact type
    server = request.getfixturevalue("oci_registry")
    repo = registry.split("/", 3)[3] + f"/{OWNER}/{NAME}"
    manifest = httpx.get(f"{server.http}/v2/{repo}/manifests/{VERSION}",
                         headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    subject = "sha256:" + hashlib.sha256(manifest.content).hexdigest()
    index = httpx.get(f"{server.http}/v2/{repo}/manifests/sha256-{subject[7:]}",
                      headers={"Accept": "application/vnd.oci.image.index.v1+json"}).json()
    [desc] = [d for d in index["manifests"] if d["artifactType"] == BUNDLE_TYPE]
    referrer = httpx.get(f"{server.http}/v2/{repo}/manifests/{desc['digest']}",
                         headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
    assert referrer["subject"]["digest"] == subject and referrer["artifactType"] == BUNDLE_TYPE
    assert referrer["annotations"]["dev.sigstore.bundle.predicateType"] == "https://starforge.dev/publish/v1"
    [layer] = referrer["layers"]
    assert layer["mediaType"] == BUNDLE_TYPE
    assert httpx.get(f"{server.http}/v2/{repo}/blobs/{layer['digest']}").content == bundle.read_bytes()


def test_key_ids_ed25519_unchanged_and_ecdsa_is_the_sha256_of_its_der_public_key(tmp_path):
    from cryptography.hazmat.primitives import serialization

    user = User(tmp_path / "user")
    ed = json.loads(user.forge("key", "generate", "--json").stdout)
    ec = json.loads(user.forge("key", "generate", "--name", "ec", "--type", "ecdsa-p256", "--json").stdout)
    ed_key = serialization.load_pem_public_key(Path(ed["public"]).read_bytes())
    ec_key = serialization.load_pem_public_key(Path(ec["public"]).read_bytes())
    raw = ed_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    der = ec_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert ed["key_id"] == hashlib.sha256(raw).hexdigest() and ed["type"] == "ed25519"
    assert ec["key_id"] == hashlib.sha256(der).hexdigest() and ec["type"] == "ecdsa-p256"
    assert user.forge("key", "export", "ec").stdout.encode() == Path(ec["public"]).read_bytes()
    listed = {r["name"]: (r["key_id"], r["type"]) for r in json.loads(user.forge("key", "list", "--json").stdout)}
    assert listed == {"default": (ed["key_id"], "ed25519"), "ec": (ec["key_id"], "ecdsa-p256")}


def test_model_signing_verifies_a_p256_signature_over_the_pulled_plugin_and_refuses_a_changed_file(tmp_path):
    if not MODEL_SIGNING.exists():
        pytest.skip("model-signing is not installed (bash .ci/setup makes .venv-model-signing)")
    registry = str(tmp_path / "registry")
    user = User(tmp_path / "user")
    user.forge("key", "generate", "--name", "ec", "--type", "ecdsa-p256")
    user.forge("key", "generate")
    src = write_plugin(tmp_path / "src")
    (src / "data").mkdir()
    (src / "data" / "table.txt").write_text("1 2 3\n")
    user.forge("plugin", "publish", src, "--registry", registry, "--sign", "--key", user.home / "keys" / "ec.key")
    sig = tmp_path / "opsd-patch.sig"
    ed = user.forge("plugin", "sign", REF, "--from", src, "--registry", registry, "--model-signature", sig, ok=False)
    assert ed.returncode == 2 and "model-signing accepts only ECDSA keys" in ed.stderr and not sig.exists()
    out = user.forge("plugin", "sign", REF, "--from", src, "--registry", registry, "--key", user.home / "keys" / "ec.key",
                     "--model-signature", sig)
    assert "already signed with your key" in out.stdout and f"model-signing signature: {sig}" in out.stdout
    pulled = tmp_path / "pulled"
    user.forge("plugin", "pull", REF, "--registry", registry, "-o", pulled)

    def verify():
        return subprocess.run([str(MODEL_SIGNING), "verify", "key", str(pulled), "--public_key",
                               str(user.home / "keys" / "ec.pub"), "--signature", str(sig)],
                              capture_output=True, text=True, timeout=300)

    ok = verify()
    assert ok.returncode == 0 and "Verification succeeded" in ok.stdout + ok.stderr, ok.stdout + ok.stderr
    (pulled / "data" / "table.txt").write_text("1 2 4\n")
    bad = verify()
    assert bad.returncode != 0 and "Hash mismatch for 'data/table.txt'" in bad.stdout + bad.stderr


def test_an_archive_other_than_the_signed_one_and_a_bundle_other_than_the_envelope_are_refused(tmp_path):
    registry = tmp_path / "registry"
    user = User(tmp_path / "user")
    user.forge("key", "generate")
    user.forge("key", "generate", "--name", "second")
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry, "--sign")
    plugin_dir = registry / "plugins" / OWNER / NAME
    record = json.loads((plugin_dir / f"{VERSION}.json").read_text())

    # the same files in other archive bytes, put under the version by whoever writes the registry
    blob = registry / "blobs" / "sha256" / record["artifact_digest"][7:]
    repacked = gzip.compress(gzip.decompress(blob.read_bytes()), compresslevel=1, mtime=1)
    assert repacked != blob.read_bytes()
    other_hex = hashlib.sha256(repacked).hexdigest()
    (registry / "blobs" / "sha256" / other_hex).write_bytes(repacked)
    swapped = {**record, "artifact_digest": f"sha256:{other_hex}", "size": len(repacked)}
    (plugin_dir / f"{VERSION}.json").write_text(json.dumps(swapped))
    refused = user.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "a", ok=False)
    assert refused.returncode == 9, refused.stderr
    assert f"is for archive {record['artifact_digest']}, but the registry serves sha256:{other_hex}" in refused.stderr
    (plugin_dir / f"{VERSION}.json").write_text(json.dumps(record))
    user.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "b")

    # a stored bundle that carries no stored envelope's signature: one record changed, not the other
    from starforge.registry.directory import DirectoryRegistry
    from starforge.signatures.signing import sign_statement
    from starforge.signatures.sigstore_bundle import bundle_of

    info = DirectoryRegistry(registry).get(OWNER, NAME, VERSION)
    foreign = sign_statement(user.home / "keys" / "second.key", owner=OWNER, name=NAME, version=VERSION,
                             tree_digest=info.tree_digest, artifact_digest=info.artifact_digest)
    [stored] = list((plugin_dir / f"{VERSION}.signatures").glob("*.sigstore.json"))
    stored.write_bytes(bundle_of(foreign))
    tampered = user.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "c", ok=False)
    assert tampered.returncode == 6, tampered.stderr
    assert "is tampered: alice/opsd-patch@1.0.0: a stored Sigstore bundle carries a signature" in tampered.stderr
    assert not (tmp_path / "c").exists()


def test_a_stored_bundle_whose_key_hint_names_another_key_is_refused(tmp_path):
    """A bundle is matched to its envelope by payload, signature and key: a registry writer who
    points a bundle's public-key hint at another key (so a tool that picks the key by hint
    reads the wrong one) has tampered with the registry."""
    registry = tmp_path / "registry"
    user = User(tmp_path / "user")
    user.forge("key", "generate")
    user.forge("key", "generate", "--name", "second")
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    user.forge("trust", "add", OWNER, user.home / "keys" / "second.pub")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry, "--sign")
    [stored] = list((registry / "plugins" / OWNER / NAME / f"{VERSION}.signatures").glob("*.sigstore.json"))
    honest = stored.read_bytes()
    user.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "a")
    other = _key_id(user, "second")
    for inner in (False, True):  # the hint alone, then the hint and the envelope's key id inside the bundle
        doc = json.loads(honest)
        doc["verificationMaterial"]["publicKey"]["hint"] = other
        if inner:
            doc["dsseEnvelope"]["signatures"][0]["keyid"] = other
        stored.write_text(json.dumps(doc))
        refused = user.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / f"b{inner}", ok=False)
        assert refused.returncode == 6, refused.stderr
        assert f"is tampered: {REF}: a stored Sigstore bundle's key hint" in refused.stderr
        assert other in refused.stderr and not (tmp_path / f"b{inner}").exists()
    stored.write_bytes(honest)
    user.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "c")


def test_signing_with_an_untrusted_key_is_refused_first_and_a_published_version_can_be_signed_later(tmp_path):
    registry = tmp_path / "registry"
    user = User(tmp_path / "user")
    user.forge("key", "generate", "--name", "right", "--type", "ecdsa-p256")
    user.forge("key", "generate", "--name", "wrong")
    src = write_plugin(tmp_path / "src")

    # a laptop with no key trusted for the owner (CI, a first publish): proceeds, says how to trust it
    ci = user.forge("plugin", "publish", src, "--registry", registry, "--sign", "--key", user.home / "keys" / "wrong.key")
    assert f"consumers trust this signature with: forge trust add {OWNER} {user.home / 'keys' / 'wrong.pub'}" in ci.stderr

    # a consumer trusts the right key: the version signed by the wrong one is refused ...
    user.forge("trust", "add", OWNER, user.home / "keys" / "right.pub")
    assert user.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "a", ok=False).returncode == 9
    # ... signing again with the wrong key is refused before anything happens ...
    again = user.forge("plugin", "sign", REF, "--from", src, "--registry", registry, "--key", user.home / "keys" / "wrong.key",
                       ok=False)
    assert again.returncode == 2
    assert f"key {_key_id(user, 'wrong')} ({user.home / 'keys' / 'wrong.key'}) is not trusted for owner {OWNER}" in again.stderr
    assert f"forge trust add {OWNER} {user.home / 'keys' / 'wrong.pub'}" in again.stderr
    new = write_plugin(tmp_path / "src2", version="1.0.1")
    nothing = user.forge("plugin", "publish", new, "--registry", registry, "--sign", "--key",
                         user.home / "keys" / "wrong.key", ok=False)
    assert nothing.returncode == 2 and not (registry / "plugins" / OWNER / NAME / "1.0.1.json").exists()
    # ... and the right key signs the published version: no version bump
    signed = user.forge("plugin", "sign", REF, "--from", src, "--registry", registry, "--key", user.home / "keys" / "right.key")
    tree = user.forge("plugin", "digest", src).stdout.strip()
    assert signed.stdout.strip() == f"signed with key {_key_id(user, 'right')} ({REF} {tree})"
    user.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "b")

    # ECDSA signatures are randomized: signing again with the same key adds nothing
    from starforge.registry.directory import DirectoryRegistry
    from starforge.registry.store import PluginStore

    reg = DirectoryRegistry(registry)
    before = PluginStore(reg).envelopes(reg.get(OWNER, NAME, VERSION))
    assert len(before) == 2
    same = user.forge("plugin", "sign", REF, "--from", src, "--registry", registry, "--key", user.home / "keys" / "right.key")
    assert "already signed with your key" in same.stdout
    assert PluginStore(reg).envelopes(reg.get(OWNER, NAME, VERSION)) == before


@pytest.mark.oci  # a real registry: left out of --quick
def test_racing_signers_on_a_registry_without_the_referrers_api_all_stay_listed(request, tmp_path):
    from starforge.registry.oci import OciRegistry
    from starforge.registry.publish import sign_published
    from starforge.registry.store import PluginStore
    from starforge.signatures.signing import generate_key

    registry = _oci(request, tmp_path)
    user = User(tmp_path / "user")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry)
    keys = [generate_key(tmp_path / f"k{i}.key", key_type="ecdsa-p256" if i % 2 else "ed25519") for i in range(3)]

    def run(key, go):
        with OciRegistry(registry) as reg:
            info = reg.get(OWNER, NAME, VERSION)
            go()
            assert sign_published(reg, info, key.private, held=info.tree_digest, source="test") == (True, False)

    assert all_at_once(run, keys) == []
    with OciRegistry(registry) as reg:
        info = reg.get(OWNER, NAME, VERSION)
        signers = sorted(json.loads(e)["signatures"][0]["keyid"] for e in PluginStore(reg).envelopes(info))
        assert signers == sorted(k.key_id for k in keys)  # nobody's signature was dropped
        assert len(reg.sigstore_bundles(info)) == len(keys)


def test_a_trusted_key_of_a_type_this_release_cannot_use_is_skipped_and_old_statements_verify(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    from starforge.cluster.dsse import PAYLOAD_TYPE, Trust, pae, verify_envelope
    from starforge.signatures.signing import generate_key, key_id, load_private_key

    pair = generate_key(tmp_path / "a.key")
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    trust = Trust(owners={OWNER: {"f" * 64: p384, pair.key_id: pair.public.read_text()}})
    tree = "sf1:" + "ab" * 32
    # a statement as releases before the archive subject wrote it: one subject
    old = json.dumps({"_type": "https://in-toto.io/Statement/v1",
                      "subject": [{"name": REF, "digest": {"sf1": "ab" * 32}}],
                      "predicateType": "https://starforge.dev/publish/v1",
                      "predicate": {"artifact_digest": "sha256:" + "cd" * 32, "tree_digest": tree}},
                     sort_keys=True, separators=(",", ":")).encode()
    key = load_private_key(pair.private)
    envelope = json.dumps({"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(old).decode(),
                           "signatures": [{"keyid": "", "sig": base64.b64encode(key.sign(pae(PAYLOAD_TYPE, old))).decode()}]})
    got = verify_envelope(envelope.encode(), owner=OWNER, name=NAME, version=VERSION, tree_digest=tree, trust=trust,
                          artifact_digest="sha256:" + "ee" * 32)
    assert got == key_id(key.public_key())


@pytest.mark.oci  # a real registry: left out of --quick
def test_an_air_gap_bundle_and_a_copy_carry_every_keys_signature(request, tmp_path):
    from support.registry_world import write_experiment

    from starforge.registry.factory import open_registry
    from starforge.registry.store import PluginStore

    registry = str(tmp_path / "registry")
    user = User(tmp_path / "user")
    user.forge("key", "generate")
    user.forge("key", "generate", "--name", "release", "--type", "ecdsa-p256")
    user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry, "--sign")
    user.forge("trust", "add", OWNER, user.home / "keys" / "release.pub")
    user.forge("plugin", "sign", REF, "--from", tmp_path / "src", "--registry", registry, "--key",
               user.home / "keys" / "release.key")
    exp = write_experiment(tmp_path / "exp", registry)
    user.forge("lock", exp)
    user.forge("bundle", "create", exp, "-o", tmp_path / "b.tar")
    far = _oci(request, tmp_path)
    user.forge("bundle", "push", tmp_path / "b.tar", "--registry", far)
    mirror = str(tmp_path / "mirror")
    user.forge("plugin", "copy", f"{OWNER}/{NAME}", "--from", far, "--to", mirror)

    def signers(url):
        reg = open_registry(url)
        return sorted(json.loads(e)["signatures"][0]["keyid"] for e in PluginStore(reg).envelopes(reg.get(OWNER, NAME, VERSION)))

    assert signers(registry) == signers(far) == signers(mirror) == sorted([_key_id(user, "default"), _key_id(user, "release")])


class ImmutableTags:
    """A pass-through proxy to the real registry that refuses to overwrite an existing tag, as a
    registry with tag immutability (Harbor, ECR) answers: 400 TAG_INVALID."""

    def __init__(self, upstream: str) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        client = httpx.Client(base_url=upstream, timeout=60)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?")[0]
                if self.command == "PUT" and "/manifests/" in path and not path.rsplit("/", 1)[1].startswith("sha256:"):
                    if client.head(path, headers={"Accept": "application/vnd.oci.image.index.v1+json, "
                                                  "application/vnd.oci.image.manifest.v1+json"}).status_code == 200:
                        data = json.dumps({"errors": [{"code": "TAG_INVALID",
                                                       "message": "tag is immutable and already exists"}]}).encode()
                        self.send_response(400)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("content-length", "connection")}
                r = client.request(self.command, self.path, content=body, headers=headers)
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(r.content)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.client = client

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.client.close()


@pytest.mark.oci  # a real registry: left out of --quick
def test_a_registry_with_immutable_tags_refuses_a_second_signature_with_a_clear_error(request, tmp_path):
    server = request.getfixturevalue("oci_registry")
    proxy = ImmutableTags(server.http)
    try:
        registry = f"oci://127.0.0.1:{proxy.port}/imm-{tmp_path.name.replace('_', '-').lower()[-36:]}"
        user = User(tmp_path / "user")
        user.forge("key", "generate")
        user.forge("key", "generate", "--name", "release")
        user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry, "--sign")
        refused = user.forge("plugin", "sign", REF, "--from", tmp_path / "src", "--registry", registry, "--key",
                             user.home / "keys" / "release.key", ok=False)
        assert refused.returncode != 0
        first = refused.stderr.splitlines()[0]
        assert first.startswith("error: ") and "the registry refused to update the referrers tag sha256-" in first, first
        assert "a registry with immutable tags cannot add a second signature to a version this way" in first
        assert "exempt tags matching sha256-* from tag immutability" in refused.stderr
        # the first signature still verifies
        user.forge("trust", "add", OWNER, user.home / "keys" / "default.pub")
        user.forge("plugin", "pull", REF, "--registry", registry, "-o", tmp_path / "out")
    finally:
        proxy.close()


def test_a_signature_that_was_not_attached_is_an_error(tmp_path):
    """The registry no longer serves the version as it was read (here: its record now names
    another tree): nothing is attached, and the command says so with exit 9, never 0."""
    from starforge.cli.plugin_publish import report_signature
    from starforge.errors import SignatureError
    from starforge.registry.directory import DirectoryRegistry
    from starforge.registry.publish import sign_published
    from starforge.signatures.signing import generate_key

    registry = tmp_path / "registry"
    user = User(tmp_path / "user")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", registry)
    reg = DirectoryRegistry(registry)
    info = reg.get(OWNER, NAME, VERSION)
    path = registry / "plugins" / OWNER / NAME / f"{VERSION}.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "tree_digest": "sf1:" + "0" * 64}))
    key = generate_key(tmp_path / "k.key")
    assert sign_published(reg, info, key.private, held=info.tree_digest, source="test") == (False, False)
    with pytest.raises(SignatureError, match=f"{REF}: your signature \\(key {key.key_id}\\) was not attached") as err:
        report_signature(info, False, False, key.private, None, listed=True)
    assert err.value.exit_code == 9
