"""Launch-time signature checks against a node-side trust file (SPEC §6).

When ``FORGE_TRUST`` names a trust file (``forge/trust/v1``, the format ``forge trust add``
writes), the launcher verifies the DSSE envelope each package entry of the JobSpec carries
(``signature``) before anything is imported:

- a package whose owner has trusted keys in that file must carry an envelope that
  verifies (:func:`.dsse.verify_envelope`: the signature over the exact bytes,
  then the statement's name, version and tree digest against the spec entry, then the key
  trusted for the owner); a missing envelope is an error, never a downgrade;
- ``FORGE_REQUIRE_SIGNATURES=1`` extends that to every package (an owner without trusted
  keys fails);
- recipe built-ins are never signed and never checked.

Which package needs a signature is the one trust rule (:func:`.dsse.trust_rule`) that
the laptop applies too. Any failure is a :class:`~.errors.LaunchFailure` of
:class:`~.errors.VerificationError` (phase ``verify``, exit code 10). Only the launcher
checks; the processes it starts rely on the tree digest, which binds the files to the
entry whose signature was checked.

Launcher only, and imported only when ``FORGE_TRUST`` or ``FORGE_REQUIRE_SIGNATURES`` is
set: ``cryptography`` is loaded then, never otherwise.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from .dsse import MISSING, NO_TRUSTED_KEY, VERIFY, read_trust, trust_rule, verify_envelope
from .errors import LaunchFailure, SignatureError, VerificationError

TRUST_ENV = "FORGE_TRUST"
REQUIRE_ENV = "FORGE_REQUIRE_SIGNATURES"


def _require(environ) -> bool:
    value = environ.get(REQUIRE_ENV, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def check_items(items: Sequence, environ: Mapping[str, str] = os.environ) -> list:
    """Verify the carried envelope of every package item that needs one; return what was checked.

    *items* are the launcher's plugin items (``entry``, ``builtin``, ``ref``). Returns
    ``[(ref, key id)]`` for the verified ones. Raises a :class:`VerificationError` failure
    naming the plugin (or none, for an unusable trust file) and the reason.
    """
    path = environ.get(TRUST_ENV, "")
    require = _require(environ)
    if not path and not require:
        return []
    if not path:
        raise LaunchFailure(
            VerificationError, None,
            f"{REQUIRE_ENV} is set, but {TRUST_ENV} names no trust file to check signatures against",
        )
    if not os.path.isfile(path):
        raise LaunchFailure(VerificationError, None, f"{TRUST_ENV}={path}: no such trust file")
    try:
        trust = read_trust(path)
    except SignatureError as exc:
        raise LaunchFailure(VerificationError, None, f"{TRUST_ENV}: {exc.message}") from None
    except OSError as exc:
        raise LaunchFailure(VerificationError, None, f"{TRUST_ENV}={path}: cannot read the trust file: {exc}") from None

    checked = []
    for item in items:
        entry = item.entry
        if item.builtin or not entry.owner:
            continue
        rule = trust_rule(trust.key_ids(entry.owner), signed=entry.signature is not None, require=require)
        ref = item.ref
        if rule == NO_TRUSTED_KEY:
            raise LaunchFailure(
                VerificationError, ref,
                f"{ref}: signatures are required ({REQUIRE_ENV}), but no key is trusted for owner {entry.owner} in {path}",
            )
        if rule == MISSING:
            raise LaunchFailure(
                VerificationError, ref,
                f"{ref}: the job carries no signature, but owner {entry.owner} has trusted keys in {path}",
            )
        if entry.signature is None or rule != VERIFY:
            continue
        try:
            kid = verify_envelope(
                entry.signature.encode("utf-8"),
                owner=entry.owner,
                name=entry.name,
                version=entry.version,
                tree_digest=entry.tree_digest,
                trust=trust,
            )
        except SignatureError as exc:
            raise LaunchFailure(VerificationError, ref, f"{ref}: signature check failed: {exc.message}") from None
        checked.append((ref, kid))
    return checked
