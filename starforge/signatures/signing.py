"""Signing keys, signed publish statements (in-toto Statement v1 in a DSSE envelope), trust.

A publisher signs a statement binding ``owner/name@version`` to the tree digest (the
subject) with the archive digest in the predicate. The signature covers DSSE's
pre-authentication encoding of the payload type and the exact payload bytes, so it can be
neither moved onto another name or version nor broken by re-serializing the JSON.

Verifying (:func:`verify_envelope`) checks, in this order:

1. the signature over the exact bytes, with the keys named in the trust file;
2. the statement's subject (owner, name, version, tree digest) against what is expected;
3. that the key which signed is trusted for that owner.

The trust file (``trust.json`` in the config directory, or any path: the launcher reads
``FORGE_TRUST``) maps owners to public keys by key id. An owner with trusted keys must
always come with a valid signature; ``--require-signatures`` extends that to every owner.
What a published version's signatures decide (which envelopes, which keys, the cache, the
Sigstore bundles beside them) is :class:`starforge.registry.store.PluginStore`'s.

Importing this module costs only the standard library; ``cryptography`` is imported by the
functions that need it, so the launcher pays for it only when it checks signatures.

>>> pae("application/vnd.in-toto+json", b"{}")
b'DSSEv1 28 application/vnd.in-toto+json 2 {}'
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..cluster import atomic
from ..cluster.dsse import (  # noqa: F401  (verification is the cluster's; these names stay public here)
    ARCHIVE_ALGORITHM,
    DIGEST_ALGORITHM,
    MISSING,
    NO_TRUSTED_KEY,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    TRUST_SCHEMA,
    VERIFY,
    Trust,
    load_public_key,
    low_s,
    pae,
    read_trust,
    subject_name,
    trust_rule,
    verify_envelope,
)
from ..errors import NotFoundError, SignatureError, UsageError
from ..state.directories import SECRET, make_dirs
from ..state.filelock import exclusive_lock

VERIFIED = "verified"  # a valid signature by a key trusted for the owner
UNSIGNED = "unsigned"  # no signature, and none required (the owner has no trusted key)
UNVERIFIED = "unverified"  # signed, but no key is trusted for the owner: nothing was checked

ED25519 = "ed25519"  # the default key type
ECDSA_P256 = "ecdsa-p256"  # for policies and tools that require ECDSA (OpenSSF model-signing)
KEY_TYPES = (ED25519, ECDSA_P256)
KEY_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # keys/NAME.key


# -- keys ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class KeyPair:
    """Where a generated key pair was written, and its key id."""

    private: Path
    public: Path
    key_id: str


def public_path_for(private: str | os.PathLike) -> Path:
    """``keys/default.key`` -> ``keys/default.pub``."""
    private = Path(private)
    return private.with_suffix(".pub") if private.suffix == ".key" else private.with_name(private.name + ".pub")


def generate_key(path: str | os.PathLike, passphrase: str | bytes | None = None, key_type: str = ED25519) -> KeyPair:
    """Write a new private key (PEM, mode 0600) of *key_type* (:data:`ED25519` or
    :data:`ECDSA_P256`) to *path* and its public key beside it.

    Refuses to overwrite an existing key. The key id is :func:`key_id`.

    >>> generate_key("keys/default.key").public          # doctest: +SKIP
    PosixPath('keys/default.pub')
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    if key_type not in KEY_TYPES:
        raise UsageError(f"'{key_type}' is not a key type", hint=f"key types: {', '.join(KEY_TYPES)}")
    private_path = Path(path)
    public = public_path_for(private_path)
    for p in (private_path, public):
        if p.exists():
            raise UsageError(f"{p} already exists; refusing to overwrite a key", hint="choose another --name")
    make_dirs(private_path.parent, SECRET)
    key = Ed25519PrivateKey.generate() if key_type == ED25519 else ec.generate_private_key(ec.SECP256R1())
    encryption: serialization.KeySerializationEncryption
    if passphrase:
        encryption = serialization.BestAvailableEncryption(_bytes(passphrase))
    else:
        encryption = serialization.NoEncryption()
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_key(private_path, private_pem, 0o600)
    _write_key(public, public_pem, 0o644)
    return KeyPair(private=private_path, public=public, key_id=key_id(public_pem))


