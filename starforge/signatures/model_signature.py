"""OpenSSF model-signing signatures over a plugin's unpacked files, written by forge itself.

The OpenSSF ``model-signing`` tool (``model_signing verify key DIR --public_key KEY.pem
--signature FILE``) checks a directory of files against a Sigstore bundle v0.3 whose DSSE
envelope holds an in-toto statement of predicate type :data:`PREDICATE_TYPE`: one resource
per file (its path and sha256), and as subject the sha256 over those file digests in the
tool's own order (by path component, not by byte string) — which is not forge's tree digest.
It accepts only ECDSA keys, and finds the key by a hint: the sha256 of the public key's PEM.

What such a signature binds: the name and content of every regular file of the plugin
(as published: the per-file hashes of its verified tree), except the files the tool ignores
by default (``.git``, ``.gitattributes``, ``.github``, ``.gitignore`` at the top), which
are left out. Not bound: the plugin's owner, name or version, the archive, the registry
record (forge's own signature binds those). The signature is a file of its own, written
outside the plugin directory.

Laptop side.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import PurePosixPath

from ..cluster.dsse import PAYLOAD_TYPE, STATEMENT_TYPE, low_s, pae
from ..errors import UsageError

PREDICATE_TYPE = "https://model_signing/signature/v1.0"
#: Paths model-signing ignores by default, relative to the directory (recorded in the signature).
IGNORED = (".git", ".gitattributes", ".github", ".gitignore")


def _ignored(path: str) -> bool:
    first = PurePosixPath(path).parts[0]
    return first in IGNORED


def statement(model_name: str, files: dict) -> bytes:
    """The model-signing statement over *files* (relative path -> sha256 hex), as JSON bytes."""
    items = sorted((PurePosixPath(p), digest) for p, digest in files.items() if not _ignored(p))
    root = hashlib.sha256()
    resources = []
    for path, digest in items:
        root.update(bytes.fromhex(digest))
        resources.append({"name": str(path), "algorithm": "sha256", "digest": digest})
    doc = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": model_name, "digest": {"sha256": root.hexdigest()}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "serialization": {"method": "files", "hash_type": "sha256", "allow_symlinks": False,
                              "ignore_paths": list(IGNORED)},
            "resources": resources,
        },
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")


def signature_bundle(private_key, model_name: str, files: dict) -> bytes:
    """A model-signing signature (Sigstore bundle v0.3 JSON) over *files*, by the ECDSA *private_key*."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    if not isinstance(private_key, ec.EllipticCurvePrivateKey):
        raise UsageError("OpenSSF model-signing accepts only ECDSA keys",
                         hint="make one with 'forge key generate --name NAME --type ecdsa-p256' and pass it with --key")
    payload = statement(model_name, files)
    sig = low_s(private_key.sign(pae(PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256())))  # as every ECDSA signature forge makes
    pem = private_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    bundle = {
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": hashlib.sha256(pem).hexdigest()}, "tlogEntries": []},
        "dsseEnvelope": {"payload": base64.b64encode(payload).decode("ascii"), "payloadType": PAYLOAD_TYPE,
                         "signatures": [{"keyid": "", "sig": base64.b64encode(sig).decode("ascii")}]},
    }
    return (json.dumps(bundle, indent=2, sort_keys=True) + "\n").encode("utf-8")


def write_signature(path: str | os.PathLike, private_key, model_name: str, files: dict) -> None:
    """Write the model-signing signature over *files* to *path* (temp file + rename)."""
    from ..cluster import atomic

    atomic.write_file(path, signature_bundle(private_key, model_name, files), 0o644, fsync=True)
