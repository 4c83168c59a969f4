"""``forge bundle verify``: every blob digest, every tree digest, every signature of a bundle.

What is checked, whatever the order of the tar's members:

1. ``oci-layout`` and ``index.json`` are there and well formed; every member under
   ``blobs/sha256/`` hashes to its name (one byte changed anywhere is found).
2. The lock artifact is there; every version it names is in the index as
   ``owner/name:version``, with its manifest, config and archive blobs present; the manifest
   and config agree (tree digest, per-file map) and match the lock (tree and archive digest).
3. Every archive unpacks safely to exactly the locked tree digest.
4. Signatures: the same rule as ``forge lock`` — an owner with trusted keys must have a
   valid signature by one of them; with *require_signatures*, every owner must.

An error names the plugin and, where it applies, the member (``blobs/sha256/<hex>``).

Laptop side.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import closing, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, ContextManager

from ..cluster.jsonload import loads as load_json
from ..errors import BundleError, ForgeError
from ..registry.artifact import (
    ARTIFACT_TYPE,
    SIGNATURE_TYPE,
    YANK_TYPE,
    envelope_descriptor,
    is_plugin_manifest,
    plugin_parts,
    plugin_version,
)
from ..registry.base import Progress, PublishedVersion
from ..registry.oci_client import OCI_INDEX
from .create import LOCK_ARTIFACT_TYPE, LOCK_LAYER_TYPE, ref_name
from .layout import OCI_LAYOUT, REF_NAME, LayoutReader, blob_member

SMALL_MAX = 64 << 20  # manifests, configs, envelopes, the lock


@dataclass(frozen=True)
class VerifiedPlugin:
    info: PublishedVersion
    manifest_digest: str
    archive: Path | None  # the archive, extracted (only while the bundle is open with keep_archives)
    envelope: bytes | None
    signature: str  # verified | unsigned | unverified
    others: tuple = ()  # the bundle's other envelopes whose statement names this version (another key's)
    yank_statements: tuple = ()  # the version's yank and unyank statements the bundle carries


@dataclass
class VerifiedBundle:
    path: Path
    lock_bytes: bytes
    plugins: list = field(default_factory=list)
    blobs: int = 0
    size: int = 0


class _Envelopes:
    """The bundle's envelopes, as :class:`starforge.registry.store.PluginStore` asks a registry for them."""

    def __init__(self, envelopes: dict, url: str) -> None:
        self.envelopes = envelopes
        self.url = url

    def sigstore_bundles(self, info: PublishedVersion) -> list:
        return []  # a bundle carries envelopes; their Sigstore bundles are made again where it is pushed

    def signature(self, info: PublishedVersion) -> bytes | None:
        found = self.envelopes.get(info.ref) or []
        return found[-1] if found else None

    def signatures(self, info: PublishedVersion) -> list:
        return list(self.envelopes.get(info.ref) or [])


def verify_bundle(
    path: str | os.PathLike,
    *,
    require_signatures: bool = False,
    trust=None,
    workdir: str | os.PathLike | None = None,
    progress: Callable[[str, int], ContextManager[Progress | None]] | None = None,
) -> VerifiedBundle:
    """Check the bundle at *path*; return what it holds. Raise :class:`BundleError` (or
    :class:`~starforge.errors.SignatureError`) naming the plugin and member at fault.

    With *workdir*, each plugin's archive is left there (``VerifiedPlugin.archive``) for
    ``forge bundle push``; otherwise archives are unpacked in a temporary directory and removed.
    """
    path = Path(path)
    with closing(LayoutReader(path)) as reader, tempfile.TemporaryDirectory(prefix="forge-bundle-") as tmp:
        where = Path(workdir) if workdir is not None else Path(tmp)
        return _verify(reader, where, require_signatures, trust, workdir is not None, progress)


