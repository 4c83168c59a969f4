"""Sigstore bundles (v0.3) of forge's signatures, and putting a verifiable plugin on disk.

Every DSSE envelope forge makes is also a Sigstore bundle: the bundle's ``dsseEnvelope`` is
the envelope itself (payload type, payload, one signature) and its ``verificationMaterial``
is a ``publicKey`` hint (the key id), with no certificate and no transparency-log entry. So
tools a security team already trusts verify forge's signatures offline, with the signer's
public key and no forge installed: ``cosign verify-blob-attestation --key KEY.pem --bundle
B --insecure-ignore-tlog --type https://starforge.dev/publish/v1 ARCHIVE`` (which also
checks the statement's archive subject against the file) and sigstore-js (the signature
only: the archive's ``sha256sum`` is a separate comparison).

A bundle is stored beside its envelope (an OCI referrer of its own artifact type, a file
beside the envelope in a directory registry); the two must carry the same signature over
the same bytes, and the bundle's key hint must name the key that envelope's signature
names: a stored bundle that differs from every envelope is tampering
(:func:`check_bundles`). The envelope stays the record forge verifies and locks pin.

Standard library only at import. Laptop side.

>>> json.loads(bundle_of(json.dumps({"payloadType": "t", "payload": "e30=",
...     "signatures": [{"keyid": "k1", "sig": "c2ln"}]}).encode()))["verificationMaterial"]
{'publicKey': {'hint': 'k1'}, 'tlogEntries': []}
"""

from __future__ import annotations

import json

from ..cluster.dsse import PREDICATE_TYPE
from ..cluster.jsonload import loads as load_json
from ..errors import SignatureError, TamperedError

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
BUNDLE_SUFFIX = ".sigstore.json"
__all__ = ["BUNDLE_MEDIA_TYPE", "PREDICATE_TYPE", "bundle_of", "check_bundles"]


def _signatures(doc) -> list:
    sigs = doc.get("signatures") if isinstance(doc, dict) else None
    if not isinstance(sigs, list):
        return []
    return [s for s in sigs if isinstance(s, dict) and isinstance(s.get("sig"), str)]


def bundle_of(envelope: bytes, key_id: str | None = None) -> bytes:
    """The Sigstore bundle v0.3 (JSON bytes) of *envelope*'s signature by *key_id* (default:
    its first signature). A bundle holds exactly one signature; the same envelope always
    gives the same bytes."""
    try:
        doc = load_json(envelope)
    except (ValueError, TypeError):
        raise SignatureError("the signature envelope is not JSON") from None
    sigs = _signatures(doc)
    if key_id is not None:
        sigs = [s for s in sigs if s.get("keyid") == key_id]
    if not sigs or not isinstance(doc.get("payload"), str) or not isinstance(doc.get("payloadType"), str):
        raise SignatureError("the signature envelope has no signature" + (f" by key {key_id}" if key_id else ""))
    sig = sigs[0]
    kid = sig.get("keyid") if isinstance(sig.get("keyid"), str) else ""
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": kid}, "tlogEntries": []},
        "dsseEnvelope": {"payload": doc["payload"], "payloadType": doc["payloadType"],
                         "signatures": [{"keyid": kid, "sig": sig["sig"]}]},
    }
    return (json.dumps(bundle, indent=2, sort_keys=True) + "\n").encode("utf-8")


def signatures_of(envelope: bytes) -> set:
    """``{(payload type, payload, sig, key id)}`` of an envelope (empty when unreadable; key id ``""`` when none)."""
    try:
        doc = load_json(envelope)
    except (ValueError, TypeError):
        return set()
    if not isinstance(doc, dict):
        return set()
    return {(doc.get("payloadType"), doc.get("payload"), s["sig"], _key_id(s)) for s in _signatures(doc)}


def _key_id(sig: dict) -> str:
    return sig["keyid"] if isinstance(sig.get("keyid"), str) else ""


def bundle_signatures(bundle: bytes) -> set:
    """``{(payload type, payload, sig, key hint)}`` of a stored bundle: its signatures, each
    under the key its ``verificationMaterial.publicKey.hint`` names (what a tool that picks
    the key by hint reads); :class:`SignatureError` when it is not a v0.3 bundle with a key
    hint, or when its envelope's own key id names another key."""
    try:
        doc = load_json(bundle)
    except (ValueError, TypeError):
        raise SignatureError("a stored Sigstore bundle is not JSON") from None
    if not isinstance(doc, dict) or doc.get("mediaType") != BUNDLE_MEDIA_TYPE or not isinstance(doc.get("dsseEnvelope"), dict):
        raise SignatureError(f"a stored Sigstore bundle is not a {BUNDLE_MEDIA_TYPE} bundle with a DSSE envelope")
    material = doc.get("verificationMaterial")
    key = material.get("publicKey") if isinstance(material, dict) else None
    hint = key.get("hint") if isinstance(key, dict) else None
    if not isinstance(hint, str):
        raise SignatureError("a stored Sigstore bundle has no public-key hint")
    carried = signatures_of(json.dumps(doc["dsseEnvelope"]).encode("utf-8"))
    for *_, kid in carried:
        if kid not in ("", hint):
            raise SignatureError(f"a stored Sigstore bundle's key hint {hint} is not the key {kid} its signature names")
    return {(*rest, hint) for *rest, _ in carried}


def check_bundles(ref: str, envelopes: list, bundles: list, where: str) -> None:
    """Every stored bundle must carry a signature of a stored envelope, over the same bytes:
    one that does not is tampering (:class:`TamperedError`) — someone changed one record and
    not the other."""
    known: set = set()
    for envelope in envelopes:
        known |= signatures_of(envelope)
    for bundle in bundles:
        try:
            carried = bundle_signatures(bundle)
        except SignatureError as exc:
            raise TamperedError(f"{where} is tampered: {ref}: {exc.message}",
                                hint="do not use this version until the registry is restored; tell its owner") from None
        if carried and {c[:3] for c in carried} <= {k[:3] for k in known} and not carried <= known:
            hints = ", ".join(sorted({c[3] for c in carried}))
            raise TamperedError(
                f"{where} is tampered: {ref}: a stored Sigstore bundle's key hint ({hints}) is not the key the signature "
                "envelope carrying its signature names",
                hint="a tool that picks the key by the hint would be pointed at another key; the bundle and the envelope "
                     "beside it must be the same signature; do not use this version until the registry is restored; "
                     "tell its owner")
        if not carried or not carried <= known:
            raise TamperedError(
                f"{where} is tampered: {ref}: a stored Sigstore bundle carries a signature that none of the version's "
                "signature envelopes carries",
                hint="the bundle and the envelope beside it must be the same signature; do not use this version "
                     "until the registry is restored; tell its owner")
