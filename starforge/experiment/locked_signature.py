"""The signature facts a lock records, enforced (SPEC §7).

An entry locked as signed records ``{envelope_digest, key_id}``: the envelope the registry
served and the key it names. Wherever the lock is used to ship code — ``forge submit``,
``forge bundle create``, ``forge bundle verify`` — and wherever it is checked online
(``forge lock``, ``forge lock --check``), a valid envelope by that key over the locked
statement must still be there:

- an envelope **satisfies** the entry when its statement names the locked owner, name,
  version and tree digest, and either it is the very envelope the lock recorded (its
  sha256 is ``envelope_digest``; its signature verified when its key is known here) or it
  carries a signature by the locked key that verifies with that key's public key, known
  from the trust file (a re-serialized or re-issued envelope by the same key);
- other envelopes beside it (a re-sign, a rotated key) break nothing;
- where none satisfies, the command stops naming the plugin and the key; ``forge lock
  --accept-signature NAME`` records what the registry serves now (or its absence) without
  changing the version.

Staging asks the cache first (:func:`starforge.registry.cache.cached_envelopes`: every
envelope ``forge lock`` saw, kept by digest), so a locked experiment stages offline.

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


def satisfies(entry, envelope: bytes, trust) -> bool:
    """Whether *envelope* is a valid envelope by the key *entry* (a lock entry) was locked with,
    over the locked statement (see the module docstring)."""
    from ..cluster.dsse import Trust, verify_envelope

    facts = entry.signature or {}
    locked_digest, locked_key = facts.get("envelope_digest"), facts.get("key_id")
    same_bytes = locked_digest is not None and envelope_digest(envelope) == locked_digest
    known = trust.all_keys()
    if locked_key and locked_key in known:
        # the key's public half is known here: the envelope must verify with it
        only = Trust(owners={entry.owner: {locked_key: known[locked_key]}})
        try:
            verify_envelope(envelope, owner=entry.owner, name=entry.name, version=entry.version,
                            tree_digest=entry.tree_digest, trust=only)
        except SignatureError:
            return False
        return locked_key in key_ids(envelope)
    if not same_bytes:
        return False  # another envelope whose key nobody here can check: not the locked one
    return _statement_matches(entry, envelope)


def _statement_matches(entry, envelope: bytes) -> bool:
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


def locked_envelope(entry, envelopes, trust) -> bytes | None:
    """The first of *envelopes* that satisfies *entry*'s locked signature, or None."""
    for envelope in envelopes:
        if satisfies(entry, envelope, trust):
            return envelope
    return None


def enforced(entry) -> bool:
    """Whether *entry* records signature facts to enforce (a v1 lock's "signed" has no digest)."""
    return entry.signature is not None and entry.signature.get("envelope_digest") is not None


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


def check_served(entry, registry, info, trust) -> bytes:
    """The registry's envelope satisfying *entry*'s locked signature; :class:`SignatureError` otherwise."""
    from ..signing import stored_envelopes
    from ..urls import mask_url

    served = stored_envelopes(registry, info)
    envelope = locked_envelope(entry, served, trust)
    if envelope is None:
        raise missing_error(entry, served, f"registry {mask_url(registry.url)}")
    return envelope


def staged_envelope(entry, served_info, trust) -> bytes | None:
    """The envelope satisfying *entry* for staging (``submit``, ``bundle create``): the cache
    first, else the registry (*served_info()*: ``(registry, PublishedVersion)``, raising
    :class:`~starforge.errors.RegistryError` when the registry cannot answer, which
    propagates when the cache holds nothing for the version). None for an entry locked
    unsigned."""
    from ..errors import RegistryError
    from ..registry.cache import cached_envelopes, remember_envelope

    if not enforced(entry):
        return None
    cached = cached_envelopes(entry.owner, entry.name, entry.version, entry.tree_digest)
    envelope = locked_envelope(entry, cached, trust)
    if envelope is not None:
        return envelope
    try:
        registry, info = served_info()
    except RegistryError as exc:
        if not cached:
            raise  # it says which registry to ask
        raise SignatureError(
            f"{entry.ref} is locked as signed by key {entry.signature.get('key_id') or '(no key id)'}, but no envelope "
            f"the cache holds is a valid one by that key, and the registry cannot be asked: {exc.message}",
            hint="do not use this version until the registry serves its signature again (then run forge lock --check)",
        ) from None
    envelope = check_served(entry, registry, info, trust)
    remember_envelope(entry.owner, entry.name, entry.version, entry.tree_digest, envelope)
    return envelope