def _verify(reader: LayoutReader, work: Path, require: bool, trust, keep: bool, progress) -> VerifiedBundle:
    """The steps of :func:`verify_bundle`, in order: the layout, the lock, what the index
    holds for each locked version, every blob's content, then each plugin's tree and signature."""
    entries = _index_entries(reader)
    blobs = _Blobs(reader)
    lock, lock_bytes = _read_lock(blobs, entries)
    by_ref = _by_ref(reader.path, entries)
    signed, yanks = _attached(blobs, entries)
    found = []
    yanked_of: dict[str, tuple] = {}
    for entry in lock.plugins:
        manifest_digest, info, envelopes, statements = _plugin_of(blobs, entry, by_ref, signed, yanks)
        yanked_of[entry.ref] = statements
        found.append((entry, manifest_digest, info, envelopes))
    digests, kept = _hash_blobs(blobs, work, {info.artifact_digest for _, _, info, _ in found}, progress)

    from ..registry.store import PluginStore

    name = reader.path
    store = PluginStore(_Envelopes({info.ref: envs for _, _, info, envs in found if envs}, f"bundle {name}"), trust=trust)
    result = VerifiedBundle(path=name, lock_bytes=lock_bytes, blobs=len(digests), size=reader.file_size)
    for entry, manifest_digest, info, envelopes in found:
        result.plugins.append(_checked_plugin(store, name, work, entry, manifest_digest, info, envelopes,
                                              kept[info.artifact_digest], require, keep, yanked_of[entry.ref]))
    return result


def _index_entries(reader: LayoutReader) -> list:
    """The index's manifest descriptors, once the bundle is whole and its ``oci-layout`` and
    ``index.json`` are what an OCI layout holds."""
    name = reader.path
    if reader.cut_after is not None:
        what = _member_role(reader, reader.cut_after)
        raise BundleError(f"bundle {name} is truncated: it ends inside or just after {reader.cut_after}"
                          + (f" ({what})" if what else ""),
                          hint="copy the bundle again; compare its size and sha256 with the original")
    for required in ("oci-layout", "index.json"):
        if not reader.has(required):
            raise BundleError(f"bundle {name} has no {required}", hint="this is not a StarForge bundle, or it was altered")
    try:
        layout = load_json(reader.read("oci-layout", 4096))
        index = load_json(reader.read("index.json", SMALL_MAX))
    except ValueError as exc:
        raise BundleError(f"bundle {name}: oci-layout or index.json is not valid JSON ({exc})",
                          hint="the bundle was altered; create it again") from None
    if layout != json.loads(OCI_LAYOUT):
        raise BundleError(f"bundle {name}: oci-layout is {layout!r}, expected {OCI_LAYOUT.decode()}")
    entries = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(index, dict) or index.get("mediaType", OCI_INDEX) != OCI_INDEX or not isinstance(entries, list) \
            or not all(isinstance(d, dict) and isinstance(d.get("digest"), str) for d in entries):
        raise BundleError(f"bundle {name}: index.json is not an OCI image index")
    return entries


