"""Keys, DSSE envelopes over in-toto statements, trust, and what verification refuses."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from starforge.errors import SignatureError, UsageError
from starforge.registry.directory import DirectoryRegistry
from starforge.registry.publish import publish_plugin
from starforge.registry.store import verify_published
from starforge.signatures.signing import (
    PAYLOAD_TYPE,
    generate_key,
    load_private_key,
    load_trust,
    pae,
    sign_statement,
    trust_add,
    trust_list,
    verify_envelope,
)


@pytest.fixture(autouse=True)
def forge_home(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _plugin(root: Path, name="opsd-patch", version="1.0.0", body="") -> Path:
    module = name.replace("-", "_")
    root.mkdir(parents=True)
    (root / "plugin.yaml").write_text(
        f"schema: forge/plugin/v1\nname: {name}\nversion: '{version}'\nkind: algorithm\nentrypoint: {module}:install\n"
    )
    (root / f"{module}.py").write_text(f"def install(params):\n    return None\n{body}")
    return root


@pytest.fixture
def world(tmp_path):
    """alice's key (trusted for alice), bob's key (trusted for bob), mallory's key (trusted for nobody)."""
    keys = {who: generate_key(tmp_path / "keys" / f"{who}.key") for who in ("alice", "bob", "mallory")}
    trust_add("alice", keys["alice"].public)
    trust_add("bob", keys["bob"].public)
    reg = DirectoryRegistry(tmp_path / "reg")

    def publish(owner="alice", name="opsd-patch", version="1.0.0", key="alice", body=""):
        src = _plugin(tmp_path / "src" / f"{owner}-{name}-{version}-{key}", name, version, body)
        return publish_plugin(src, reg, owner, sign_key=keys[key].private if key else None).version

    return keys, reg, publish


def _sig_file(reg: DirectoryRegistry, info) -> Path:
    return reg.root / "plugins" / info.owner / info.name / f"{info.version}.dsse.json"


# -- keys -----------------------------------------------------------------------------------

def test_generate_key_writes_a_private_0600_key_and_its_public_key(tmp_path):
    from cryptography.hazmat.primitives import serialization

    pair = generate_key(tmp_path / "k" / "default.key")
    assert stat.S_IMODE(os.stat(pair.private).st_mode) == 0o600
    assert pair.public == tmp_path / "k" / "default.pub"
    pub = serialization.load_pem_public_key(pair.public.read_bytes())
    raw = pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert len(raw) == 32 and pair.key_id == hashlib.sha256(raw).hexdigest()
    before = pair.private.read_bytes()
    with pytest.raises(UsageError, match="already exists"):
        generate_key(pair.private)
    assert pair.private.read_bytes() == before


def test_a_passphrase_protected_key_needs_its_passphrase(tmp_path):
    pair = generate_key(tmp_path / "p.key", passphrase="correct horse")
    assert b"ENCRYPTED PRIVATE KEY" in pair.private.read_bytes()
    with pytest.raises(SignatureError, match="is encrypted"):
        load_private_key(pair.private)
    with pytest.raises(SignatureError, match="wrong passphrase"):
        load_private_key(pair.private, "battery staple")
    assert load_private_key(pair.private, "correct horse") is not None


# -- envelopes ------------------------------------------------------------------------------

def test_pae_matches_the_dsse_specification_example():
    assert pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_envelope_holds_an_in_toto_statement_signed_over_pae(tmp_path):
    from cryptography.hazmat.primitives import serialization

    pair = generate_key(tmp_path / "a.key")
    tree = "sf1:" + "ab" * 32
    artifact = "sha256:" + "cd" * 32
    env = json.loads(sign_statement(pair.private, owner="alice", name="opsd-patch", version="1.2.0",
                                    tree_digest=tree, artifact_digest=artifact))
    assert env["payloadType"] == "application/vnd.in-toto+json" == PAYLOAD_TYPE
    payload = base64.b64decode(env["payload"])
    statement = json.loads(payload)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    # the plugin by its tree digest, then the archive the registry serves by its sha256 (what cosign checks)
    assert statement["subject"] == [{"name": "alice/opsd-patch@1.2.0", "digest": {"sf1": "ab" * 32}},
                                    {"name": "alice-opsd-patch-1.2.0.tar.gz", "digest": {"sha256": "cd" * 32}}]
    assert statement["predicateType"] == "https://starforge.dev/publish/v1"
    assert statement["predicate"]["artifact_digest"] == artifact
    (sig,) = env["signatures"]
    assert sig["keyid"] == pair.key_id
    pub = serialization.load_pem_public_key(pair.public.read_bytes())
    message = b"DSSEv1 28 application/vnd.in-toto+json %d " % len(payload) + payload
    pub.verify(base64.b64decode(sig["sig"]), message)  # raises if the signature is not over PAE