def list_keys(keys_dir: str | os.PathLike | None = None) -> list:
    """The private keys in *keys_dir* (default: the user's): ``[{name, key_id, type, private,
    public, encrypted}]`` sorted by name; ``key_id`` and ``type`` are None when the public
    key is missing or unreadable."""
    if keys_dir is None:
        from ..state.home import home

        keys_dir = home().keys_dir
    rows = []
    for private in sorted(Path(keys_dir).glob("*.key")):
        public = public_path_for(private)
        kid: str | None
        kind: str | None
        try:
            public_key = load_public_key(public.read_bytes())
            kid, kind = key_id(public_key), key_type(public_key)
        except (OSError, SignatureError):
            kid = kind = None
        try:
            encrypted = b"ENCRYPTED" in private.read_bytes()[:64]
        except OSError:
            encrypted = False
        rows.append({"name": private.stem, "key_id": kid, "type": kind, "private": str(private), "public": str(public),
                     "encrypted": encrypted})
    return rows


def signing_key_for(owner: str, keys_dir: str | os.PathLike | None = None) -> Path:
    """The key ``publish --sign`` uses for *owner*: ``keys/<owner>.key``, else
    ``keys/default.key``; :class:`UsageError` listing the keys that exist when neither does."""
    if keys_dir is None:
        from ..state.home import home

        keys_dir = home().keys_dir
    keys_dir = Path(keys_dir)
    for name in (owner, "default"):
        candidate = keys_dir / f"{name}.key"
        if candidate.exists():
            return candidate
    existing = [r["name"] for r in list_keys(keys_dir)]
    have = f"keys here: {', '.join(existing)}; pass one with --key NAME" if existing else "there are no keys yet"
    raise UsageError(
        f"no signing key for owner {owner}: neither {keys_dir / (owner + '.key')} nor {keys_dir / 'default.key'} exists",
        hint=f"{have}, or make one with 'forge key generate --name {owner}'",
    )


def signing_key_option(value: str, keys_dir: str | os.PathLike | None = None) -> Path:
    """The private key ``--key VALUE`` means: a value holding ``/`` is a file path; any other
    value is the name of one of your keys (``keys/NAME.key``), as ``key generate --name`` and
    ``key export NAME`` take it. A bare value that is both a file here and a key name is
    ambiguous: :class:`UsageError` naming both (``./NAME`` is the file)."""
    if "/" in value:
        path = Path(value)
        if not path.is_file():
            raise UsageError(f"no signing key at {value}" + (" (a directory)" if path.is_dir() else ""),
                             hint="'forge key list' shows your keys; --key takes a key's name or the path of its .key file")
        return path
    if keys_dir is None:
        from ..state.home import home

        keys_dir = home().keys_dir
    named = Path(keys_dir) / f"{value}.key"
    here = Path(value)
    if KEY_NAME_RE.match(value) and named.is_file():
        if here.is_file():
            raise UsageError(f"--key {value} is ambiguous: both the file ./{value} and your key '{value}' ({named})",
                             hint=f"for the file write --key ./{value}; for the key, --key {named}")
        return named
    existing = [r["name"] for r in list_keys(keys_dir)]
    from ..package_format.manifest import closest

    guess = closest(value, existing) if existing else None
    guessed = f" (did you mean '{guess}'?)" if guess else ""
    have = f"keys here: {', '.join(existing)}" if existing else "there are no keys yet (forge key generate --name NAME)"
    if here.is_file():
        hint = f"a value without '/' names a key; for the file {value} here, write --key ./{value}"
    else:
        hint = f"{have}; a path to a key file holds a '/' (--key ./FILE)"
    raise UsageError(f"--key {value}: no key named '{value}' in {keys_dir}{guessed}", hint=hint)


def key_id(public_key) -> str:
    """The key id (accepts PEM bytes/text or a key object): for Ed25519 the sha256 hex of the
    raw 32-byte public key, for ECDSA the sha256 hex of the DER SubjectPublicKeyInfo."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = load_public_key(public_key) if isinstance(public_key, (bytes, str)) else public_key
    if isinstance(key, Ed25519PublicKey):
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    else:
        raw = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(raw).hexdigest()


def key_type(key) -> str:
    """:data:`ED25519` or :data:`ECDSA_P256` for a public or private key object."""
    from cryptography.hazmat.primitives.asymmetric import ec

    return ECDSA_P256 if isinstance(key, (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)) else ED25519


def load_private_key(path: str | os.PathLike, passphrase: str | bytes | None = None):
    """The Ed25519 or ECDSA P-256 private key at *path*, decrypted with *passphrase* when it has one."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SignatureError(f"no signing key at {path}", hint="make one with 'forge key generate' or pass --key NAME") from None
    try:
        key = serialization.load_pem_private_key(data, password=_bytes(passphrase) if passphrase else None)
    except TypeError:
        if passphrase:
            raise SignatureError(f"{path} is not encrypted, but a passphrase was given") from None
        raise SignatureError(f"{path} is encrypted", hint="set FORGE_KEY_PASSPHRASE to its passphrase") from None
    except ValueError:
        if passphrase:
            raise SignatureError(f"cannot decrypt {path}: wrong passphrase or not a private key") from None
        raise SignatureError(f"{path} is not a PEM private key") from None
    if isinstance(key, Ed25519PrivateKey):
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise SignatureError(f"{path} is not an Ed25519 or ECDSA P-256 key", hint="make keys with 'forge key generate'")


