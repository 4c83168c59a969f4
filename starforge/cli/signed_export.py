"""``forge plugin pull --export DIR``: the archive the registry serves, its Sigstore bundle and
the signer's public key on disk, for tools other than forge (cosign, sigstore-js).

Laptop side.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..signatures.sigstore_bundle import BUNDLE_SUFFIX, bundle_of

# -- putting a verifiable plugin on disk ---------------------------------------------------

@dataclass(frozen=True)
class Exported:
    archive: Path
    bundle: Path | None  # None: the version is unsigned
    public_key: Path | None  # None: no key is trusted for the owner here
    key_id: str | None


def export_signed(store, info, envelope: bytes | None, dest: str | os.PathLike) -> Exported:
    """Write *info*'s archive (the exact blob the registry serves), the Sigstore bundle of
    *envelope* (the envelope that verified) and the public key that verified it (PEM, from
    the trust file of *store*, a :class:`~starforge.registry.store.PluginStore`) into the directory *dest*: ``owner-name-version.tar.gz``, ``….tar.gz``
    + :data:`BUNDLE_SUFFIX` and ``KEYID.pem``. Files are written by temp file and rename."""
    from ..cluster import atomic
    from ..signatures.signing import archive_name, load_public_key
    from ..state.directories import make_dirs

    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise UsageError(f"{dest} exists and is not a directory", hint="pass a directory to write the files into")
    make_dirs(dest)
    archive = store.archive(info)  # checked against the archive digest the registry records
    name = archive_name(info.owner, info.name, info.version)
    out_archive = dest / name
    atomic.write_file(out_archive, archive.read_bytes(), 0o644, fsync=True)
    if envelope is None:
        return Exported(archive=out_archive, bundle=None, public_key=None, key_id=None)
    trusted = store.trust.owners.get(info.owner, {})
    named = [s.get("keyid") for s in (json.loads(envelope).get("signatures") or []) if isinstance(s, dict)]
    kid = next((k for k in named if k in trusted), None)
    out_bundle = dest / (name + BUNDLE_SUFFIX)
    atomic.write_file(out_bundle, bundle_of(envelope, kid), 0o644, fsync=True)
    if kid is None:
        return Exported(archive=out_archive, bundle=out_bundle, public_key=None, key_id=None)
    from cryptography.hazmat.primitives import serialization

    pem = load_public_key(trusted[kid]).public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo)
    out_key = dest / f"{kid}.pem"
    atomic.write_file(out_key, pem, 0o644, fsync=True)
    return Exported(archive=out_archive, bundle=out_bundle, public_key=out_key, key_id=kid)
