"""Fetching a published version as verified: the one place that does it.

:func:`fetch_verified` judges the version's signature by this machine's trust file (a
verdict from :func:`starforge.signing.verify_published_envelope`), keeps an envelope that
verified in the cache (so the version can be staged offline, and every use verifies it
again), and, when asked, unpacks the version's files through the cache, verified against
its tree digest. ``forge plugin pull``, ``plugin show``, ``forge prep``, ``bundle
verify``, ``forge lock`` and staging all call it, as pip's one preparer serves install,
download and wheel.

:func:`fetch_to_sign` is the same fetch for a signer (``forge plugin sign``, ``publish
--sign`` of a version already published): a signature vouches for files, so the version is
signed only when the registry serves the files the signer holds independently of it (the
digest of a lock the signer made, or of a local directory), in the archive it names.

Laptop side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class VerifiedFetch:
    status: str  # the signature status: verified, unsigned, ...
    envelope: bytes | None  # the envelope that verified, else the newest stored (or None)
    dest: Path | None  # the unpacked, verified files (None when none were asked for)


def fetch_verified(registry, info, dest: str | os.PathLike | None = None, *, trust=None, require: bool = False,
                   cache: str | os.PathLike | None = None) -> VerifiedFetch:
    """Judge *info*'s signature (raising :class:`SignatureError` where the trust rule refuses
    it), remember an envelope that verified, and unpack its files into *dest* when given."""
    from ..signing import verify_published_envelope
    from .cache import materialize, remember_verified

    verdict = verify_published_envelope(registry, info, trust, require=require)
    status = remember_verified(info, verdict, cache)
    unpacked = materialize(registry, info, dest, cache=cache) if dest is not None else None
    return VerifiedFetch(status=status, envelope=verdict[1], dest=unpacked)


def fetch_to_sign(registry, info, held: str, source: str, *, cache: str | os.PathLike | None = None):
    """The :class:`~starforge.registry.verified.VerifiedTree` of *info* as the registry serves
    it, when a signer may vouch for it: the record names *held* (the tree digest the signer
    holds without the registry; *source* says where from: ``opsd-patch/``, ``lock FILE``) and
    the archive it serves unpacks to exactly those files, so the statement's archive subject
    names an archive that holds them. Otherwise a :class:`SignatureError` naming both: nothing
    may be signed, since a registry writer may have put other files under the version."""
    from ..errors import ArchiveError, ManifestError, SignatureError
    from .cache import fetch
    from .verified import tree_of_archive

    refused = "nothing was signed: the registry does not serve your files under that version (whoever can write it may have replaced them)"
    if info.tree_digest != held:
        raise SignatureError(
            f"refusing to sign {info.ref}: the registry serves {info.tree_digest}, but {source} holds {held}",
            hint=f"{refused}; 'forge plugin show {info.ref}' shows what it serves; tell the registry's owner",
        )
    archive = fetch(registry, info, cache=cache)
    try:
        return tree_of_archive(archive, held, info.ref)
    except (ArchiveError, ManifestError) as exc:
        raise SignatureError(
            f"refusing to sign {info.ref}: the archive the registry serves ({info.artifact_digest}) does not hold the "
            f"files of {held} that {source} holds: {exc.message}",
            hint=f"{refused}; tell the registry's owner",
        ) from None