# -- verification ---------------------------------------------------------------------------

def test_signed_publish_by_a_trusted_key_verifies(world):
    keys, reg, publish = world
    info = publish()
    assert verify_published(reg, info, load_trust()) == "verified"
    kid = verify_envelope(reg.signature(info), owner="alice", name="opsd-patch", version="1.0", tree_digest=info.tree_digest,
                          trust=load_trust())
    assert kid == keys["alice"].key_id


def test_reserializing_the_envelope_does_not_break_it(world):
    _, reg, publish = world
    info = publish()
    compact = json.dumps(json.loads(reg.signature(info)), separators=(",", ":")).encode()
    _sig_file(reg, info).write_bytes(compact)
    assert verify_published(reg, info, load_trust()) == "verified"


def test_a_signature_moved_onto_another_version_is_refused(world):
    _, reg, publish = world
    v1 = publish(version="1.0.0")
    v2 = publish(version="1.1.0", body="X = 2\n")
    _sig_file(reg, v2).write_bytes(reg.signature(v1))
    with pytest.raises(SignatureError) as err:
        verify_published(reg, v2, load_trust())
    assert err.value.message.startswith("signature is for alice/opsd-patch@1.0.0, not alice/opsd-patch@1.1.0")


def test_a_signature_moved_onto_another_name_is_refused(world):
    _, reg, publish = world
    real = publish(name="opsd-patch")
    other = publish(name="reward-clip")
    _sig_file(reg, other).write_bytes(reg.signature(real))
    with pytest.raises(SignatureError, match="signature is for alice/opsd-patch@1.0.0, not alice/reward-clip@1.0.0"):
        verify_published(reg, other, load_trust())


def test_a_key_outside_the_trust_file_is_refused(world):
    keys, reg, publish = world
    info = publish(key="mallory")
    with pytest.raises(SignatureError) as err:
        verify_published(reg, info, load_trust())
    assert f"signed by key {keys['mallory'].key_id}, which is not in the trust file" in err.value.message
    assert err.value.hint == "if you trust it: forge trust add alice PUBKEY.pub"


def test_a_key_trusted_only_for_another_owner_is_refused(world):
    keys, reg, publish = world
    info = publish(owner="alice", key="bob")
    with pytest.raises(SignatureError) as err:
        verify_published(reg, info, load_trust())
    assert err.value.message == (f"alice/opsd-patch@1.0.0 is signed by key {keys['bob'].key_id}, which is trusted for "
                                 "owner bob, not for owner alice")  # whose key it is
    assert keys["alice"].key_id in err.value.hint


