"""DSSE signature checks and the trust file: what the launcher and the laptop both verify.

A publisher signs an in-toto Statement v1 binding ``owner/name@version`` to the tree
digest, in a DSSE envelope. :func:`verify_envelope` checks, in this order:

1. the signature over the exact bytes (DSSE's pre-authentication encoding), with the keys
   named in the trust file;
2. the statement's subject (owner, name, version, tree digest) against what is expected;
3. that the key which signed is trusted for that owner.

The trust file (``forge/trust/v1``) maps owners to public keys by key id; whether a
package needs a signature at all is :func:`trust_rule`. The laptop's
:mod:`starforge.signatures.signing` (keys, signing, the user's trust file) builds on this module.

Standard library only at import; ``cryptography`` is imported by the functions that check
a signature, so a launch without ``FORGE_TRUST`` never loads it.

>>> pae("application/vnd.in-toto+json", b"{}")
b'DSSEv1 28 application/vnd.in-toto+json 2 {}'
"""

from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass, field
from typing import Iterable

from .errors import SignatureError
from .jsonload import loads as load_json

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://starforge.dev/publish/v1"
TRUST_SCHEMA = "forge/trust/v1"
DIGEST_ALGORITHM = "sf1"  # the subject digest: the tree digest's hex under its own name
ARCHIVE_ALGORITHM = "sha256"  # the second subject (statements since key types were added): the served archive


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: ``DSSEv1 SP len(type) SP type SP len(body) SP body``."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def subject_name(owner: str, name: str, version: str) -> str:
    return f"{owner}/{name}@{version}"


# -- trust --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Trust:
    """Owners and the public keys (by key id, PEM text) trusted for each."""

    owners: dict[str, dict[str, str]] = field(default_factory=dict)  # owner -> {key id: public key PEM}
    path: str | None = None

    def key_ids(self, owner: str) -> list[str]:
        return sorted(self.owners.get(owner, {}))

    def all_keys(self) -> dict:
        """Every known key: key id -> PEM."""
        out: dict = {}
        for keys in self.owners.values():
            out.update(keys)
        return out


