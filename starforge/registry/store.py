"""The one owner of a verified plugin version: may it run, and from which bytes.

A :class:`PluginStore` is asked about a :class:`Pin` (owner, name, version, tree digest and
the signature facts a lock recorded) or about a version a registry serves. It

- **resolves**: the registry's record of a pinned version, which must carry the pinned tree
  digest (a moved tag is refused here and nowhere else, :func:`moved_tag_error`);
- **judges**: the whole trust policy — the trust file (loaded here), the key facts a lock
  recorded, the cache's envelopes when the registry cannot answer, DSSE envelopes and the
  Sigstore bundles stored beside them, and yanks (:mod:`.yank` answers with this store's
  trust file);
- **fetches**: the cache first, by tree digest, then each registry; an archive is unpacked
  only when its files have the tree digest;
- **hands out** what the JobSpec carries: the envelope of each pinned version.

``forge lock``, staging, ``jobs replay``, ``lock diff``/``plugin diff``, ``bundle create``,
``verify`` and ``push``, ``plugin copy``, ``pull``, ``show``, ``sign`` and ``forge prep``
call it. Nothing else imports the cache, loads the trust file, verifies an envelope or a
bundle, unpacks an archive or downloads one (``tests/test_plugin_store_owns.py``), so a
new rule is one edit here. Signature verification itself is ``cluster/dsse.py``'s (the
launcher runs it too); what is judged, and with which keys, is decided here.

Laptop side.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from ..cluster.dsse import UNVERIFIED, Trust, check_statement, trust_rule, verify_envelope
from ..errors import ArchiveError, LockError, NoRegistryError, NotFoundError, RegistryError, SignatureError
from . import cache
from .base import PublishedVersion
from .verified import VerifiedTree, check_record, read_tree, registry_label

VERIFIED = "verified"  # a valid signature by a key trusted for the owner
NOT_VERIFIED = "signature not verified here"  # a copied envelope whose statement matched; no key to check it with
SIGNATURE_UNCHECKED = (
    "and its owner's signature must be checked (a trusted key, --require-signatures, or a lock that "
    "recorded it verified), but the cache holds no verified signature for it"
)
NOT_CACHED = "and the cache does not hold its files"


@dataclass(frozen=True)
class Pin:
    """A pinned version: what a lock (or an old job's JobSpec) says of it, nothing more."""

    owner: str
    name: str
    version: str
    tree_digest: str
    signature: dict | None = None  # the lock's facts: {envelope_digest, key_id}; None: locked unsigned
    artifact_digest: str | None = None  # a first guess in the cache
    files: Mapping | None = field(default=None, compare=False)  # per-file hashes: name the files that differ

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.name}@{self.version}"

    @property
    def signed(self) -> bool:
        """The registry held a signature envelope for this version when it was pinned."""
        return self.signature is not None

    @property
    def enforced(self) -> bool:
        """Whether the pin records signature facts to enforce (a v1 lock's "signed" has no digest)."""
        return self.signature is not None and self.signature.get("envelope_digest") is not None

    @classmethod
    def of(cls, entry) -> Pin:
        """The pin of a lock entry, or of a JobSpec's package entry (which records neither
        signature facts — its ``signature`` is the envelope it carries — nor an archive)."""
        from_lock = hasattr(entry, "plugin")  # a LockEntry: the JobSpec's entry plus what only the lock records
        plugin = entry.plugin if from_lock else entry
        return cls(owner=plugin.owner or "", name=plugin.name, version=plugin.version, tree_digest=plugin.tree_digest,
                   signature=entry.signature if from_lock else None,
                   artifact_digest=entry.artifact_digest if from_lock else None, files=plugin.files or None)


@dataclass(frozen=True)
class VerifiedFetch:
    status: str  # the signature status: verified, unsigned, unverified
    envelope: bytes | None  # the envelope that verified, else the newest stored (or None)
    dest: Path | None  # the unpacked, verified files (None when none were asked for)