def test_a_tampered_statement_is_refused(world):
    _, reg, publish = world
    info = publish()
    env = json.loads(reg.signature(info))
    statement = json.loads(base64.b64decode(env["payload"]))
    statement["predicate"]["artifact_digest"] = "sha256:" + "0" * 64
    env["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    _sig_file(reg, info).write_text(json.dumps(env))
    with pytest.raises(SignatureError, match="does not verify .*altered"):
        verify_published(reg, info, load_trust())


def test_a_statement_signed_for_other_content_is_refused(world, tmp_path):
    keys, reg, publish = world
    info = publish()
    wrong = sign_statement(keys["alice"].private, owner="alice", name="opsd-patch", version="1.0.0",
                           tree_digest="sf1:" + "1" * 64, artifact_digest=info.artifact_digest)
    _sig_file(reg, info).write_bytes(wrong)
    with pytest.raises(SignatureError, match=f"is for tree digest sf1:1+, but the registry serves {info.tree_digest}"):
        verify_published(reg, info, load_trust())


def test_a_stripped_signature_is_an_error_for_an_owner_with_trusted_keys(world):
    _, reg, publish = world
    info = publish()
    _sig_file(reg, info).unlink()
    stripped = reg.get("alice", "opsd-patch", "1.0.0")
    with pytest.raises(SignatureError, match="has no signature, but owner alice has trusted keys"):
        verify_published(reg, stripped, load_trust())


def test_owners_without_trusted_keys_are_unsigned_unless_signatures_are_required(world):
    _, reg, publish = world
    plain = publish(owner="carol", key=None)
    signed = publish(owner="dave", key="mallory")
    trust = load_trust()
    assert verify_published(reg, plain, trust) == "unsigned"
    assert verify_published(reg, signed, trust) == "unverified"
    with pytest.raises(SignatureError, match="signatures are required, but no key is trusted for owner carol"):
        verify_published(reg, plain, trust, require=True)
    with pytest.raises(SignatureError, match="no key is trusted for owner dave"):
        verify_published(reg, signed, trust, require=True)


def test_a_malformed_envelope_is_refused_clearly(world):
    _, reg, publish = world
    info = publish()
    _sig_file(reg, info).write_bytes(b"not json")
    with pytest.raises(SignatureError, match="signature envelope of alice/opsd-patch@1.0.0 is malformed: not JSON"):
        verify_published(reg, info, load_trust())


# -- trust file -----------------------------------------------------------------------------

def test_trust_add_is_idempotent_and_listed(tmp_path, forge_home):
    a = generate_key(tmp_path / "a.key")
    b = generate_key(tmp_path / "b.key")
    assert trust_add("alice", a.public) == a.key_id
    assert trust_add("alice", a.public.read_text()) == a.key_id  # PEM text works too
    trust_add("alice", b.public)
    trust_add("bob", b.public)
    assert trust_list() == sorted(
        [{"owner": "alice", "key_id": a.key_id}, {"owner": "alice", "key_id": b.key_id}, {"owner": "bob", "key_id": b.key_id}],
        key=lambda r: (r["owner"], r["key_id"]),
    )
    doc = json.loads((forge_home / "trust.json").read_text())
    assert doc["schema"] == "forge/trust/v1" and set(doc["owners"]) == {"alice", "bob"}
    assert [n for n in os.listdir(forge_home) if n.endswith(".tmp")] == []


def test_trust_add_refuses_a_private_key_and_a_bad_owner(tmp_path):
    a = generate_key(tmp_path / "a.key")
    with pytest.raises(UsageError, match="that is a private key") as err:
        trust_add("alice", a.private)
    assert err.value.hint == "pass the .pub file written by 'forge key generate'"
    with pytest.raises(UsageError, match="not a valid owner"):
        trust_add("Alice", a.public)
    with pytest.raises(UsageError, match="no public key file"):
        trust_add("alice", tmp_path / "missing.pub")
    assert trust_list() == []


def test_importing_signing_costs_no_cryptography():
    import subprocess
    import sys

    code = "import sys, starforge.signatures.signing; print(sorted(m for m in sys.modules if m.startswith('cryptography')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_ecdsa_signatures_are_written_low_s_and_the_high_s_twin_still_verifies(tmp_path):
    """ECDSA is malleable: ``(r, n - s)`` verifies whenever ``(r, s)`` does. forge writes only
    the low-S form (half of the P-256 signatures it made were high-S), and keeps accepting
    both, since the envelopes published before are about half high-S."""
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

    from starforge.signatures.model_signature import signature_bundle

    P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551  # n of the P-256 group (SEC 2)
    pair = generate_key(tmp_path / "ec.key", key_type="ecdsa-p256")
    trust_add("alice", pair.public)
    tree, archive = "sf1:" + "ab" * 32, "sha256:" + "cd" * 32
    facts = dict(owner="alice", name="opsd-patch", version="1.0.0", tree_digest=tree)
    key = load_private_key(pair.private)

    def s_of(doc: dict) -> tuple:
        return decode_dss_signature(base64.b64decode(doc["signatures"][0]["sig"]))

    for _ in range(40):
        envelope = json.loads(sign_statement(pair.private, artifact_digest=archive, **facts))
        bundle = json.loads(signature_bundle(key, "opsd-patch", {"a.py": "00" * 32}))["dsseEnvelope"]
        assert s_of(envelope)[1] <= P256_ORDER // 2 and s_of(bundle)[1] <= P256_ORDER // 2
    r, s = s_of(envelope)
    twin = {**envelope, "signatures": [{**envelope["signatures"][0],
                                         "sig": base64.b64encode(encode_dss_signature(r, P256_ORDER - s)).decode()}]}
    for doc in (envelope, twin):
        assert verify_envelope(json.dumps(doc).encode(), trust=load_trust(), artifact_digest=archive, **facts) == pair.key_id
