"""The content-addressed cache every pull goes through.

Archives are kept under the user's blob cache as ``sha256/<hex>``, named by the digest of
their bytes. :func:`fetch` looks there first, so a job whose versions were pulled once can
be staged without the registry. Because the identity of a plugin is its tree digest, not
its archive's bytes (a mirror may pack the same files into another archive), every archive
whose unpacked files were verified is also indexed by tree digest: ``trees/sf1-<hex>``
holds the artifact digest of a cached archive with exactly those files, so
:func:`materialize_cached` finds the files a lock names whichever registry served them. A download goes to a temporary file beside its final
name, is hashed, and is renamed into place only when its digest is the expected one, so a
corrupt or truncated transfer never enters the cache; a cached file that no longer has
its digest is dropped and fetched again.

Signature envelopes that verified against the trust file are kept beside the archives, as
``signatures/sf1-<hex>/<owner>/<name>/<version>.dsse.json`` (keyed by the tree digest and
the reference the statement names), so a version of an owner with trusted keys can be
staged offline once it was pulled or locked; whoever uses a cached envelope verifies it
against the trust file again.

:func:`materialize` unpacks a fetched archive into a new directory and checks the tree
digest of what was written (naming the files that differ) before the directory appears.
Neither checks signatures. The cache is the private storage of
:class:`starforge.registry.store.PluginStore`, which judges a version before it keeps its
envelope here; no other module imports it (``tests/test_plugin_store_owns.py``).

Laptop side.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from ..cluster import atomic
from ..cluster.digest import diff_maps, digest_of_map, hash_file
from ..errors import ArchiveError, RegistryError, UsageError
from ..state.directories import disk_hint, make_dirs
from .base import PublishedVersion, Registry
from .progress import transfer_progress


def cache_root(cache: str | os.PathLike | None = None) -> Path:
    """*cache*, or the user's blob cache (``FORGE_HOME``/XDG)."""
    if cache is not None:
        return Path(cache)
    from ..state.home import home

    return home().blob_cache


def cached_path(artifact_digest: str, cache: str | os.PathLike | None = None) -> Path:
    """Where the archive with *artifact_digest* lives in the cache (whether or not it is there)."""
    algo, _, hex_ = artifact_digest.partition(":")
    if algo != "sha256" or len(hex_) != 64 or any(c not in "0123456789abcdef" for c in hex_):
        raise RegistryError(f"'{artifact_digest}' is not an archive digest (sha256:<64 hex>)")
    return cache_root(cache) / "sha256" / hex_


def lookup(info: PublishedVersion, cache: str | os.PathLike | None = None) -> Path | None:
    """The cached archive of *info* when present and intact; a damaged entry is removed."""
    return _cached_archive(info.artifact_digest, cache)


def _cached_archive(artifact_digest: str, cache: str | os.PathLike | None) -> Path | None:
    path = cached_path(artifact_digest, cache)
    try:
        actual = hash_file(path)
    except FileNotFoundError:
        return None
    if "sha256:" + actual == artifact_digest:
        return path
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return None


def tree_index_path(tree_digest: str, cache: str | os.PathLike | None = None) -> Path:
    """Where the cache records which archive holds the files of *tree_digest*."""
    algo, _, hex_ = tree_digest.partition(":")
    if algo != "sf1" or len(hex_) != 64 or any(c not in "0123456789abcdef" for c in hex_):
        raise RegistryError(f"'{tree_digest}' is not a tree digest (sf1:<64 hex>)")
    return cache_root(cache) / "trees" / f"sf1-{hex_}"


def lookup_tree(tree_digest: str, cache: str | os.PathLike | None = None) -> Path | None:
    """A cached archive whose files were verified to have *tree_digest*, or None."""
    try:
        artifact_digest = tree_index_path(tree_digest, cache).read_text(encoding="ascii").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    try:
        return _cached_archive(artifact_digest, cache)
    except RegistryError:
        return None


def remember_tree(tree_digest: str, artifact_digest: str, cache: str | os.PathLike | None = None) -> None:
    """Record that the cached archive *artifact_digest* holds exactly the files of *tree_digest* (best effort)."""

    path = tree_index_path(tree_digest, cache)
    try:
        make_dirs(path.parent)
        atomic.write_file(path, (artifact_digest + "\n").encode("ascii"))
    except OSError:
        pass  # the index only saves a download; the archive itself is cached already