class PluginStore:
    """A verified plugin version from *registry* (None: the cache alone), judged by *trust*
    (default: this user's trust file, loaded when first needed). *locked_from* is the
    registry URL a lock recorded (for the hints of a registry that cannot answer)."""

    def __init__(self, registry=None, *, trust: Trust | None = None, locked_from: str | None = None,
                 cache_dir: str | os.PathLike | None = None) -> None:
        self.registry = registry
        self.locked_from = locked_from
        self.cache_dir = cache_dir
        self._trust = trust

    @property
    def trust(self) -> Trust:
        if self._trust is None:
            from ..signatures.signing import load_trust

            self._trust = load_trust()
        return self._trust

    # -- resolve -----------------------------------------------------------------------------

    def served(self, pin: Pin, consequence: str = NOT_CACHED) -> PublishedVersion:
        """The registry's record of *pin*, which must carry the pinned tree digest; a registry
        without the version is a :class:`NotFoundError` saying what follows (*consequence*)."""
        registry = self._registry()
        try:
            served = registry.get(pin.owner, pin.name, pin.version)
        except NotFoundError as exc:
            raise NotFoundError(
                f"the lock pins {pin.ref}, which registry {registry.url} does not have, {consequence}",
                hint=f"{registry_hint(registry, self.locked_from)}; registry said: {exc.message}",
            ) from None
        if served.tree_digest != pin.tree_digest:
            raise moved_tag_error(pin, served.tree_digest, registry, self.locked_from)
        return served

    def locked(self, pin: Pin) -> PublishedVersion:
        """Like :meth:`served`, for ``forge lock`` and ``bundle create``: a missing version is a
        :class:`LockError` saying whether the registry lost it or is not the lock's."""
        registry = self._registry()
        locked_from = self.locked_from
        try:
            served = registry.get(pin.owner, pin.name, pin.version)
        except NoRegistryError as exc:
            # a mistyped registry is named as such, not as a version it lacks
            raise NoRegistryError(exc.message, hint="; ".join(h for h in (exc.hint, registry_hint(registry, locked_from)) if h)) from None
        except NotFoundError:
            if locked_from and locked_from != registry.url:
                raise LockError(
                    f"the lock pins {pin.ref}, which registry {registry.url} does not have; "
                    f"the lock was made with registry {locked_from}",
                    hint=registry_hint(registry, locked_from),
                ) from None
            raise LockError(
                f"the lock pins {pin.ref}, which registry {registry.url} (the one the lock was made with) no longer has",
                hint=(
                    "a published version was removed from the registry: publish it again, or request another "
                    f"version in forge.yaml and run: forge lock --upgrade {pin.name}"
                ),
            ) from None
        if served.tree_digest != pin.tree_digest:
            raise moved_tag_error(pin, served.tree_digest, registry, locked_from)
        return served

    def _registry(self):
        if self.registry is None:
            raise RegistryError("no registry was given")
        return self.registry

    # -- judge -------------------------------------------------------------------------------

    def envelopes(self, info: PublishedVersion) -> list:
        """Every envelope the registry holds for *info*, oldest first."""
        return list(self._registry().signatures(info))

    def newest_envelope(self, info: PublishedVersion) -> bytes | None:
        """The newest envelope the registry holds for *info* (unverified: what a bundle or a job carries)."""
        return self._registry().signature(info)

    def verdict(self, info: PublishedVersion, require: bool = False) -> tuple:
        """``(status, envelope)`` of the published *info* by the trust file: ``verified`` (the
        envelope that verified), ``unsigned`` or ``unverified`` (the newest stored, or None).

        An owner with trusted keys needs one stored envelope that verifies (a missing one is
        a :class:`SignatureError`: a stripped signature is an error, never a downgrade;
        others beside a valid one break nothing; when none verifies, the newest one's
        failure is reported). With *require* (``--require-signatures``) every owner does.
        Each Sigstore bundle stored beside the envelopes must carry one of their signatures.
        """
        from ..cluster.dsse import MISSING, NO_TRUSTED_KEY, UNSIGNED

        envelopes = self.envelopes(info)
        newest = envelopes[-1] if envelopes else None
        rule = trust_rule(self.trust.key_ids(info.owner), signed=bool(envelopes), require=require)
        if rule == NO_TRUSTED_KEY:
            raise SignatureError(
                f"{info.ref}: signatures are required, but no key is trusted for owner {info.owner}",
                hint=f"forge trust add {info.owner} PUBKEY.pub",
            )
        if rule == UNSIGNED:
            return rule, newest
        if rule == UNVERIFIED:
            self._check_bundles(info, envelopes)
            return rule, newest
        if rule == MISSING:
            raise SignatureError(
                f"{info.ref} has no signature, but owner {info.owner} has trusted keys",
                hint=("a signature may have been stripped; do not use this version until its publisher signs it: "
                      f"'forge plugin sign {info.ref} --from DIR' (DIR: the publisher's copy of its files; or --lock "
                      "FILE, a lock that pinned them) adds a signature to a published version"),
            )
        failures: list = []
        for envelope in reversed(envelopes):
            try:
                verify_envelope(envelope, owner=info.owner, name=info.name, version=info.version,
                                tree_digest=info.tree_digest, trust=self.trust, artifact_digest=info.artifact_digest or None)
            except SignatureError as exc:
                failures.append(exc)
                continue
            self._check_bundles(info, envelopes)
            return VERIFIED, envelope
        raise failures[0]

    def _check_bundles(self, info: PublishedVersion, envelopes: list) -> None:
        """Each Sigstore bundle stored beside the envelopes carries one of their signatures, or the registry is tampered."""
        from ..signatures.sigstore_bundle import check_bundles
        from ..urls import mask_url

        registry = self._registry()
        check_bundles(info.ref, envelopes, registry.sigstore_bundles(info), f"registry {mask_url(registry.url)}")

    def fetch_verified(self, info: PublishedVersion, dest: str | os.PathLike | None = None, *,
                       require: bool = False) -> VerifiedFetch:
        """Judge *info* (:meth:`verdict`), keep an envelope that verified in the cache (so the
        version stages offline; every use verifies it again), and unpack its files into the
        new directory *dest* when given."""
        status, envelope = self.verdict(info, require)
        if status == VERIFIED and envelope is not None:
            cache.remember_signature(info.owner, info.name, info.version, info.tree_digest, envelope, self.cache_dir)
        unpacked = self.unpack(info, dest) if dest is not None else None
        return VerifiedFetch(status=status, envelope=envelope, dest=unpacked)

    def key_of(self, info: PublishedVersion, envelope: bytes) -> str:
        """The id of the trusted key whose signature in *envelope* verifies over *info*
        (:class:`SignatureError` when none does): which key a verdict of ``verified`` rests on."""
        return verify_envelope(envelope, owner=info.owner, name=info.name, version=info.version,
                               tree_digest=info.tree_digest, trust=self.trust, artifact_digest=info.artifact_digest or None)

    def served_signatures(self, info: PublishedVersion) -> tuple:
        """``(envelopes, Sigstore bundles)`` the registry serves beside *info*, unjudged: what a
        catalogue's registry state covers."""
        registry = self._registry()
        return list(registry.signatures(info)), list(registry.sigstore_bundles(info))

    def satisfies(self, pin: Pin, envelope: bytes) -> bool:
        """Whether *envelope* is a valid envelope by the key *pin* was locked with, over the
        pinned statement: the very envelope the lock recorded, or one with a signature by the
        locked key that verifies with that key's public key, known from the trust file."""
        from .signature_facts import envelope_digest, key_ids, statement_matches

        facts = pin.signature or {}
        locked_digest, locked_key = facts.get("envelope_digest"), facts.get("key_id")
        same_bytes = locked_digest is not None and envelope_digest(envelope) == locked_digest
        known = self.trust.all_keys()
        if locked_key and locked_key in known:
            # the key's public half is known here: the envelope must verify with it
            only = Trust(owners={pin.owner: {locked_key: known[locked_key]}})
            try:
                verify_envelope(envelope, owner=pin.owner, name=pin.name, version=pin.version,
                                tree_digest=pin.tree_digest, trust=only)
            except SignatureError:
                return False
            return locked_key in key_ids(envelope)
        if not same_bytes:
            return False  # another envelope whose key nobody here can check: not the locked one
        return statement_matches(pin, envelope)

    def locked_envelope(self, pin: Pin, envelopes) -> bytes | None:
        """The first of *envelopes* that satisfies *pin*'s locked signature, or None."""
        return next((envelope for envelope in envelopes if self.satisfies(pin, envelope)), None)

    def served_locked_envelope(self, pin: Pin, info: PublishedVersion) -> bytes:
        """The registry's envelope satisfying *pin*'s locked signature; :class:`SignatureError` otherwise."""
        from ..urls import mask_url
        from .signature_facts import missing_error

        served = self.envelopes(info)
        envelope = self.locked_envelope(pin, served)
        if envelope is None:
            raise missing_error(pin, served, f"registry {mask_url(self._registry().url)}")
        return envelope

    def staged_envelope(self, pin: Pin, info: PublishedVersion | None = None) -> bytes | None:
        """The envelope satisfying *pin* for staging (``submit``, ``bundle create``): the cache
        first (every envelope ``forge lock`` saw), else the registry's (*info*, else
        :meth:`served`; a registry that cannot answer raises when the cache holds nothing for
        the version). None for a pin locked unsigned."""
        if not pin.enforced:
            return None
        cached = cache.cached_envelopes(pin.owner, pin.name, pin.version, pin.tree_digest, self.cache_dir)
        envelope = self.locked_envelope(pin, cached)
        if envelope is not None:
            return envelope
        try:
            served = info if info is not None else self.served(pin, SIGNATURE_UNCHECKED)
        except RegistryError as exc:
            if not cached:
                raise  # it says which registry to ask
            raise SignatureError(
                f"{pin.ref} is locked as signed by key {(pin.signature or {}).get('key_id') or '(no key id)'}, but no envelope "
                f"the cache holds is a valid one by that key, and the registry cannot be asked: {exc.message}",
                hint="do not use this version until the registry serves its signature again (then run forge lock --check)",
            ) from None
        envelope = self.served_locked_envelope(pin, served)
        self.keep_envelope(pin, envelope)
        return envelope

    def keep_envelope(self, pin, envelope: bytes) -> None:
        """Keep *envelope* (whatever it proves: every use checks it) for offline staging."""
        cache.remember_envelope(pin.owner, pin.name, pin.version, pin.tree_digest, envelope, self.cache_dir)

    def judge_pin(self, pin: Pin, require: bool = False) -> str | None:
        """The signature status of a pinned version for staging (``forge lock --check``'s rule),
        or None when nothing is checked (no key is trusted for its owner, none is required).

        A pin locked as signed by key K needs a valid envelope by K (:meth:`staged_envelope`).
        A version needs a valid signature by a trusted key when its owner has trusted keys or
        when *require*: "verified" is decided here, never taken from the lock, against the
        registry in use; when that registry cannot answer (offline, or another registry than
        the lock's), against an envelope that verified before and was kept in the cache. The
        others need no registry, so they still stage offline.
        """
        locked = self.staged_envelope(pin)
        if trust_rule(self.trust.key_ids(pin.owner), signed=True, require=require) == UNVERIFIED:
            return None  # nothing to check it against, and nothing requires it
        if locked is not None:
            try:
                verify_envelope(locked, owner=pin.owner, name=pin.name, version=pin.version,
                                tree_digest=pin.tree_digest, trust=self.trust)
            except SignatureError:
                pass  # the locked key is not trusted here: another envelope may be by a trusted key
            else:
                return VERIFIED
        try:
            served = self.served(pin, SIGNATURE_UNCHECKED)
        except RegistryError:  # not a moved tag (LockError): the registry cannot answer
            envelope = cache.cached_signature(pin.owner, pin.name, pin.version, pin.tree_digest, self.cache_dir)
            if envelope is None:
                raise
            verify_envelope(envelope, owner=pin.owner, name=pin.name, version=pin.version, tree_digest=pin.tree_digest,
                            trust=self.trust)
            return VERIFIED
        return self.fetch_verified(served, require=require).status

    def judge_pins(self, pins, require: bool = False) -> dict:
        """``{ref: status}`` of :meth:`judge_pin` for every pin whose signature is checked here."""
        statuses = {pin.ref: self.judge_pin(pin, require) for pin in pins}
        return {ref: status for ref, status in statuses.items() if status is not None}

    def carried(self, pin: Pin) -> bytes | None:
        """The envelope the JobSpec carries for *pin*: the one the lock names (the cache keeps
        it), else the one that verified here, else (a pin recorded as signed) the registry's;
        None when none is known. Nothing is verified for the node: the launcher checks what it
        is given against its own trust file."""
        envelope = None
        if pin.enforced:
            envelope = self.locked_envelope(
                pin, cache.cached_envelopes(pin.owner, pin.name, pin.version, pin.tree_digest, self.cache_dir))
        if envelope is None:
            envelope = cache.cached_signature(pin.owner, pin.name, pin.version, pin.tree_digest, self.cache_dir)
        if envelope is None and pin.signed and self.registry is not None:
            try:
                envelope = self.newest_envelope(self.served(pin))
            except (RegistryError, LockError):
                envelope = None
        return envelope

    def copyable_envelopes(self, info: PublishedVersion, require: bool) -> list:
        """``[(envelope, status)]`` of the envelopes the registry holds for *info*, each checked
        before it may be copied (SPEC §6): an owner with trusted keys here — verified
        (``verified``); else the statement against the version only (:data:`NOT_VERIFIED`).
        One that fails is a :class:`SignatureError`, and so is no envelope at all for an owner
        with trusted keys. With *require*, a version needs a verified one."""
        envelopes = self.envelopes(info)
        out = []
        trusted = self.trust.key_ids(info.owner)
        if trusted and not envelopes:
            raise SignatureError(f"{info.ref} has no signature, but owner {info.owner} has trusted keys: refusing to copy it",
                                 hint="nothing was copied; a signature may have been stripped at the source — do not use "
                                      "this version until its publisher signs it again (forge plugin sign REF --from DIR)")
        for envelope in envelopes:
            try:
                if trusted:
                    verify_envelope(envelope, owner=info.owner, name=info.name, version=info.version,
                                    tree_digest=info.tree_digest, trust=self.trust, artifact_digest=info.artifact_digest)
                    out.append((envelope, VERIFIED))
                else:
                    check_statement(envelope, owner=info.owner, name=info.name, version=info.version,
                                    tree_digest=info.tree_digest, artifact_digest=info.artifact_digest)
                    out.append((envelope, NOT_VERIFIED))
            except SignatureError as exc:
                raise SignatureError(f"{info.ref}: refusing to copy a signature that does not check out: {exc.message}",
                                     hint="nothing was copied; ask the publisher to sign the version again, or trust the "
                                          "key it was signed with (forge trust add OWNER PUBKEY.pub)") from None
        if require and not any(status == VERIFIED for _, status in out):
            why = "it has no signature" if not out else f"no key is trusted for owner {info.owner} here"
            raise SignatureError(f"{info.ref}: --require-signatures copies only versions with a signature verified here; {why}",
                                 hint=f"forge trust add {info.owner} PUBKEY.pub, or copy without --require-signatures")
        return out

    def signed_by(self, info: PublishedVersion, public_key) -> bool:
        """Whether the registry holds a valid signature by *public_key* over *info*'s statement
        (its tree digest and archive): signing it again with that key adds nothing."""
        from cryptography.hazmat.primitives import serialization

        from ..signatures.signing import key_id

        pem = public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")
        only = Trust(owners={info.owner: {key_id(public_key): pem}})
        for envelope in self.envelopes(info):
            try:
                verify_envelope(envelope, owner=info.owner, name=info.name, version=info.version,
                                tree_digest=info.tree_digest, trust=only, artifact_digest=info.artifact_digest)
            except SignatureError:
                continue
            return True
        return False

    def yank(self, owner: str, name: str, version: str, tree_digest: str):
        """:func:`.yank.yank_facts` of the version, its statements judged by this store's trust file."""
        from .yank import yank_facts

        return yank_facts(self.registry, owner, name, version, tree_digest, trust=self.trust)

    def carried_yanks(self, info) -> list:
        """The yank and unyank statements that travel with *info* (a copy, a bundle)."""
        from .yank import carried_statements

        return carried_statements(self._registry(), info.owner, info.name, info.version, info.tree_digest, trust=self.trust)

    # -- fetch -------------------------------------------------------------------------------

    def archive(self, info: PublishedVersion) -> Path:
        """*info*'s archive in the cache, downloaded (and checked against its digest) when not there."""
        return cache.fetch(self._registry(), info, cache=self.cache_dir)

    def cached_archive(self, artifact_digest: str) -> Path | None:
        """The cache's file for *artifact_digest* when present (not hashed here: its reader checks it)."""
        path = cache.cached_path(artifact_digest, self.cache_dir)
        return path if path.is_file() else None

    def unpack(self, info: PublishedVersion, dest: str | os.PathLike) -> Path:
        """Unpack *info* into the new directory *dest*, verified against its tree digest (cache first)."""
        return cache.materialize(self._registry(), info, dest, cache=self.cache_dir)

    def unpack_pin(self, pin: Pin, dest: str | os.PathLike) -> Path:
        """Unpack the files *pin* names into the new directory *dest*: the cache first (any
        archive holding exactly those files: the tree digest is the identity), else the
        registry (perhaps a mirror of the lock's), when it serves the pinned tree digest;
        another tree digest is a moved tag (:class:`LockError` naming both)."""
        if cache.materialize_cached(pin.owner, pin.name, pin.version, pin.tree_digest, dest,
                                    artifact_digest=pin.artifact_digest, files=pin.files, cache=self.cache_dir) is not None:
            return Path(dest)
        return self.unpack(self.served(pin), dest)

    def tree(self, info: PublishedVersion) -> VerifiedTree:
        """The verified tree of *info* (cache first), a registry record that disagrees with it refused."""
        tree = self.tree_of(info)
        check_record(registry_label(self._registry().url), "the registry record", info.ref, tree, info.manifest,
                     info.top_level, info.files or None)
        return tree

    def tree_of(self, info: PublishedVersion) -> VerifiedTree:
        """The verified tree of *info*: from the cache first (any archive holding exactly its
        files), else fetched from the registry into the cache."""
        archive = cache.lookup(info, self.cache_dir) or cache.lookup_tree(info.tree_digest, self.cache_dir)
        if archive is None:
            archive = self.archive(info)
        try:
            tree = tree_of_archive(archive, info.tree_digest, info.ref)
        except ArchiveError as exc:
            raise ArchiveError(f"{info.ref}: {exc.message}", hint=exc.hint or "the archive does not hold the published files") from None
        cache.remember_tree(info.tree_digest, "sha256:" + Path(archive).name, self.cache_dir)
        return tree

    def to_sign(self, info: PublishedVersion, held: str, source: str) -> VerifiedTree:
        """The verified tree of *info* as the registry serves it, when a signer may vouch for
        it: the record names *held* (the tree digest the signer holds without the registry;
        *source* says where from) and the archive it serves unpacks to exactly those files.
        Otherwise a :class:`SignatureError` naming both: nothing may be signed, since a
        registry writer may have put other files under the version."""
        from ..errors import ManifestError

        refused = "nothing was signed: the registry does not serve your files under that version (whoever can write it may have replaced them)"
        if info.tree_digest != held:
            raise SignatureError(
                f"refusing to sign {info.ref}: the registry serves {info.tree_digest}, but {source} holds {held}",
                hint=f"{refused}; 'forge plugin show {info.ref}' shows what it serves; tell the registry's owner",
            )
        try:
            return tree_of_archive(self.archive(info), held, info.ref)
        except (ArchiveError, ManifestError) as exc:
            raise SignatureError(
                f"refusing to sign {info.ref}: the archive the registry serves ({info.artifact_digest}) does not hold the "
                f"files of {held} that {source} holds: {exc.message}",
                hint=f"{refused}; tell the registry's owner",
            ) from None