def read_trust(path: str | os.PathLike) -> Trust:
    """The trust file at *path*; an absent file trusts nobody.

    Raises :class:`SignatureError` for a file that is not a ``forge/trust/v1`` document
    (not JSON, JSON of another shape, an owner not mapping key ids to keys).
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return Trust(owners={}, path=str(path))
    except (OSError, ValueError) as exc:
        raise SignatureError(f"cannot read trust file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = load_json(text)
    except ValueError as exc:
        raise SignatureError(f"trust file {path} is not valid JSON: {exc}") from None
    owners = data.get("owners") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("schema") != TRUST_SCHEMA or not isinstance(owners, dict):
        raise SignatureError(f"trust file {path} is not a {TRUST_SCHEMA} document")
    clean: dict[str, dict[str, str]] = {}
    for owner, keys in owners.items():
        if not isinstance(keys, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in keys.items()):
            raise SignatureError(f"trust file {path}: owner '{owner}' must map key ids to public keys")
        clean[owner] = dict(keys)
    return Trust(owners=clean, path=str(path))


# -- the trust rule -------------------------------------------------------------------------

VERIFY = "verify"  # check the envelope: it must verify with a key trusted for the owner
UNSIGNED = "unsigned"  # no envelope and none required: the owner has no trusted key
UNVERIFIED = "unverified"  # signed, but no key is trusted for the owner: nothing to check it against
NO_TRUSTED_KEY = "no trusted key"  # refuse: signatures are required, no key is trusted for the owner
MISSING = "missing"  # refuse: the owner has trusted keys and there is no envelope (never a downgrade)


def trust_rule(trusted: Iterable[str], *, signed: bool, require: bool) -> str:
    """What to do with one package's signature: the one rule the laptop and the launcher apply.

    An owner with trusted keys must come with an envelope that verifies (a missing one is
    refused, never a downgrade); *require* extends that to every owner (an owner without
    trusted keys is refused); otherwise there is nothing to check.

    >>> trust_rule([], signed=False, require=False), trust_rule(["k1"], signed=False, require=False)
    ('unsigned', 'missing')
    """
    if not list(trusted):
        if require:
            return NO_TRUSTED_KEY
        return UNVERIFIED if signed else UNSIGNED
    return VERIFY if signed else MISSING


# -- verification -------------------------------------------------------------------------

def load_public_key(pem: bytes | str):
    """An Ed25519 or ECDSA P-256 public key from PEM; :class:`SignatureError` for anything else."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _bytes(pem)
    if b"PRIVATE KEY" in data:
        raise SignatureError("that is a private key; trust and verification take the public key (.pub)")
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        raise SignatureError("not a PEM public key") from None
    if isinstance(key, Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise SignatureError("not an Ed25519 or ECDSA P-256 public key",
                         hint="make keys with 'forge key generate' (--type ecdsa-p256 for ECDSA)")


#: The order n of the P-256 group: an ECDSA signature ``(r, s)`` and its twin ``(r, n - s)`` both verify.
P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def low_s(der: bytes) -> bytes:
    """The low-S form (``s <= n/2``) of the DER ECDSA P-256 signature *der*; itself when it is one.

    Every ECDSA signature forge writes is low-S, as libsecp256k1's are, so forge never
    writes both twins of one signature; :func:`check_signature` accepts both forms (about
    half of the envelopes published before the rule are high-S). Laptop side: signers call it.
    """
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

    r, s = decode_dss_signature(der)
    return der if s <= P256_ORDER // 2 else encode_dss_signature(r, P256_ORDER - s)


def check_signature(key, signature: bytes, message: bytes) -> None:
    """Verify *signature* over *message* with *key* (Ed25519, or ECDSA P-256 with SHA-256, DER
    signature, low-S or high-S); raise ``cryptography.exceptions.InvalidSignature`` when it does not verify."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    if isinstance(key, ec.EllipticCurvePublicKey):
        key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
    else:
        key.verify(signature, message)


def verify_envelope(
    envelope: bytes,
    *,
    owner: str,
    name: str,
    version: str,
    tree_digest: str,
    trust: Trust,
    artifact_digest: str | None = None,
) -> str:
    """Check a DSSE envelope for ``owner/name@version`` with *tree_digest*; return the key id.

    Raises :class:`SignatureError` saying what failed: a malformed envelope, a signature
    that does not verify or was made by an unknown key, a statement for another name,
    version or digest, or a key not trusted for *owner*. With *artifact_digest*
    (``sha256:<hex>``, the archive the registry serves), a statement that names an archive
    (its second subject) must name that one. A trusted key of a type this release cannot
    use is skipped, never a crash.
    """
    from cryptography.exceptions import InvalidSignature

    ref = subject_name(owner, name, version)
    payload_type, payload, signatures = _parse_envelope(envelope, ref)

    # 1. The signature over the exact bytes, with any key the trust file knows.
    known = trust.all_keys()
    message = pae(payload_type, payload)
    good: list = []
    unknown: list = []
    bad: list = []
    for entry in signatures:
        kid = entry["keyid"]
        candidates = [kid] if kid in known else ([] if kid else list(known))
        if not candidates:
            unknown.append(kid)
            continue
        for cand in candidates:
            try:
                check_signature(load_public_key(known[cand]), entry["sig"], message)
            except (InvalidSignature, SignatureError):
                continue  # another key, or a key type this release cannot use
            good.append(cand)
            break
        else:
            bad.append(kid or "(no key id)")
    if not good:
        if bad:
            raise SignatureError(
                f"signature of {ref} does not verify with key {', '.join(bad)}: the signed statement was altered or signed by another key",
                hint="do not use this version; ask the publisher to republish it signed",
            )
        raise SignatureError(
            f"{ref} is signed by key {', '.join(k or '(no key id)' for k in unknown)}, which is not in the trust file",
            hint=f"if you trust it: forge trust add {owner} PUBKEY.pub",
        )

    # 2. The statement names exactly what is being verified.
    if payload_type != PAYLOAD_TYPE:
        raise SignatureError(f"signature of {ref} has payload type '{payload_type}', expected '{PAYLOAD_TYPE}'")
    statement = _parse_statement(payload, ref)
    subject = statement["subject"][0]
    signed_name = subject["name"]
    s_owner, s_name, s_version = split_subject(signed_name)
    if (s_owner, s_name) != (owner, name) or not same_version(s_version, version):
        raise SignatureError(
            f"signature is for {signed_name}, not {ref}: a signature cannot be moved onto another name or version",
            hint="do not use this version; its signature belongs to another plugin or version",
        )
    signed_digest = "sf1:" + str(subject["digest"].get(DIGEST_ALGORITHM, ""))
    if signed_digest != tree_digest:
        raise SignatureError(
            f"signature of {ref} is for tree digest {signed_digest}, but the registry serves {tree_digest}",
            hint="the content under this version is not what its publisher signed",
        )
    _check_archive(statement, ref, artifact_digest)

    # 3. The key is trusted for this owner.
    trusted = set(trust.key_ids(owner))
    for kid in good:
        if kid in trusted:
            return kid
    hint = f"keys trusted for {owner}: {', '.join(sorted(trusted))}" if trusted else f"no key is trusted for {owner}"
    holders = sorted(o for o, keys in trust.owners.items() if good[0] in keys)  # it verified: a key of the trust file
    raise SignatureError(f"{ref} is signed by key {good[0]}, which is trusted for owner {', '.join(holders)}, "
                         f"not for owner {owner}", hint=hint)


def check_statement(envelope: bytes, *, owner: str, name: str, version: str, tree_digest: str,
                    artifact_digest: str | None = None) -> list:
    """Check what can be checked of an envelope without a key: it is a well-formed DSSE
    envelope whose publish statement names ``owner/name@version`` and *tree_digest*. Return
    the key ids it names; raise :class:`SignatureError` otherwise. The signature itself is
    *not* verified (nobody to verify it against)."""
    ref = subject_name(owner, name, version)
    payload_type, payload, signatures = _parse_envelope(envelope, ref)
    if payload_type != PAYLOAD_TYPE:
        raise SignatureError(f"signature of {ref} has payload type '{payload_type}', expected '{PAYLOAD_TYPE}'")
    statement = _parse_statement(payload, ref)
    subject = statement["subject"][0]
    s_owner, s_name, s_version = split_subject(subject["name"])
    if (s_owner, s_name) != (owner, name) or not same_version(s_version, version):
        raise SignatureError(f"signature is for {subject['name']}, not {ref}: a signature cannot be moved onto another "
                             "name or version")
    signed_digest = "sf1:" + str(subject["digest"].get(DIGEST_ALGORITHM, ""))
    if signed_digest != tree_digest:
        raise SignatureError(f"signature of {ref} is for tree digest {signed_digest}, but the registry serves {tree_digest}")
    _check_archive(statement, ref, artifact_digest)
    return [s["keyid"] for s in signatures if s["keyid"]]


def signed_archive(statement: dict) -> str | None:
    """The archive digest (``sha256:<hex>``) a publish statement names as its second subject, or None."""
    subjects = statement.get("subject") or []
    if len(subjects) < 2:
        return None
    return f"{ARCHIVE_ALGORITHM}:{subjects[1]['digest'][ARCHIVE_ALGORITHM]}"


# -- internals ----------------------------------------------------------------------------

def _check_archive(statement: dict, ref: str, artifact_digest: str | None) -> None:
    signed = signed_archive(statement)
    if signed is not None and artifact_digest is not None and signed != artifact_digest:
        raise SignatureError(
            f"signature of {ref} is for archive {signed}, but the registry serves {artifact_digest}",
            hint="the archive under this version is not the one its publisher signed; do not use it",
        )


def _parse_envelope(envelope: bytes, ref: str):
    def malformed(why: str) -> SignatureError:
        return SignatureError(f"signature envelope of {ref} is malformed: {why}")

    try:
        doc = load_json(envelope)
    except (ValueError, TypeError):
        raise malformed("not JSON") from None
    if not isinstance(doc, dict):
        raise malformed("not a JSON object")
    payload_type, payload_b64, sigs = doc.get("payloadType"), doc.get("payload"), doc.get("signatures")
    if not isinstance(payload_type, str) or not isinstance(payload_b64, str):
        raise malformed("payloadType and payload must be strings")
    if not isinstance(sigs, list) or not sigs:
        raise malformed("no signatures")
    try:
        payload = base64.b64decode(payload_b64, validate=True)
    except (binascii.Error, ValueError):
        raise malformed("payload is not base64") from None
    out = []
    for s in sigs:
        if not isinstance(s, dict) or not isinstance(s.get("sig"), str):
            raise malformed("a signature entry has no 'sig'")
        try:
            raw = base64.b64decode(s["sig"], validate=True)
        except (binascii.Error, ValueError):
            raise malformed("a signature is not base64") from None
        kid = s.get("keyid") or ""
        out.append({"keyid": kid if isinstance(kid, str) else "", "sig": raw})
    return payload_type, payload, out


def _parse_statement(payload: bytes, ref: str) -> dict:
    try:
        st = load_json(payload)
    except ValueError:
        raise SignatureError(f"signed statement of {ref} is not JSON") from None
    ok = (
        isinstance(st, dict)
        and st.get("_type") == STATEMENT_TYPE
        and st.get("predicateType") == PREDICATE_TYPE
        and isinstance(st.get("subject"), list)
        and len(st["subject"]) in (1, 2)
        and all(isinstance(s, dict) and isinstance(s.get("name"), str) and isinstance(s.get("digest"), dict)
                for s in st["subject"])
        and (len(st["subject"]) == 1 or _is_archive_digest(st["subject"][1]["digest"]))
    )
    if not ok:
        raise SignatureError(
            f"signed statement of {ref} is not a StarForge publish statement "
            f"({STATEMENT_TYPE} with predicate {PREDICATE_TYPE}, the plugin as its subject and optionally its archive)"
        )
    return st


def _is_archive_digest(digest: dict) -> bool:
    value = digest.get(ARCHIVE_ALGORITHM)
    return (list(digest) == [ARCHIVE_ALGORITHM] and isinstance(value, str) and len(value) == 64
            and all(c in "0123456789abcdef" for c in value))


def split_subject(text: str):
    base, _, version = text.partition("@")
    owner, _, name = base.partition("/")
    return owner, name, version


def same_version(a: str, b: str) -> bool:
    from .requires import packaging_version

    Version, InvalidVersion = packaging_version()
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return False


def _bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value
