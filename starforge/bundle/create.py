"""``forge bundle create``: a locked experiment's plugins as one OCI image layout tar.

For every version in ``plugins.lock.json`` the bundle holds the artifacts ``forge plugin
publish`` writes to an OCI registry (:mod:`starforge.registry.artifact`): the plugin
manifest named ``owner/name:version`` in ``index.json``, its config blob, the package
archive as its layer, and the signature manifest and envelope when the version is signed.
The lock travels as one more artifact, named ``plugins.lock.json``. Built-in plugins
(``common/algorithms/``) travel with the recipe, not the bundle.

>>> create_bundle("exp", "exp.bundle.tar")        # doctest: +SKIP
CreatedBundle(path=PosixPath('exp.bundle.tar'), size=..., plugins=(...), builtins=('reward-clip',))

Laptop side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, ContextManager

from ..errors import ArchiveError, BundleError, LockError, UsageError
from ..registry.artifact import (
    ARTIFACT_TYPE,
    SIGNATURE_TYPE,
    YANK_TYPE,
    PluginArtifact,
    canonical_json,
    descriptor,
    plugin_artifact,
    signature_artifact,
)
from ..registry.base import Progress
from ..registry.oci_client import EMPTY_JSON, OCI_EMPTY, OCI_INDEX, OCI_MANIFEST
from .layout import REF_NAME, Blob, DamagedBlob, write_layout

LOCK_ARTIFACT_TYPE = "application/vnd.starforge.lock.v1"
LOCK_LAYER_TYPE = "application/vnd.starforge.lock.v1+json"
LOCK_REF = "plugins.lock.json"


def ref_name(owner: str, name: str, version: str) -> str:
    """The ``org.opencontainers.image.ref.name`` of a plugin version: ``owner/name:version``."""
    return f"{owner}/{name}:{version}"


@dataclass(frozen=True)
class BundledPlugin:
    ref: str
    tree_digest: str
    artifact_digest: str
    manifest_digest: str
    size: int
    signed: bool


@dataclass(frozen=True)
class CreatedBundle:
    path: Path
    size: int
    plugins: tuple
    builtins: tuple  # names of the recipe's built-ins (not in the bundle)


def lock_artifact(lock_bytes: bytes) -> tuple[bytes, list[Blob]]:
    """The manifest carrying the lock file, and its blobs."""
    layer = descriptor(LOCK_LAYER_TYPE, lock_bytes, annotations={"org.opencontainers.image.title": LOCK_REF})
    body = canonical_json({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": LOCK_ARTIFACT_TYPE,
        "config": descriptor(OCI_EMPTY, EMPTY_JSON),
        "layers": [layer],
    })
    return body, [Blob(layer["digest"], len(lock_bytes), lock_bytes), Blob(descriptor(OCI_EMPTY, EMPTY_JSON)["digest"], 2, EMPTY_JSON)]


def manifest_blob(body: bytes) -> Blob:
    return Blob(descriptor(OCI_MANIFEST, body)["digest"], len(body), body)


def create_bundle(
    directory: str | os.PathLike,
    dest: str | os.PathLike,
    *,
    registry: str | None = None,
    insecure: bool = False,
    progress: Callable[[str, int], ContextManager[Progress | None]] | None = None,
) -> CreatedBundle:
    """Write the bundle of the experiment at *directory* to *dest*.

    The lock must be fresh (as for ``forge submit``); every locked version is fetched
    through the cache by its archive digest and must still have its locked tree digest in
    the registry (a moved tag is refused, naming both digests). *progress(description,
    total)* is a context manager yielding a ``(done, total)`` callback or None.
    """
    from ..experiment.config import load_experiment
    from ..experiment.lock import fresh_lock, open_experiment_registry
    from ..registry.cache import fetch
    from ..registry.yank import carried_statements

    exp = load_experiment(Path(directory))
    lock = fresh_lock(exp)
    lock_bytes = exp.lock_path.read_bytes()
    dest = Path(dest)
    if dest.is_dir():
        raise UsageError(f"{dest} is a directory", hint="name the bundle file: forge bundle create -o FILE")
    if not dest.parent.is_dir():
        raise UsageError(f"{dest.parent} does not exist", hint="create the directory first or choose another -o FILE")
    reg = open_experiment_registry(exp, registry, insecure=insecure)

    try:
        versions = [(*_locked_version(reg, lock, entry, fetch),
                     carried_statements(reg, entry.owner, entry.name, entry.version, entry.tree_digest))
                    for entry in lock.plugins]  # each version with its yank and unyank statements
        size, bundled = write_bundle(dest, lock_bytes, versions, progress)
    except DamagedBlob as exc:
        exc.path.unlink(missing_ok=True)  # a damaged cache entry: the next run fetches it again
        raise BundleError(f"the cached archive {exc.path.name} is damaged; nothing was written",
                          hint="the damaged copy was removed from the cache; run the command again to fetch it") from None
    return CreatedBundle(path=dest, size=size, plugins=tuple(bundled), builtins=tuple(exp.recipe_plugins))


def write_bundle(dest: Path, lock_bytes: bytes, versions: list, progress=None) -> tuple[int, list]:
    """Write the layout tar of *versions* — ``(PublishedVersion, archive path, envelope or None
    [, more envelopes[, yank statements]])`` in lock order — and the lock; return its size and
    what it holds. Envelopes and yank statements are referrers of their version's manifest."""
    blobs: list[Blob] = []
    manifests: list[dict] = []
    signatures: list[dict] = []
    bundled = []
    for served, archive, envelope, *more in versions:
        art = plugin_artifact(served, served.artifact_digest, archive.stat().st_size)
        blobs += [manifest_blob(art.manifest), Blob(art.config_desc["digest"], len(art.config), art.config),
                  Blob(served.artifact_digest, art.layer_desc["size"], archive)]
        manifests.append(_plugin_descriptor(art, served))
        carried = ([envelope] if envelope is not None else []) + [e for e in (more[0] if more else ()) if e != envelope]
        kinds = [(one, SIGNATURE_TYPE) for one in carried] + [(one, YANK_TYPE) for one in (more[1] if len(more) > 1 else ())]
        for one, kind in kinds:
            sig = signature_artifact(art.subject, one, art.ref, kind)
            blobs += [manifest_blob(sig.manifest), Blob(sig.envelope_desc["digest"], len(one), one),
                      Blob(descriptor(OCI_EMPTY, EMPTY_JSON)["digest"], 2, EMPTY_JSON)]
            signatures.append(sig.referrer)
        bundled.append(BundledPlugin(ref=served.ref, tree_digest=served.tree_digest,
                                     artifact_digest=served.artifact_digest, manifest_digest=art.digest,
                                     size=art.layer_desc["size"], signed=envelope is not None))
    lock_body, lock_blobs = lock_artifact(lock_bytes)
    blobs += [manifest_blob(lock_body), *lock_blobs]
    manifests.append({**descriptor(OCI_MANIFEST, lock_body), "artifactType": LOCK_ARTIFACT_TYPE,
                      "annotations": {REF_NAME: LOCK_REF}})
    index = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests + signatures})

    total = sum({b.digest: b.size for b in blobs}.values())
    if progress is None:
        return write_layout(dest, index, blobs), bundled
    with progress(f"bundle {dest.name}", total) as update:
        return write_layout(dest, index, blobs, update), bundled