def verify_published(registry, info: PublishedVersion, trust: Trust | None = None, require: bool = False) -> str:
    """The signature status of the published *info* (:meth:`PluginStore.verdict`): ``verified``,
    ``unsigned`` or ``unverified``, or a :class:`SignatureError`."""
    return PluginStore(registry, trust=trust).verdict(info, require)[0]


def unpack_from_any(pin: Pin, dest: Path, registries: list, locked_from: str | None = None) -> tuple:
    """Unpack *pin*'s files into the new directory *dest* from the cache, else the first of
    *registries* that serves them (:meth:`PluginStore.unpack_pin`): ``(True, registry)``
    (None: the cache held them), or ``(False, reasons)``, one per registry that could not."""
    from ..errors import ForgeError

    if cache.materialize_cached(pin.owner, pin.name, pin.version, pin.tree_digest, dest,
                                artifact_digest=pin.artifact_digest, files=pin.files) is not None:
        return True, None
    reasons = []
    for registry in registries:
        try:
            PluginStore(registry, locked_from=locked_from).unpack_pin(pin, dest)
        except ForgeError as exc:
            reasons.append(exc.message)
            if os.path.lexists(dest):
                shutil.rmtree(dest, ignore_errors=True)
            continue
        return True, registry
    return False, reasons


