"""Fetching a published version as verified: the one place that does it.

:func:`fetch_verified` judges the version's signature by this machine's trust file (a
verdict from :func:`starforge.signing.verify_published_envelope`), keeps an envelope that
verified in the cache (so the version can be staged offline, and every use verifies it
again), and, when asked, unpacks the version's files through the cache, verified against
its tree digest. ``forge plugin pull``, ``plugin show``, ``forge prep``, ``bundle
verify``, ``forge lock`` and staging all call it, as pip's one preparer serves install,
download and wheel.

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
