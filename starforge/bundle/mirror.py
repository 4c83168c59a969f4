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


@dataclass(frozen=True)
class Copied:
    version: PublishedVersion
    result: PublishResult


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
        if info.tree_digest != entry.digest:
            raise moved_tag_error(entry, info.tree_digest, registry, lock.registry)
        out.append(info)
    return out


def copy_versions(source: Registry, target: Registry, versions: list[PublishedVersion],
                  progress=None) -> list[Copied]:
    """Publish each of *versions* (from *source*) to *target*, with its signature envelope.

    *progress(description, total)* is a context manager yielding a ``(done, total)``
    callback or None. Data-prep plugins are copied too: they travel between laptops
    (SPEC §3), they only never enter a job.
    """
    from ..registry.cache import fetch

    out = []
    from ..registry.verified import check_record, registry_label, tree_of_archive

    for info in versions:
        archive = fetch(source, info)
        # an edited record is never carried: its metadata must be what the verified tree says
        tree = tree_of_archive(archive, info.tree_digest, info.ref)
        check_record(registry_label(source.url), "the registry record", info.ref, tree, info.manifest, info.top_level,
                     info.files or None)
        info = replace(info, size=archive.stat().st_size)
        envelope = source.signature(info) if info.signed else None
        out.append(Copied(version=info, result=_publish(target, archive, info, envelope, progress)))
    return out


def _publish(target: Registry, archive, info: PublishedVersion, envelope: bytes | None, progress) -> PublishResult:
    if progress is None:
        return target.publish(archive, info, signature=envelope)
    with progress(f"copy {info.ref}", info.size) as update:
        update_fn: Progress | None = update
        if update_fn is None:
            return target.publish(archive, info, signature=envelope)
        return target.publish(archive, info, signature=envelope, progress=update_fn)