def tree_of_archive(archive: str | os.PathLike, tree_digest: str, label: str, *,
                    within: str | os.PathLike | None = None) -> VerifiedTree:
    """Unpack *archive* (to a temporary directory, in *within* when given) checked against
    *tree_digest*, and read it."""
    from ..package_format.archive import unpack

    work = tempfile.mkdtemp(prefix="forge-tree-", dir=within)
    try:
        files = unpack(archive, os.path.join(work, "t"), tree_digest)
        return read_tree(os.path.join(work, "t"), files, tree_digest, label)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def moved_tag_error(pin, served: str, registry, locked_from: str | None = None) -> LockError:
    """A pinned version whose registry content changed: a hard error naming both digests.

    No forge command resolves it by re-pinning (``--upgrade`` refuses too): the content
    behind a published version must be put back, or the new content published under a new
    version. *locked_from* is the registry URL the lock recorded.
    """
    recorded = locked_from or "not recorded in the lock"
    return LockError(
        f"moved tag: {pin.ref} is locked at {pin.tree_digest}, but registry {registry.url} now serves {served}",
        hint=(
            f"a published version must never change (the lock was made with registry {recorded}); "
            "do not use this copy. Restore the original content under that tag, or publish the new "
            f"content as a new version and request it in forge.yaml; to prevent it, turn on tag "
            "immutability in the registry (Harbor, ECR)"
        ),
    )


