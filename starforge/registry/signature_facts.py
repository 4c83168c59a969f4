"""The signature facts a lock records of a version (SPEC §7), read from an envelope.

An entry locked as signed records ``{envelope_digest, key_id}``: the envelope the registry
served and the key it names. These functions only read what an envelope claims (its
digest, the key ids it names, the statement's subject): whether an envelope satisfies the
facts, and everything else a signature decides, is :class:`starforge.registry.store.PluginStore`'s.
Wherever the lock is used to ship code (``forge submit``, ``bundle create``, ``bundle
verify``) and wherever it is checked online (``forge lock``, ``lock --check``), a valid
envelope by the locked key over the locked statement must still be there; other envelopes
beside it (a re-sign, a rotated key) break nothing; where none satisfies, the command stops
naming the plugin and the key (:func:`missing_error`); ``forge lock --accept-signature
NAME`` records what the registry serves now without changing the version.

Laptop side.
"""

from __future__ import annotations

import hashlib

from ..errors import SignatureError


def envelope_digest(envelope: bytes) -> str:
    return "sha256:" + hashlib.sha256(envelope).hexdigest()


def key_ids(envelope: bytes) -> list:
    """The key ids an envelope's signatures name (unverified: what it claims)."""
    from ..cluster.jsonload import loads as load_json

    try:
        sigs = load_json(envelope).get("signatures") or []
    except (ValueError, AttributeError, UnicodeDecodeError, RecursionError):
        return []
    return [s["keyid"] for s in sigs if isinstance(s, dict) and isinstance(s.get("keyid"), str) and s["keyid"]]


def facts_of(envelope: bytes | None) -> dict | None:
    """The lock's signature facts for *envelope*: ``{envelope_digest, key_id}`` (the first key it names), or None."""
    if envelope is None:
        return None
    kids = key_ids(envelope)
    return {"envelope_digest": envelope_digest(envelope), "key_id": kids[0] if kids else None}


def short_key(key_id: str | None) -> str:
    """``ab12…`` for a key id, ``none`` for no signature."""
    if not key_id:
        return "none"
    return key_id[:4] + "…"


def statement_matches(entry, envelope: bytes) -> bool:
    """The statement of *envelope* names the locked version and tree digest (signature not checked)."""
    import base64

    from ..cluster.dsse import DIGEST_ALGORITHM, same_version, split_subject
    from ..cluster.jsonload import loads as load_json

    try:
        doc = load_json(envelope)
        statement = load_json(base64.b64decode(doc["payload"], validate=True))
        subject = statement["subject"][0]
        owner, name, version = split_subject(subject["name"])
        signed = "sf1:" + str(subject["digest"].get(DIGEST_ALGORITHM, ""))
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return False
    return (owner, name) == (entry.owner, entry.name) and same_version(version, entry.version) and signed == entry.tree_digest


def missing_error(entry, served: list, where: str) -> SignatureError:
    """*where* (``registry URL``, ``the cache``, ``bundle FILE``) holds no envelope by the locked key."""
    key = (entry.signature or {}).get("key_id")
    others = sorted({k for envelope in served for k in key_ids(envelope)})
    now = f"it serves signatures by key {', '.join(others)} only" if others else "it serves no signature"
    return SignatureError(
        f"{entry.ref} is locked as signed by key {key or '(no key id)'} "
        f"({entry.signature['envelope_digest']}), but {where} holds no valid envelope by that key: {now}",
        hint=("a signature may have been stripped or replaced: do not use this version until its publisher signs it "
              f"again with that key; if the publisher re-signed it on purpose, record the new signature: "
              f"forge lock --accept-signature {entry.name}"),
    )