class _Blobs:
    """The bundle's blobs as they are asked for, remembering who each belongs to, so an
    error (a missing blob, one whose content is not its name) can name the plugin."""

    def __init__(self, reader: LayoutReader) -> None:
        self.reader = reader
        self.name = reader.path
        self.owners: dict[str, str] = {}

    def blob(self, digest: str, what: str, limit: int | None = None) -> bytes | None:
        """The blob *digest* (*what* it is), read up to *limit* bytes; None without a limit (only its presence checked)."""
        member = blob_member(digest)
        self.owners.setdefault(digest, what)
        if not self.reader.has(member):
            raise BundleError(f"bundle {self.name}: {what} is missing ({member})",
                              hint="the bundle is incomplete or was altered; create it again")
        return self.reader.read(member, limit) if limit is not None else None

    def checked(self, digest: str, what: str) -> bytes:
        """A small blob (a config, an envelope, the lock), checked against its digest."""
        raw = self.blob(digest, what, SMALL_MAX)
        assert raw is not None
        _check_digest(raw, digest, self.name, what)
        return raw

    def manifest(self, desc: dict, what: str) -> dict:
        """The JSON object of the manifest *desc* points at."""
        raw = self.checked(desc["digest"], what)
        try:
            data = load_json(raw)
        except ValueError as exc:
            raise BundleError(f"bundle {self.name}: {what} ({blob_member(desc['digest'])}) is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise BundleError(f"bundle {self.name}: {what} ({blob_member(desc['digest'])}) is not a manifest")
        return data


def _read_lock(blobs: _Blobs, entries: list) -> tuple:
    """``(LockFile, its bytes)``: the one lock artifact of the index."""
    from ..experiment.lockfile import LockFile

    name = blobs.name
    locks = [d for d in entries if d.get("artifactType") == LOCK_ARTIFACT_TYPE]
    if len(locks) != 1:
        raise BundleError(f"bundle {name} holds {len(locks)} lock files, expected one",
                          hint="the index was altered; create the bundle again")
    lock_manifest = blobs.manifest(locks[0], "the lock's manifest")
    lock_layers = [d for d in lock_manifest.get("layers") or [] if isinstance(d, dict) and d.get("mediaType") == LOCK_LAYER_TYPE]
    if len(lock_layers) != 1:
        raise BundleError(f"bundle {name}: the lock's manifest has no lock layer")
    lock_bytes = blobs.checked(lock_layers[0]["digest"], "the lock file")
    try:
        lock = LockFile.from_dict(load_json(lock_bytes), f"bundle {name}: plugins.lock.json")
    except ValueError as exc:
        raise BundleError(f"bundle {name}: plugins.lock.json is not valid JSON ({exc})") from None
    return lock, lock_bytes


def _by_ref(name: Path, entries: list) -> dict:
    """The index's descriptors by their ``owner/name:version`` ref name, each named once."""
    by_ref = {}
    for d in entries:
        ref = (d.get("annotations") or {}).get(REF_NAME)
        if ref is not None:
            if ref in by_ref:
                raise BundleError(f"bundle {name}: index.json names {ref} twice", hint="the index was altered")
            by_ref[ref] = d
    return by_ref


def _attached(blobs: _Blobs, entries: list) -> tuple:
    """``(signature manifests, yank statement manifests)``, each by subject digest (None: naming no subject)."""
    signed: dict[str | None, list] = {}
    yanks: dict[str | None, list] = {}
    for sd in (d for d in entries if d.get("artifactType") in (SIGNATURE_TYPE, YANK_TYPE)):
        sig = blobs.manifest(sd, "a signature manifest" if sd.get("artifactType") == SIGNATURE_TYPE else "a yank statement manifest")
        (signed if sd.get("artifactType") == SIGNATURE_TYPE else yanks).setdefault(
            (sig.get("subject") or {}).get("digest"), []).append(sig)
    return signed, yanks


def _plugin_of(blobs: _Blobs, entry, by_ref: dict, signed: dict, yanks: dict) -> tuple:
    """``(manifest digest, PublishedVersion, envelopes, yank statements)`` of the locked
    *entry*: its manifest and config as the index holds them, agreeing with the lock, its
    archive present, and the envelopes and statements attached to it."""
    name = blobs.name
    ref = ref_name(entry.owner, entry.name, entry.version)
    desc = by_ref.get(ref)
    if desc is None:
        raise BundleError(f"bundle {name}: {entry.ref} is in the lock but not in index.json",
                          hint="the bundle is incomplete or its index was altered; create it again")
    data = blobs.manifest(desc, f"the manifest of {entry.ref}")
    if not is_plugin_manifest(data) or desc.get("artifactType", ARTIFACT_TYPE) != ARTIFACT_TYPE:
        raise BundleError(f"bundle {name}: {ref} in index.json is not a plugin manifest")
    where = f"bundle {name}: {entry.ref} ({blob_member(desc['digest'])})"
    _, config_desc, layer_desc = plugin_parts(data, where)
    config_raw = blobs.checked(config_desc["digest"], f"the config of {entry.ref}")
    info = _as_bundle_error(lambda: plugin_version((entry.owner, entry.name, entry.version), data, config_raw, where, "bundle"))
    if info.tree_digest != entry.tree_digest or info.artifact_digest != entry.artifact_digest:
        raise BundleError(f"{where}: holds tree digest {info.tree_digest} (archive {info.artifact_digest}), "
                          f"the lock names {entry.tree_digest} (archive {entry.artifact_digest})",
                          hint="the bundle does not carry what its lock names; it was altered")
    blobs.blob(layer_desc["digest"], f"the archive of {entry.ref}")
    envelopes = []
    for sig in signed.get(desc["digest"], []):
        layer = envelope_descriptor(sig, desc["digest"])
        if layer is not None:
            blobs.owners[layer["digest"]] = f"the signature of {entry.ref}"
            envelopes.append(blobs.checked(layer["digest"], f"the signature of {entry.ref}"))
    statements = []
    for st in yanks.get(desc["digest"], []):
        layer = envelope_descriptor(st, desc["digest"])
        if layer is not None:
            statements.append(blobs.checked(layer["digest"], f"a yank statement of {entry.ref}"))
    return desc["digest"], info, envelopes, _statements(statements, info, name)


def _hash_blobs(blobs: _Blobs, work: Path, archives: set, progress) -> tuple:
    """``(every blob digest, {archive digest: its copy in work})``: every blob's content
    checked against its name (archives included, kept), with progress."""
    reader, name = blobs.reader, blobs.name
    digests = reader.blob_digests()
    total = sum(reader.size(blob_member(d)) for d in digests)
    kept: dict[str, Path] = {}
    with (progress(f"verify {name.name}", total) if progress else nullcontext()) as update:
        done = 0
        for digest in digests:
            member = blob_member(digest)
            target = work / digest.partition(":")[2] if digest in archives else None
            done = _hash_member(reader, member, digest, blobs.owners.get(digest, "a blob"), target, update, done, total)
            if target is not None:
                kept[digest] = target
    return digests, kept


def _checked_plugin(store, name: Path, work: Path, entry, manifest_digest: str, info: PublishedVersion, envelopes: list,
                    archive: Path, require: bool, keep: bool, yank_statements: tuple) -> VerifiedPlugin:
    """One locked plugin of the bundle: its archive unpacked to the locked tree, the config
    and the lock entry checked against that tree, and its signature judged by *store*."""
    from ..experiment.lock import check_entry
    from ..registry.signature_facts import missing_error
    from ..registry.store import Pin, tree_of_archive
    from ..registry.verified import check_record

    envelope = envelopes[-1] if envelopes else None
    try:
        verified = tree_of_archive(archive, info.tree_digest, entry.ref, within=work)
    except ForgeError as exc:
        raise BundleError(f"bundle {name}: the archive of {entry.ref} ({blob_member(info.artifact_digest)}) "
                          f"is refused: {exc.message}", hint="the bundle was altered; create it again") from None
    # the metadata the far side would use: the config and the lock entry, each against the tree
    check_record(f"bundle {name}", "the config", entry.ref, verified, info.manifest, info.top_level, info.files or None,
                 hint="do not push or use this bundle; create it again from a registry you trust")
    check_entry(entry, verified, f"bundle {name}: plugins.lock.json")
    info = replace(info, size=archive.stat().st_size, signed=envelope is not None)
    status = store.fetch_verified(info, require=require).status
    pin = Pin.of(entry)
    if pin.enforced:
        # the lock says who signed it: the bundle must carry a valid envelope by that key
        envelope = store.locked_envelope(pin, envelopes)
        if envelope is None:
            raise missing_error(entry, envelopes, f"bundle {name}")
    if entry.signed and envelope is None:
        from ..errors import SignatureError

        raise SignatureError(f"{entry.ref} was locked with a signature envelope; this bundle carries none",
                             hint="a signature may have been stripped; create the bundle again from the registry")
    return VerifiedPlugin(info=info, manifest_digest=manifest_digest, archive=archive if keep else None,
                          envelope=envelope, signature=status,
                          others=_naming(info, [e for e in envelopes if e != envelope]), yank_statements=yank_statements)


def _statements(statements: list, info: PublishedVersion, bundle: Path) -> tuple:
    """The yank statements of *info* the bundle carries; one for another version or content is an altered bundle."""
    from ..errors import TamperedError
    from ..registry.yank import parse_statement

    for one in statements:
        try:
            parse_statement(one, owner=info.owner, name=info.name, version=info.version, tree_digest=info.tree_digest,
                            where=f"bundle {bundle}")
        except TamperedError as exc:
            raise BundleError(exc.message, hint="do not push or use this bundle; create it again from a registry you "
                                                "trust") from None
    return tuple(statements)


def _naming(info: PublishedVersion, envelopes: list) -> tuple:
    """The envelopes whose statement names *info* (name, version, tree, archive): the others are never carried on."""
    from ..cluster.dsse import check_statement
    from ..errors import SignatureError

    out = []
    for envelope in envelopes:
        try:
            check_statement(envelope, owner=info.owner, name=info.name, version=info.version,
                            tree_digest=info.tree_digest, artifact_digest=info.artifact_digest)
        except SignatureError:
            continue
        out.append(envelope)
    return tuple(out)


def _member_role(reader: LayoutReader, member: str) -> str | None:
    """Best effort, for a damaged bundle: which plugin's manifest, config or archive *member* is."""
    roles: dict[str, str] = {}

    def blob_json(digest: str):
        return load_json(reader.read(blob_member(digest), SMALL_MAX))

    try:
        descs = load_json(reader.read("index.json", SMALL_MAX)).get("manifests") or []
    except (BundleError, KeyError, ValueError, TypeError, AttributeError):
        return None
    for desc in descs:
        try:
            ref = (desc.get("annotations") or {}).get(REF_NAME, "")
            owner, _, rest = ref.partition("/")
            label = f"{owner}/{rest.replace(':', '@', 1)}"
            roles[blob_member(desc["digest"])] = f"the manifest of {label}"
            data = blob_json(desc["digest"])
            if desc.get("artifactType") == LOCK_ARTIFACT_TYPE:
                lock = load_json(reader.read(blob_member(data["layers"][0]["digest"]), SMALL_MAX))
                for p in lock.get("plugins") or []:
                    roles.setdefault(blob_member(p["artifact_digest"]),
                                     f"the archive of {p['owner']}/{p['name']}@{p['version']}")
                continue
            roles[blob_member(data["config"]["digest"])] = f"the config of {label}"
            for layer in data.get("layers") or []:
                roles[blob_member(layer["digest"])] = f"the archive of {label}"
        except (BundleError, KeyError, ValueError, TypeError, AttributeError, IndexError):
            continue
    return roles.get(member)


def _check_digest(data: bytes, digest: str, bundle: Path, what: str) -> None:
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise BundleError(f"bundle {bundle}: {what} ({blob_member(digest)}) was altered: its content has digest {actual}",
                          hint="do not use this bundle; create it again from the lock")


def _hash_member(reader: LayoutReader, member: str, digest: str, what: str, target: Path | None,
                 update, done: int, total: int) -> int:
    h = hashlib.sha256()
    out = open(target, "wb") if target is not None else None
    try:
        for chunk in _with_owner(reader, member, what):
            h.update(chunk)
            if out is not None:
                out.write(chunk)
            done += len(chunk)
            if update:
                update(done, total)
    finally:
        if out is not None:
            out.close()
    if "sha256:" + h.hexdigest() != digest:
        raise BundleError(f"bundle {reader.path}: {what} ({member}) was altered: its content has digest sha256:{h.hexdigest()}",
                          hint="do not use this bundle; create it again from the lock")
    return done


def _with_owner(reader: LayoutReader, member: str, what: str):
    try:
        yield from reader.chunks(member)
    except BundleError as exc:
        raise BundleError(f"{exc.message} ({what})", hint=exc.hint) from None


def _as_bundle_error(build):
    from ..errors import RegistryError, TamperedError

    try:
        return build()
    except TamperedError:
        raise
    except RegistryError as exc:
        raise BundleError(exc.message, hint=exc.hint) from None