def registry_hint(registry, locked_from: str | None) -> str:
    """How to point a command at a registry that serves the lock's versions.

    The registry the lock recorded (*locked_from*) when it can be here; when it is a
    directory this machine does not have (the far side of an air gap), the ``bundle push``
    that fills a registry here instead of a path across the gap.
    """
    from ..state.home import home

    # the registry used here, unless it is a path that is not here (the embedded one is made on first use)
    used_here = _on_this_machine(registry.url) or registry.url == str(home().registry_dir)
    here = registry.url if used_here else "URL"
    across = f"across an air gap, import the experiment's bundle: forge bundle push FILE --registry {here}"
    if locked_from and locked_from != registry.url:
        if not _on_this_machine(locked_from):
            return (f"the lock was made with registry {locked_from}, which is not on this machine: {across}; "
                    "or set FORGE_REGISTRY (or pass --registry) to the registry the bundle was pushed to")
        return (
            f"the lock was made with registry {locked_from}: pass --registry {locked_from} "
            f"(or set FORGE_REGISTRY={locked_from}), or a mirror that serves the same files; {across}"
        )
    if not used_here:
        return (f"registry {registry.url} is not on this machine: {across}, "
                "then set FORGE_REGISTRY (or pass --registry) to that registry")
    return f"pass --registry URL (or set FORGE_REGISTRY) to a registry that serves it; {across}"


def _on_this_machine(url: str) -> bool:
    """False for a directory registry path that does not exist here; True for any URL (unknown)."""
    return "://" in url or Path(url).exists()
