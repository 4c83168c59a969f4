"""The directory registry: plugin versions stored in a plain directory tree.

Nothing to start; the embedded default lives under the user's data directory. Layout::

    forge-registry.json                      marker: {"schema": "forge/registry/v1"}
    blobs/sha256/<hex>                       archives, content-addressed
    plugins/<owner>/<name>/<version>.json    one metadata record per published version
    plugins/<owner>/<name>/<version>.dsse.json   the first signature envelope, when signed
    plugins/<owner>/<name>/<version>.signatures/<hex>.dsse.json      more envelopes (another key), by digest
    plugins/<owner>/<name>/<version>.signatures/<hex>.sigstore.json  the Sigstore bundle of envelope <hex>
    plugins/<owner>/<name>/<version>.yanks/<hex>.yank.json  yank and unyank statements, by digest
    plugins/<owner>/<name>/.lock             taken (fcntl.flock) by every publisher

Every file is written to a temporary name in its final directory and renamed into place,
so a reader sees a whole file or none. A version's metadata record is written last: it is
the commit point. Publishers of one plugin serialize on its lock file, so of two concurrent
publishes of one version exactly one wins; the other gets :class:`ImmutableVersionError`
(or a no-op success when it carried the same tree digest).

Laptop side (standard library and ``packaging``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from ..cluster import atomic
from ..cluster.digest import hash_file
from ..cluster.jsonload import loads as load_json
from ..cluster.names import is_plugin_name
from ..cluster.utctime import utc_now
from ..errors import ImmutableVersionError, NoRegistryError, NotFoundError, RegistryError, SignatureError, UsageError
from ..package_format.manifest import canonical_version
from ..state.directories import SHARED, disk_hint, make_dirs
from ..state.filelock import exclusive_lock
from .base import Progress, PublishedVersion, PublishResult, Registry, check_identity

MARKER = "forge-registry.json"
SCHEMA = "forge/registry/v1"
ENTRY_SCHEMA = "forge/registry-entry/v1"
SIG_SUFFIX = ".dsse.json"
MORE_SIGS = ".signatures"  # <version>.signatures/: envelopes beyond the first, and every envelope's bundle
BUNDLE_SUFFIX = ".sigstore.json"
YANKS = ".yanks"  # <version>.yanks/: the version's yank and unyank statements
_CHUNK = 1 << 20


class DirectoryRegistry(Registry):
    """A registry in a local (or shared) directory.

    >>> reg = DirectoryRegistry(Path("/srv/forge-registry"))
    >>> reg.versions("alice", "opsd-patch")        # doctest: +SKIP
    ['1.0.0', '1.2.0']
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).expanduser()
        self.url = str(self.root)

    def __repr__(self) -> str:
        return f"DirectoryRegistry({self.url!r})"

    # -- reading -------------------------------------------------------------------------

    def versions(self, owner: str, name: str) -> list:
        plugin_dir = self._plugin_dir(owner, name)
        if not self._readable():
            return []
        try:
            entries = os.listdir(plugin_dir)
        except FileNotFoundError:
            return []
        found = [e[: -len(".json")] for e in entries if e.endswith(".json") and not e.endswith(SIG_SUFFIX) and not e.startswith(".")]
        return sort_versions(v for v in found if _is_version(v))

    def get(self, owner: str, name: str, version: str) -> PublishedVersion:
        stored = self._stored_version(owner, name, version)
        if stored is None:
            if not self.versions(owner, name):
                raise NotFoundError(
                    f"no plugin {owner}/{name} in registry {self.url}",
                    hint="check the owner and name, or list what is there with 'forge plugin list'",
                )
            raise NotFoundError(
                f"{owner}/{name} has no version {version} in registry {self.url}",
                hint=f"available: {', '.join(self.versions(owner, name))}",
            )
        return self._read_entry(owner, name, stored)

    def plugins(self, owner: str | None = None) -> list:
        if owner is not None:
            _check_name(owner, "owner")
        if not self._readable():
            return []
        base = self.root / "plugins"
        owners = [owner] if owner is not None else _listdir(base)
        out = []
        for o in owners:
            if not _valid_name(o):
                continue
            for n in _listdir(base / o):
                if _valid_name(n) and self.versions(o, n):
                    out.append((o, n))
        return sorted(out)

    def download(self, info: PublishedVersion, dest: Path, progress: Progress | None = None) -> None:
        hex_ = _sha256_hex(info.artifact_digest)
        blob = self._blob_path(hex_)
        self._readable()
        try:
            src = open(blob, "rb")
        except PermissionError:
            raise RegistryError(f"{info.ref}: cannot read {blob}: permission denied") from None
        except FileNotFoundError:
            raise self._missing_blob(info, hex_) from None
        h = hashlib.sha256()
        total = info.size or os.fstat(src.fileno()).st_size
        done = 0
        try:
            with src, open(dest, "wb") as out:
                while chunk := src.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                    done += len(chunk)
                    if progress:
                        progress(done, total)
        except BaseException:
            _unlink(dest)
            raise
        if h.hexdigest() != hex_:
            _unlink(dest)
            raise RegistryError(
                f"{info.ref}: archive in registry {self.url} is corrupt "
                f"(expected sha256:{hex_}, got sha256:{h.hexdigest()}, {done} bytes)",
                hint="the registry directory is damaged; republish the plugin or restore the blob",
            )

    def signature(self, info: PublishedVersion) -> bytes | None:
        found = self.signatures(info)
        return found[-1] if found else None

    def signatures(self, info: PublishedVersion) -> list:
        """The first envelope, then the others oldest first."""
        stored = self._stored_version(info.owner, info.name, info.version)
        if stored is None:
            return []
        plugin_dir = self._plugin_dir(info.owner, info.name)
        out = []
        with contextlib.suppress(FileNotFoundError):
            out.append((plugin_dir / f"{stored}{SIG_SUFFIX}").read_bytes())
        more = plugin_dir / f"{stored}{MORE_SIGS}"
        extra = []
        for name in _listdir(more):
            if name.endswith(SIG_SUFFIX) and not name.startswith("."):
                with contextlib.suppress(FileNotFoundError):
                    extra.append(((more / name).stat().st_mtime_ns, name, (more / name).read_bytes()))
        out += [e for _, _, e in sorted(extra) if e not in out]
        return out

    def sigstore_bundles(self, info: PublishedVersion) -> list:
        """The Sigstore bundles stored beside the version's envelopes."""
        stored = self._stored_version(info.owner, info.name, info.version)
        if stored is None:
            return []
        more = self._plugin_dir(info.owner, info.name) / f"{stored}{MORE_SIGS}"
        out = []
        for name in sorted(_listdir(more)):
            if name.endswith(BUNDLE_SUFFIX) and not name.startswith("."):
                with contextlib.suppress(FileNotFoundError):
                    out.append((more / name).read_bytes())
        return out

    def yank_statements(self, owner: str, name: str, version: str, tree_digest: str) -> list:
        """The statements stored in ``<version>.yanks/``, each checked against its file name."""
        from .yank import envelope_name

        stored = self._published_as(owner, name, version, tree_digest)
        folder = self._plugin_dir(owner, name) / f"{stored}{YANKS}"
        out = []
        for entry in _listdir(folder):
            if entry.startswith(".") or not entry.endswith(".yank.json"):
                continue
            try:
                data = (folder / entry).read_bytes()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise RegistryError(f"cannot read {folder / entry}: {exc.strerror or exc}") from None
            if envelope_name(data) != entry:
                from ..errors import TamperedError

                raise TamperedError(f"registry {self.url} is tampered: {folder / entry} does not hold the statement "
                                    "its name says", hint="tell the registry's owner; do not use this version until "
                                    "it is restored")
            out.append(data)
        return out

    def attach_yank_statement(self, owner: str, name: str, version: str, tree_digest: str, envelope: bytes) -> None:
        from .yank import envelope_name

        plugin_dir = self._plugin_dir(owner, name)
        try:
            with exclusive_lock(plugin_dir / ".lock"):
                stored = self._published_as(owner, name, version, tree_digest)
                folder = plugin_dir / f"{stored}{YANKS}"
                make_dirs(folder, SHARED)
                atomic.sweep_stale(folder)
                target = folder / envelope_name(envelope)
                if not target.exists():
                    atomic.write_file(target, envelope, fsync=True)
        except OSError as exc:
            raise RegistryError(f"cannot store a yank statement of {owner}/{name}@{version} in registry {self.url}: "
                                f"{exc.filename or self.url}: {exc.strerror or exc}",
                                hint="check that the registry directory is writable by you") from None

    def _published_as(self, owner: str, name: str, version: str, tree_digest: str) -> str:
        """The stored spelling of *version*, which must hold *tree_digest*; :class:`NotFoundError` otherwise."""
        stored = self._stored_version(owner, name, version)
        if stored is None:
            raise NotFoundError(f"{owner}/{name} has no version {version} in registry {self.url}")
        held = self._read_entry(owner, name, stored).tree_digest
        if held != tree_digest:
            raise NotFoundError(f"registry {self.url} holds {owner}/{name}@{stored} as {held}, not {tree_digest}")
        return stored

    # -- writing -------------------------------------------------------------------------

    def attach_signature(self, info: PublishedVersion, envelope: bytes) -> bool:
        """Store *envelope* (and its Sigstore bundle) beside the published version; True once it is served."""
        plugin_dir = self._plugin_dir(info.owner, info.name)
        try:
            with exclusive_lock(plugin_dir / ".lock"):
                stored = self._stored_version(info.owner, info.name, info.version)
                if stored is None or self._read_entry(info.owner, info.name, stored).tree_digest != info.tree_digest:
                    return False
                self._store_envelope(plugin_dir, stored, envelope)
                return True
        except OSError as exc:
            raise RegistryError(f"cannot sign {info.ref} in registry {self.url}: {exc.filename or self.url}: "
                                f"{exc.strerror or exc}",
                                hint=disk_hint(exc, exc.filename or self.root) or "check that the registry directory is writable by you") from None

    def _store_envelope(self, plugin_dir: Path, version: str, envelope: bytes) -> None:
        """The first envelope of *version* as ``<version>.dsse.json``, any other one under
        ``<version>.signatures/``; its Sigstore bundle beside it. Held: the plugin's lock."""
        from ..signatures.sigstore_bundle import bundle_of

        first = plugin_dir / f"{version}{SIG_SUFFIX}"
        more = plugin_dir / f"{version}{MORE_SIGS}"
        hex_ = hashlib.sha256(envelope).hexdigest()
        make_dirs(more, SHARED)
        try:
            bundle = bundle_of(envelope)
        except SignatureError:  # an envelope forge did not make: carried, without a bundle
            bundle = None
        if bundle is not None:
            atomic.write_file(more / f"{hex_}{BUNDLE_SUFFIX}", bundle, fsync=True)
        if not first.exists():
            atomic.write_file(first, envelope, fsync=True)
        elif first.read_bytes() != envelope and not (more / f"{hex_}{SIG_SUFFIX}").exists():
            atomic.write_file(more / f"{hex_}{SIG_SUFFIX}", envelope, fsync=True)

    def publish(
        self, archive: Path, info: PublishedVersion, signature: bytes | None = None, progress: Progress | None = None
    ) -> PublishResult:
        try:
            return self._publish(archive, info, signature, progress)
        except OSError as exc:
            where = exc.filename or self.url
            raise RegistryError(
                f"cannot publish to registry {self.url}: {where}: {exc.strerror or exc}",
                hint=disk_hint(exc, where) or "check that the registry directory is writable by you",
            ) from None

    def _publish(
        self, archive: Path, info: PublishedVersion, signature: bytes | None, progress: Progress | None
    ) -> PublishResult:
        _check_name(info.owner, "owner")
        _check_name(info.name, "name")
        try:
            version = canonical_version(info.version)
        except ValueError as exc:
            raise UsageError(f"cannot publish {info.owner}/{info.name}: {exc}") from None
        archive = Path(archive)
        hex_ = _sha256_hex(info.artifact_digest)
        actual = hash_file(archive)
        if actual != hex_:
            raise RegistryError(
                f"{archive}: archive digest is sha256:{actual}, not the declared {info.artifact_digest}",
                hint="pack the plugin again and publish the archive you packed",
            )
        self._ensure_root()
        plugin_dir = self._plugin_dir(info.owner, info.name)
        lock = plugin_dir / ".lock"
        while True:  # a failed first publish of this plugin may remove its folder while this one waits
            make_dirs(plugin_dir, SHARED)
            try:
                with exclusive_lock(lock):
                    try:
                        return self._publish_locked(plugin_dir, archive, info, version, hex_, signature, progress)
                    except BaseException:
                        with contextlib.suppress(OSError):
                            self._leave_nothing(plugin_dir, info, version)
                        raise
            except FileNotFoundError as exc:
                if exc.filename != str(lock):
                    raise

    def _leave_nothing(self, plugin_dir: Path, info: PublishedVersion, version: str) -> None:
        """After a failed publish (a full disk): no signature of the version it did not
        record, and no plugin folder holding only its lock. Held: the plugin's lock."""
        if self._stored_version(info.owner, info.name, version) is not None:
            return  # published before: what is there is served
        _unlink(plugin_dir / f"{version}{SIG_SUFFIX}")
        import shutil

        shutil.rmtree(plugin_dir / f"{version}{MORE_SIGS}", ignore_errors=True)
        _remove_unused_plugin_dir(plugin_dir)

    def _publish_locked(self, plugin_dir: Path, archive: Path, info: PublishedVersion, version: str, hex_: str,
                        signature: bytes | None, progress: Progress | None) -> PublishResult:
        """The rest of :meth:`publish`, under the plugin's lock."""
        size = archive.stat().st_size
        atomic.sweep_stale(plugin_dir)  # records and envelopes a killed publisher left half-written
        stored = self._stored_version(info.owner, info.name, version)
        if stored is not None:
            existing = self._read_entry(info.owner, info.name, stored)
            if existing.tree_digest != info.tree_digest:
                raise ImmutableVersionError(
                    f"{existing.ref} is already published with {existing.tree_digest}; "
                    f"refusing other content {info.tree_digest}",
                    hint="published versions are immutable: bump 'version' in plugin.yaml and publish again",
                )
            # an envelope names the archive it was made for: only that archive's version takes it
            attached = (signature is not None and existing.artifact_digest == info.artifact_digest
                        and signature not in self.signatures(existing))
            if signature is not None and attached:
                self._store_envelope(plugin_dir, stored, signature)
                existing = self._read_entry(info.owner, info.name, stored)
            return PublishResult(version=existing, created=False, signature_attached=attached)
        blob = self._blob_path(hex_)
        if not blob.exists() or hash_file(blob) != hex_:
            make_dirs(blob.parent, SHARED)
            atomic.sweep_stale(blob.parent)
            _atomic_copy(archive, blob, progress)
        elif progress:
            progress(size, size)
        # Signatures left by an interrupted publish of this version must not attach
        # themselves to other content.
        _unlink(plugin_dir / f"{version}{SIG_SUFFIX}")
        import shutil

        shutil.rmtree(plugin_dir / f"{version}{MORE_SIGS}", ignore_errors=True)
        if signature is not None:
            self._store_envelope(plugin_dir, version, signature)
        record = {
            "schema": ENTRY_SCHEMA,
            "owner": info.owner,
            "name": info.name,
            "version": version,
            "tree_digest": info.tree_digest,
            "artifact_digest": f"sha256:{hex_}",
            "size": size,
            "manifest": info.manifest,
            "files": dict(sorted(info.files.items())),
            "top_level": sorted(info.top_level),
            "published": utc_now(),
        }
        data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8")
        atomic.write_file(plugin_dir / f"{version}.json", data, fsync=True)
        return PublishResult(
            version=self._read_entry(info.owner, info.name, version), created=True, signature_attached=signature is not None
        )

    # -- internals -----------------------------------------------------------------------

    def _missing_blob(self, info: PublishedVersion, hex_: str) -> RegistryError:
        """Why the archive *hex_* is not here: another archive serves this version (asked for
        the wrong archive, e.g. another registry's), or the registry lost a blob it names."""
        try:
            stored = self._stored_version(info.owner, info.name, info.version)
            served = self._read_entry(info.owner, info.name, stored) if stored is not None else None
        except (NotFoundError, RegistryError, UsageError):
            served = None
        if served is None:
            return NotFoundError(
                f"{info.ref}: registry {self.url} has neither this version nor its archive sha256:{hex_}",
                hint="check --registry / FORGE_REGISTRY",
            )
        if served.artifact_digest != f"sha256:{hex_}":
            return RegistryError(
                f"registry {self.url} serves {served.ref} as archive {served.artifact_digest}, not sha256:{hex_} "
                f"(tree digest {served.tree_digest})",
                hint="the archive asked for came from another registry; ask for this registry's own record of the version "
                "(the identity is the tree digest, not the archive)",
            )
        return RegistryError(
            f"{info.ref}: archive sha256:{hex_} is missing from registry {self.url}",
            hint="the registry directory is damaged; republish the plugin or restore the blob",
        )

    def _readable(self) -> bool:
        """True when the registry exists; False for an empty one; raise when it is not a registry."""
        try:
            entries = os.listdir(self.root)
        except FileNotFoundError:
            if self._is_default():
                return False
            raise NoRegistryError(
                f"no registry at {self.url}",
                hint="check --registry / FORGE_REGISTRY; a directory registry is created by the first publish to it",
            ) from None
        except NotADirectoryError:
            raise RegistryError(f"registry {self.url} is a file, not a directory") from None
        if MARKER in entries:
            return True
        # A marker being written by a concurrent first publish does not make it foreign.
        if not [e for e in entries if not (e.startswith(f".{MARKER}.") and e.endswith(".tmp"))]:
            return False
        raise RegistryError(
            f"{self.url} is not a StarForge registry (no {MARKER})",
            hint="point --registry / FORGE_REGISTRY at a registry directory or an empty one",
        )

    def _is_default(self) -> bool:
        from ..state.home import home

        return os.path.abspath(self.root) == os.path.abspath(home().registry_dir)

    def _ensure_root(self) -> None:
        if self.root.exists():
            self._readable()
        try:
            make_dirs(self.root, SHARED)
        except OSError as exc:
            raise RegistryError(f"cannot create registry {self.url}: {exc.strerror}") from None
        marker = self.root / MARKER
        if not marker.exists():
            atomic.write_file(marker, (json.dumps({"schema": SCHEMA}) + "\n").encode(), fsync=True)

    def _plugin_dir(self, owner: str, name: str) -> Path:
        _check_name(owner, "owner")
        _check_name(name, "name")
        return self.root / "plugins" / owner / name

    def _blob_path(self, hex_: str) -> Path:
        return self.root / "blobs" / "sha256" / hex_

    def _stored_version(self, owner: str, name: str, version: str) -> str | None:
        """The stored spelling of the version equal (PEP 440) to *version*, or None."""
        from packaging.version import InvalidVersion, Version

        try:
            wanted = Version(version)
        except InvalidVersion:
            raise UsageError(f"'{version}' is not a PEP 440 version") from None
        # asked by its stored spelling (as a PublishedVersion names itself): one stat, not a listing
        # of every version (reading each version of a plugin would list them all once per version)
        if version == str(wanted) and _is_version(version) and self._readable():
            if (self._plugin_dir(owner, name) / f"{version}.json").is_file():
                return version
        for stored in self.versions(owner, name):
            if Version(stored) == wanted:
                return stored
        return None

    def _read_entry(self, owner: str, name: str, version: str) -> PublishedVersion:
        plugin_dir = self._plugin_dir(owner, name)
        path = plugin_dir / f"{version}.json"
        try:
            record = load_json(path.read_text(encoding="utf-8"))
            if not isinstance(record, dict):
                raise TypeError("not a JSON object")
            check_identity(self.url, str(path), (owner, name, version), record)
            return PublishedVersion(
                owner=record["owner"],
                name=record["name"],
                version=record["version"],
                tree_digest=record["tree_digest"],
                artifact_digest=record["artifact_digest"],
                manifest=record["manifest"],
                files=dict(record.get("files") or {}),
                top_level=tuple(record.get("top_level") or ()),
                size=int(record.get("size") or 0),
                signed=(plugin_dir / f"{version}{SIG_SUFFIX}").exists()
                or any(n.endswith(SIG_SUFFIX) for n in _listdir(plugin_dir / f"{version}{MORE_SIGS}")),
            )
        except FileNotFoundError:
            raise NotFoundError(f"{owner}/{name} has no version {version} in registry {self.url}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise RegistryError(f"{path}: damaged registry record ({exc})") from None


def sort_versions(versions) -> list:
    """Version strings sorted oldest first by PEP 440."""
    from packaging.version import Version

    return sorted(versions, key=Version)


def _is_version(text: str) -> bool:
    try:
        canonical_version(text)
    except ValueError:
        return False
    return True


def _valid_name(text: str) -> bool:
    return is_plugin_name(text)


def _check_name(text: str, what: str) -> None:
    if not isinstance(text, str) or not _valid_name(text):
        raise UsageError(f"'{text}' is not a valid {what}", hint="lowercase letters, digits and single dashes, starting with a letter")


def _sha256_hex(digest: str) -> str:
    if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71:
        raise RegistryError(f"'{digest}' is not an archive digest (sha256:<64 hex>)")
    hex_ = digest[len("sha256:") :]
    if any(c not in "0123456789abcdef" for c in hex_):
        raise RegistryError(f"'{digest}' is not an archive digest (sha256:<64 hex>)")
    return hex_


def _listdir(path: Path) -> list:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _unlink(path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _atomic_copy(src: Path, dest: Path, progress: Progress | None) -> None:
    total = src.stat().st_size
    done = 0
    with atomic.writer(dest, fsync=True) as f, open(src, "rb") as s:
        while chunk := s.read(_CHUNK):
            f.write(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)


def _remove_unused_plugin_dir(plugin_dir: Path) -> None:
    """Remove *plugin_dir* (and its owner's folder, when that is empty now) if it holds
    nothing but its lock file. Held: that lock; a process waiting on it opens it again."""
    if {p.name for p in plugin_dir.iterdir()} - {".lock"}:
        return
    with contextlib.suppress(OSError):
        (plugin_dir / ".lock").unlink()
        plugin_dir.rmdir()
        plugin_dir.parent.rmdir()
