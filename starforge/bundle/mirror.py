"""Copy plugin versions between registries by digest (``forge plugin copy``).

Each version is fetched through the cache (checked against its archive digest) and
published to the target as ``forge plugin publish`` stores it, signature envelope included:
the target's immutability rules apply (the same tree digest is a no-op, other content under
an existing version is refused naming both digests). Data-prep plugins never leave the
laptop and are refused.

>>> copy_versions(open_registry(src), open_registry(dst), versions(src_reg, "alice/opsd-patch"))  # doctest: +SKIP

Laptop side.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import NotFoundError, UsageError
from ..registry.base import Progress, PublishedVersion, PublishResult, Registry, parse_ref

VERIFIED = "verified"
NOT_VERIFIED = "signature not verified here"


@dataclass(frozen=True)
class CarriedSignature:
    """One signature envelope of a copied version, and what became of it."""

    key_ids: tuple
    status: str  # VERIFIED | NOT_VERIFIED
    copied: bool  # the target now serves it
    why_not: str = ""  # when not copied: why (never silently)


@dataclass(frozen=True)
class Copied:
    version: PublishedVersion
    result: PublishResult
    signatures: tuple = ()  # CarriedSignature per envelope the source holds
    yank_statements: int = 0  # yank and unyank statements carried with it

    @property
    def label(self) -> str:
        """``signed``, ``signature not verified here``, or ``unsigned``, as the copy may claim it."""
        stored = [s for s in self.signatures if s.copied]
        if any(s.status == VERIFIED for s in stored):
            return "signed"
        return NOT_VERIFIED if stored else "unsigned"


def checked_envelopes(info: PublishedVersion, envelopes: list, trust, require: bool) -> list:
    """``[(envelope, status)]`` for the envelopes *info*'s source holds, each checked before it
    may be copied (SPEC §6): an owner with trusted keys here — the signature over the exact
    bytes, the statement against the version, the key trusted (``verified``); else the
    statement against the version only (``signature not verified here``). One that fails is
    a :class:`SignatureError` (nothing is copied), and so is no envelope at all for an owner
    with trusted keys (a stripped signature is an error, never a downgrade). With *require*, a version needs a verified
    one, and only verified ones are kept."""
    from ..cluster.dsse import check_statement, verify_envelope
    from ..errors import SignatureError

    out = []
    trusted = trust.key_ids(info.owner)
    if trusted and not envelopes:
        raise SignatureError(f"{info.ref} has no signature, but owner {info.owner} has trusted keys: refusing to copy it",
                             hint="nothing was copied; a signature may have been stripped at the source — do not use "
                                  "this version until its publisher signs it again (forge plugin sign REF)")
    for envelope in envelopes:
        try:
            if trusted:
                verify_envelope(envelope, owner=info.owner, name=info.name, version=info.version,
                                tree_digest=info.tree_digest, trust=trust, artifact_digest=info.artifact_digest)
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


def refuse_data_prep(info: PublishedVersion) -> None:
    """A bundle carries a job's plugins: never a data-prep plugin (they never enter a job)."""
    if (info.manifest or {}).get("kind") == "data-prep":
        raise UsageError(f"{info.ref} is a data-prep plugin; data-prep plugins never enter a job (they run on the laptop, with forge prep)",
                         hint="a bundle carries a locked job's plugins; share data-prep plugins with forge plugin copy")


def matching_versions(registry: Registry, ref: str) -> list[PublishedVersion]:
    """Every version of *ref* in *registry*: ``owner/name`` = all, ``@SPECIFIER`` = all it admits."""
    from packaging.specifiers import SpecifierSet

    r = parse_ref(ref)
    versions = registry.versions(r.owner, r.name)
    if r.specifier is not None:
        spec = SpecifierSet(r.specifier)
        versions = [v for v in versions if spec.contains(v, prereleases=True)]
    if not versions:
        raise NotFoundError(f"no version of {ref} in {registry.url}",
                            hint="list what is there with: forge plugin list --registry URL")
    return [registry.get(r.owner, r.name, v) for v in versions]


def locked_versions(registry: Registry, lock) -> list[PublishedVersion]:
    """The versions a lock names, as *registry* serves them; a moved tag is refused."""
    from ..experiment.lock import moved_tag_error

    out = []
    for entry in lock.plugins:
        try:
            info = registry.get(entry.owner, entry.name, entry.version)
        except NotFoundError:
            raise NotFoundError(f"the lock pins {entry.ref}, which {registry.url} does not have",
                                hint="copy from the registry the lock was made with (--from URL)") from None
        if info.tree_digest != entry.tree_digest:
            raise moved_tag_error(entry, info.tree_digest, registry, lock.registry)
        out.append(info)
    return out


def copy_versions(source: Registry, target: Registry, versions: list[PublishedVersion],
                  progress=None, *, trust=None, require_signatures: bool = False) -> list[Copied]:
    """Publish each of *versions* (from *source*) to *target*, with its signature envelopes.

    *progress(description, total)* is a context manager yielding a ``(done, total)``
    callback or None. Data-prep plugins are copied too: they travel between laptops
    (SPEC §3), they only never enter a job. Before anything is copied, every envelope is
    checked (:func:`checked_envelopes`; *trust* defaults to the user's trust file). Every
    envelope (one per key that signed the version) is attached on the target with its
    Sigstore bundle; one the target did not take is reported in :attr:`Copied.signatures`,
    never dropped silently. The version's yank and unyank statements travel with it.
    """
    from ..registry.cache import fetch
    from ..registry.verified import check_record, registry_label, tree_of_archive
    from ..registry.yank import carried_statements
    from ..signing import load_trust, stored_envelopes

    trust = trust if trust is not None else load_trust()
    checked = [checked_envelopes(info, stored_envelopes(source, info), trust, require_signatures) for info in versions]
    out = []
    for info, envelopes in zip(versions, checked):
        archive = fetch(source, info)
        # an edited record is never carried: its metadata must be what the verified tree says
        tree = tree_of_archive(archive, info.tree_digest, info.ref)
        check_record(registry_label(source.url), "the registry record", info.ref, tree, info.manifest, info.top_level,
                     info.files or None)
        info = replace(info, size=archive.stat().st_size)
        # verified envelopes first: where the target keeps one per version, that is the one it keeps
        ordered = [e for e in envelopes if e[1] == VERIFIED] + [e for e in envelopes if e[1] != VERIFIED]
        first = ordered[0][0] if ordered else None
        result = _publish(target, archive, info, first, progress)
        carried = []
        for envelope, status in ordered:
            from ..experiment.locked_signature import key_ids

            stored = target.attach_signature(result.version, envelope)
            carried.append(CarriedSignature(
                key_ids=tuple(key_ids(envelope)), status=status, copied=stored,
                why_not="" if stored else f"registry {target.url} no longer serves {result.version.ref} as copied"))
        statements = carried_statements(source, info.owner, info.name, info.version, info.tree_digest, trust=trust)
        for statement in statements:  # a yank travels with its version
            target.attach_yank_statement(info.owner, info.name, result.version.version, info.tree_digest, statement)
        out.append(Copied(version=info, result=result, signatures=tuple(carried), yank_statements=len(statements)))
    return out


def _publish(target: Registry, archive, info: PublishedVersion, envelope: bytes | None, progress) -> PublishResult:
    if progress is None:
        return target.publish(archive, info, signature=envelope)
    with progress(f"copy {info.ref}", info.size) as update:
        update_fn: Progress | None = update
        if update_fn is None:
            return target.publish(archive, info, signature=envelope)
        return target.publish(archive, info, signature=envelope, progress=update_fn)