def sign_bytes(key, message: bytes) -> bytes:
    """A signature over *message*: Ed25519, or ECDSA P-256 over SHA-256 (DER; randomized, and
    in its low-S form, :func:`starforge.cluster.dsse.low_s`: of the two byte strings that
    verify for one ``r``, forge always writes the same one)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    if isinstance(key, ec.EllipticCurvePrivateKey):
        return low_s(key.sign(message, ec.ECDSA(hashes.SHA256())))
    return key.sign(message)


# -- statements and envelopes -------------------------------------------------------------

def archive_name(owner: str, name: str, version: str) -> str:
    """The file name of a version's archive: ``owner-name-version.tar.gz`` (the statement's second subject)."""
    from ..package_format.manifest import canonical_version

    return f"{owner}-{name}-{canonical_version(version)}.tar.gz"


def make_statement(owner: str, name: str, version: str, tree_digest: str, artifact_digest: str) -> bytes:
    """The in-toto Statement v1 a publisher signs, as the exact JSON bytes.

    Two subjects: the plugin (``owner/name@version``, the tree digest under ``sf1``) and the
    archive the registry serves (its file name and sha256), so that tools that check a
    subject against a file (cosign) can verify the archive a user holds.
    """
    if not tree_digest.startswith("sf1:"):
        raise UsageError(f"'{tree_digest}' is not a tree digest (sf1:<hex>)")
    if not artifact_digest.startswith(ARCHIVE_ALGORITHM + ":"):
        raise UsageError(f"'{artifact_digest}' is not an archive digest (sha256:<hex>)")
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject_name(owner, name, version), "digest": {DIGEST_ALGORITHM: tree_digest[4:]}},
                    {"name": archive_name(owner, name, version),
                     "digest": {ARCHIVE_ALGORITHM: artifact_digest.partition(":")[2]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {"artifact_digest": artifact_digest, "tree_digest": tree_digest},
    }
    return json.dumps(statement, sort_keys=True, separators=(",", ":")).encode("utf-8")


def sign_statement(
    key_path: str | os.PathLike,
    *,
    owner: str,
    name: str,
    version: str,
    tree_digest: str,
    artifact_digest: str,
    passphrase: str | bytes | None = None,
) -> bytes:
    """A DSSE envelope (JSON bytes) over the publish statement, signed with the key at *key_path*."""
    key = load_private_key(key_path, passphrase)
    payload = make_statement(owner, name, version, tree_digest, artifact_digest)
    signature = sign_bytes(key, pae(PAYLOAD_TYPE, payload))
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": key_id(key.public_key()), "sig": base64.b64encode(signature).decode("ascii")}],
    }
    return (json.dumps(envelope, indent=2, sort_keys=True) + "\n").encode("utf-8")


# -- trust --------------------------------------------------------------------------------

def default_trust_path() -> Path:
    from ..state.home import home

    return home().trust_file


def load_trust(path: str | os.PathLike | None = None) -> Trust:
    """The trust file at *path* (default: the user's); an absent file trusts nobody."""
    return read_trust(path if path is not None else default_trust_path())


def trust_add(owner: str, public_key: str | os.PathLike, *, path: str | os.PathLike | None = None) -> str:
    """Trust the public key (a file path or PEM text) for *owner*; return its key id.

    Adding a key that is already trusted for the owner changes nothing.
    """
    from ..cluster.names import is_plugin_name

    if not is_plugin_name(owner):
        raise UsageError(f"'{owner}' is not a valid owner", hint="lowercase letters, digits and single dashes")
    text = str(public_key)
    if "-----BEGIN" in text:
        pem = text.encode("utf-8")
    else:
        try:
            pem = Path(public_key).read_bytes()
        except FileNotFoundError:
            raise UsageError(f"no public key file {public_key}", hint="pass the .pub file written by 'forge key generate'") from None
        except IsADirectoryError:
            raise UsageError(f"{public_key} is a directory, not a public key file") from None
    try:
        key = load_public_key(pem)
    except SignatureError as exc:
        raise UsageError(f"{public_key if '-----BEGIN' not in text else 'the key given'}: {exc.message}",
                         hint=exc.hint or "pass the .pub file written by 'forge key generate'") from None
    kid = key_id(key)
    from cryptography.hazmat.primitives import serialization

    normalized = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")
    path = Path(path) if path is not None else default_trust_path()
    make_dirs(path.parent)
    with exclusive_lock(path.with_name(path.name + ".lock")):
        trust = load_trust(path)
        owners = {o: dict(k) for o, k in trust.owners.items()}
        if owners.get(owner, {}).get(kid) == normalized:
            return kid
        owners.setdefault(owner, {})[kid] = normalized
        doc = {"schema": TRUST_SCHEMA, "owners": {o: dict(sorted(k.items())) for o, k in sorted(owners.items())}}
        atomic.write_file(path, json.dumps(doc, indent=2, sort_keys=True) + "\n", fsync=True)
    return kid


def trust_remove(owner: str, key: str | None = None, *, path: str | os.PathLike | None = None) -> list:
    """Stop trusting *key* (a key id or a unique prefix of one) for *owner*, or every key of
    *owner* when *key* is None; return the key ids removed."""
    path = Path(path) if path is not None else default_trust_path()
    with exclusive_lock(path.with_name(path.name + ".lock")):
        trust = load_trust(path)
        keys = dict(trust.owners.get(owner, {}))
        if not keys:
            known = ", ".join(sorted(trust.owners)) or "none"
            raise NotFoundError(f"no key is trusted for owner {owner}", hint=f"owners with trusted keys: {known}")
        if key is None:
            removed = sorted(keys)
        else:
            removed = [k for k in keys if k == key or k.startswith(key)]
            if len(removed) != 1:
                what = "matches no" if not removed else f"matches {len(removed)}"
                raise (NotFoundError if not removed else UsageError)(
                    f"key id '{key}' {what} key trusted for {owner}", hint=f"{owner}'s keys: {', '.join(sorted(keys))}"
                )
        owners = {o: dict(k) for o, k in trust.owners.items()}
        for kid in removed:
            del owners[owner][kid]
        if not owners[owner]:
            del owners[owner]
        doc = {"schema": TRUST_SCHEMA, "owners": {o: dict(sorted(k.items())) for o, k in sorted(owners.items())}}
        atomic.write_file(path, json.dumps(doc, indent=2, sort_keys=True) + "\n", fsync=True)
    return removed


def trust_list(path: str | os.PathLike | None = None) -> list:
    """``[{"owner": ..., "key_id": ...}]`` sorted by owner then key id."""
    trust = load_trust(path)
    return [{"owner": o, "key_id": k} for o in sorted(trust.owners) for k in trust.key_ids(o)]


# -- signing policy -----------------------------------------------------------------------

def check_signing_key(owner: str, public_key, key_file, trust: Trust) -> bool:
    """Refuse (:class:`UsageError`) to sign for *owner* with a key the trust file does not list
    for *owner* when it lists others: consumers with that trust file would refuse the
    version, and a signature cannot be taken back. True when the trust file lists keys for
    *owner* (and this is one), False when it lists none (a first publish, a CI machine)."""
    listed = trust.key_ids(owner)
    if not listed:
        return False
    mine = key_id(public_key)
    if mine in listed:
        return True
    raise UsageError(
        f"key {mine} ({key_file}) is not trusted for owner {owner} in {trust.path}: "
        "a version signed with it would be refused by everyone who trusts this file, and a signature cannot be taken back",
        hint=f"sign with a key trusted for {owner} (--key NAME; trusted: {', '.join(listed)}), or, if this key should be "
             f"trusted: forge trust add {owner} {public_path_for(key_file)}",
    )


# -- internals ----------------------------------------------------------------------------

def _bytes(value: str | bytes) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


def _write_key(path: Path, data: bytes, mode: int) -> None:
    """Write a key file atomically and durably; an existing key is never replaced."""
    try:
        atomic.write_file(path, data, mode, fsync=True, exclusive=True)
    except FileExistsError:
        raise UsageError(f"{path} already exists; refusing to overwrite a key") from None