def _forget_tree(tree_digest: str, cache: str | os.PathLike | None) -> None:
    with contextlib.suppress(FileNotFoundError, RegistryError):
        os.unlink(tree_index_path(tree_digest, cache))


def signature_cache_path(
    owner: str, name: str, version: str, tree_digest: str, cache: str | os.PathLike | None = None
) -> Path:
    """Where the cache keeps the envelope verified for ``owner/name@version`` with *tree_digest*."""
    from ..cluster.names import is_plugin_name
    from ..package_format.manifest import canonical_version

    for part in (owner, name):
        if not is_plugin_name(part):
            raise RegistryError(f"'{part}' is not a valid owner or plugin name")
    tree_key = tree_index_path(tree_digest, cache).name  # validates the digest: sf1-<hex>
    return cache_root(cache) / "signatures" / tree_key / owner / name / f"{canonical_version(version)}.dsse.json"


def remember_signature(owner: str, name: str, version: str, tree_digest: str, envelope: bytes,
                       cache: str | os.PathLike | None = None) -> None:
    """Keep *envelope*, which verified for the version, for offline staging (best effort)."""
    try:
        path = signature_cache_path(owner, name, version, tree_digest, cache)
        make_dirs(path.parent)
        if not path.exists() or path.read_bytes() != envelope:
            atomic.write_file(path, envelope)
    except (OSError, RegistryError, ValueError):
        pass  # the cache only saves asking the registry again


def cached_signature(
    owner: str, name: str, version: str, tree_digest: str, cache: str | os.PathLike | None = None
) -> bytes | None:
    """The envelope kept by :func:`remember_signature`, or None (unverified: check it before use)."""
    try:
        return signature_cache_path(owner, name, version, tree_digest, cache).read_bytes()
    except (OSError, RegistryError, ValueError):
        return None


def envelope_dir(owner: str, name: str, version: str, tree_digest: str, cache: str | os.PathLike | None = None) -> Path:
    """Where the cache keeps every envelope ``forge lock`` saw for a version, by the envelope's digest."""
    single = signature_cache_path(owner, name, version, tree_digest, cache)
    return single.with_name(single.name[: -len(".dsse.json")] + ".envelopes")


def remember_envelope(owner: str, name: str, version: str, tree_digest: str, envelope: bytes,
                      cache: str | os.PathLike | None = None) -> None:
    """Keep *envelope* (whatever it proves: its users check it) under its digest, for offline staging (best effort)."""
    import hashlib

    from ..cluster import atomic

    try:
        path = envelope_dir(owner, name, version, tree_digest, cache) / f"{hashlib.sha256(envelope).hexdigest()}.dsse.json"
        if not path.exists():
            make_dirs(path.parent)
            atomic.write_file(path, envelope)
    except (OSError, RegistryError, ValueError):
        pass  # the cache only saves asking the registry again


def cached_envelopes(owner: str, name: str, version: str, tree_digest: str,
                     cache: str | os.PathLike | None = None) -> list:
    """Every envelope the cache holds for the version (:func:`remember_signature`'s, then
    :func:`remember_envelope`'s), unverified: check them before use."""
    import hashlib

    out = []
    one = cached_signature(owner, name, version, tree_digest, cache)
    if one is not None:
        out.append(one)
    try:
        folder = envelope_dir(owner, name, version, tree_digest, cache)
        names = sorted(os.listdir(folder))
    except (OSError, RegistryError, ValueError):
        return out
    for entry in names:
        if not entry.endswith(".dsse.json"):
            continue
        try:
            data = (folder / entry).read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() == entry[: -len(".dsse.json")] and data not in out:
            out.append(data)
    return out