def _plugin_descriptor(art: PluginArtifact, served) -> dict:
    return {**art.subject, "artifactType": ARTIFACT_TYPE,
            "annotations": {REF_NAME: ref_name(served.owner, served.name, art.tag)}}


def _locked_version(reg, lock, entry, fetch):
    """``(PublishedVersion, cached archive, envelope or None, other envelopes)`` of one lock entry,
    checked against the lock: the other envelopes are every other one the registry serves
    whose statement names this version, its tree and its archive (several keys may sign one
    version: all of them travel)."""
    from ..experiment.lock import get_locked, moved_tag_error
    from ..registry.cache import cached_path

    served = get_locked(reg, entry, lock.registry)
    if served.tree_digest != entry.tree_digest:
        raise moved_tag_error(entry, served.tree_digest, reg, lock.registry)
    if (served.manifest or {}).get("kind") == "data-prep":
        raise UsageError(f"{entry.ref} is a data-prep plugin; data-prep plugins never enter a job (they run on the laptop, with forge prep)",
                         hint="a bundle carries a locked job's plugins; share data-prep plugins with forge plugin copy")
    # The lock's archive digest is what the far side fetches by: bundle exactly that archive
    # (the registry's record of the version, asked for the archive the lock names).
    if served.artifact_digest != entry.artifact_digest:
        served = replace(served, artifact_digest=entry.artifact_digest, size=0)
    # A cached archive is hashed once, while it is copied into the bundle (write_layout
    # refuses one that does not match); only a missing one is fetched (and verified) here.
    archive = cached_path(entry.artifact_digest)
    if not archive.is_file():
        archive = fetch(reg, served)
    # the metadata comes from the verified tree: a record or lock entry that disagrees is refused
    from ..experiment.lock import check_entry
    from ..registry.verified import check_record, registry_label, tree_of_archive

    try:
        tree = tree_of_archive(archive, entry.tree_digest, entry.ref)
    except ArchiveError:
        from ..cluster.digest import hash_file

        if "sha256:" + hash_file(archive) != entry.artifact_digest:
            raise DamagedBlob(f"{archive} is damaged", path=archive) from None
        raise
    check_record(registry_label(reg.url), "the registry record", served.ref, tree, served.manifest, served.top_level,
                 served.files or None)
    check_entry(entry, tree)
    from ..experiment.locked_signature import enforced, staged_envelope
    from ..signing import load_trust

    if enforced(entry):
        # the envelope by the locked key (cache first, else the registry): the one the lock names
        envelope = staged_envelope(entry, lambda: (reg, served), load_trust())
    else:
        envelope = reg.signature(served) if served.signed or entry.signed else None
    _check_envelope(entry, envelope)
    if envelope is None and load_trust().key_ids(served.owner):
        from ..errors import SignatureError

        raise SignatureError(
            f"{served.ref} has no signature, but owner {served.owner} has trusted keys: refusing to bundle it",
            hint="a signature may have been stripped; do not use this version until its publisher signs it again "
                 "(forge plugin sign REF)")
    return replace(served, size=archive.stat().st_size), archive, envelope, _other_envelopes(reg, served, envelope)


def _other_envelopes(reg, served, envelope: bytes | None) -> list:
    from ..cluster.dsse import check_statement
    from ..errors import SignatureError
    from ..signing import stored_envelopes

    if envelope is None:
        return []
    out = []
    for other in stored_envelopes(reg, served):
        if other == envelope:
            continue
        try:
            check_statement(other, owner=served.owner, name=served.name, version=served.version,
                            tree_digest=served.tree_digest, artifact_digest=served.artifact_digest)
        except SignatureError:
            continue  # not this version's: never carried
        out.append(other)
    return out


def _check_envelope(entry, envelope: bytes | None) -> None:
    """A version the lock recorded as signed travels with a signature: a registry that
    serves none for it has lost or stripped it."""
    if entry.signed and envelope is None:
        raise LockError(
            f"{entry.ref}: the lock records signature envelope {entry.signature.get('envelope_digest')}, "
            "the registry serves none",
            hint="a signature may have been stripped; ask the publisher to sign it again (forge plugin publish DIR --sign)")