def fetch(registry: Registry, info: PublishedVersion, *, cache: str | os.PathLike | None = None) -> Path:
    """The path of *info*'s archive in the cache, downloading it only when it is not there.

    >>> fetch(open_registry(), resolve(open_registry(), "alice/opsd-patch"))   # doctest: +SKIP
    PosixPath('/home/alice/.cache/starforge/blobs/sha256/3f1c…')
    """
    hit = lookup(info, cache)
    if hit is not None:
        return hit
    final = cached_path(info.artifact_digest, cache)
    try:
        make_dirs(final.parent)
    except OSError as exc:
        raise RegistryError(f"cannot create the cache directory {final.parent}: {exc.strerror}",
                            hint=disk_hint(exc, final.parent)) from None
    atomic.sweep_stale(final.parent)
    # The registry writes the temp file by name; a corrupt or truncated download raises
    # inside the block, so the temp file is removed and nothing enters the cache.
    out = atomic.writer(final, 0o644)
    with out:
        with transfer_progress(f"pull {info.ref}", info.size) as update:
            if update is None:
                registry.download(info, Path(out.tmp))
            else:
                registry.download(info, Path(out.tmp), progress=update)
        actual = "sha256:" + hash_file(out.tmp)
        if actual != info.artifact_digest:
            raise RegistryError(
                f"{info.ref}: the registry served an archive with digest {actual}, expected {info.artifact_digest} "
                f"({os.path.getsize(out.tmp)} of {info.size or '?'} bytes)",
                hint="the download was corrupt or truncated and was discarded; try again, or tell the registry's owner",
            )
    return final


def materialize(
    registry: Registry, info: PublishedVersion, dest: str | os.PathLike, *, cache: str | os.PathLike | None = None
) -> Path:
    """Unpack *info* into the new directory *dest* (absent or empty), verified against its tree digest.

    The cache is looked up first (by archive, then by tree digest); the registry is asked
    only when neither holds the files. Nothing appears at *dest* unless every file checked out.
    """
    dest = _check_dest(dest)
    if materialize_cached(info.owner, info.name, info.version, info.tree_digest, dest,
                          artifact_digest=info.artifact_digest, files=info.files, cache=cache) is not None:
        return dest
    archive = fetch(registry, info, cache=cache)
    _unpack_verified(info.ref, info.tree_digest, info.files, archive, dest)
    remember_tree(info.tree_digest, info.artifact_digest, cache)
    return dest


def materialize_cached(owner: str, name: str, version: str, tree_digest: str, dest: str | os.PathLike, *,
                       artifact_digest: str | None = None, files: Mapping[str, str] | None = None,
                       cache: str | os.PathLike | None = None) -> Path | None:
    """Like :func:`materialize` from the cache alone, for ``owner/name@version`` with
    *tree_digest*; None when the cache does not hold its files.

    The archive *artifact_digest* (when known) is looked up first, then any cached archive
    whose files have *tree_digest*, whatever its own digest: the archive another registry
    served for the same files is the same plugin. *files* (the per-file hashes, when known)
    only name the files that differ in an error.
    """
    dest = _check_dest(dest)
    ref = f"{owner}/{name}@{version}"
    archive = _cached_archive(artifact_digest, cache) if artifact_digest else None
    if archive is not None:
        _unpack_verified(ref, tree_digest, files, archive, dest)
        assert artifact_digest is not None
        remember_tree(tree_digest, artifact_digest, cache)
        return dest
    archive = lookup_tree(tree_digest, cache)
    if archive is None:
        return None
    try:
        _unpack_verified(ref, tree_digest, files, archive, dest)
    except ArchiveError:
        _forget_tree(tree_digest, cache)
        return None
    return dest


def _check_dest(dest: str | os.PathLike) -> Path:
    dest = Path(dest)
    if os.path.lexists(dest) and (dest.is_symlink() or not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest} already exists and is not an empty directory", hint="choose another destination (-o DIR)")
    return dest


def _unpack_verified(ref: str, tree_digest: str, expected_files: Mapping[str, str] | None, archive: Path,
                     dest: Path) -> None:
    """Unpack *archive* to *dest* only when its files have *tree_digest* (the version *ref*'s)."""
    from ..package_format.archive import unpack

    parent = dest.absolute().parent
    make_dirs(parent)
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{dest.name}.", suffix=".pull"))
    try:
        tree = staging / "tree"
        files = unpack(archive, tree)
        got = digest_of_map(files)
        if got != tree_digest:
            detail = diff_maps(expected_files, files).describe() if expected_files else "per-file hashes unknown"
            raise ArchiveError(
                f"{ref}: unpacked files have tree digest {got}, expected {tree_digest}; {detail}",
                hint="the archive does not hold the files that were published; do not use it",
            )
        if dest.is_dir():
            dest.rmdir()
        os.rename(tree, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
