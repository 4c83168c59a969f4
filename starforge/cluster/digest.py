"""Tree digest: the identity of a plugin, computed from its files, never from an archive.

Format ``sf1:<64 hex>``: for every regular file, the line
``<sha256 hex>  <relative POSIX path>\\n``; lines sorted by the path's UTF-8 bytes; the
digest is the sha256 of their concatenation. This is the pre-image of Go's dirhash "h1"
and what ``find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum |
sha256sum`` prints on a clean tree.

Cluster side: standard library only.

>>> digest_of_map({"a.py": "0" * 64})[:4]
'sf1:'
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping

from .errors import VerificationError
from .record import Record

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Any, Iterable

PREFIX = "sf1:"
_CHUNK = 1 << 20
_SMALL = 1 << 18  # files below this size are read with a single read()
_O_RDONLY = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
_HAVE_READV = hasattr(os, "readv")
# Below this many bytes in total a tree is hashed on the calling thread: starting
# threads costs more than it saves.
_PARALLEL_MIN_BYTES = 16 << 20

FileMap = dict  # relative POSIX path -> sha256 hex of the file's bytes


# Below this many bytes, the interpreter's built-in sha256 is used when hashlib is not
# imported yet: loading hashlib (OpenSSL) costs a process 2-3 ms, which the faster OpenSSL
# hash pays back only on about a megabyte of input.
_OPENSSL_MIN_BYTES = 1 << 20
_builtin_sha256: Any = False  # not looked up yet


def sha256_for(nbytes: int):
    """The sha256 constructor to use for about *nbytes* of input.

    ``hashlib.sha256`` (OpenSSL) when hashlib is already imported or the input is large;
    otherwise the interpreter's built-in implementation, which gives the same digests
    without loading OpenSSL (what verifying a small plugin tree in a fresh process needs).
    """
    global _builtin_sha256
    if nbytes < _OPENSSL_MIN_BYTES and "hashlib" not in sys.modules:
        if _builtin_sha256 is False:
            _builtin_sha256 = None
            try:  # the module's name changed in CPython 3.12
                _builtin_sha256 = __import__("_sha2" if sys.version_info >= (3, 12) else "_sha256").sha256
            except (ImportError, AttributeError):
                pass
        if _builtin_sha256 is not None:
            return _builtin_sha256
    import hashlib

    return hashlib.sha256


def is_digest(value: object) -> bool:
    """True when *value* looks like ``sf1:<64 lowercase hex>``."""
    if not isinstance(value, str) or not value.startswith(PREFIX) or len(value) != 68:
        return False
    return all(c in "0123456789abcdef" for c in value[4:])


def hash_file(path: str | os.PathLike) -> str:
    """sha256 hex of one file's bytes."""
    return _hash_path(os.fspath(path), bytearray(_CHUNK))


def _hash_path(path: str, buf: bytearray) -> str:
    # Small files: one read of exactly their size. Large files: read into *buf* (reused
    # by the caller) and hash a memoryview, so no copy is made and hashlib hashes
    # without holding the GIL. Reading goes on to end of file whatever fstat said.
    import hashlib

    fd = os.open(path, _O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < _SMALL:
            h = hashlib.sha256(os.read(fd, size) if size else b"")
            more = os.read(fd, 1)
            if not more:
                return h.hexdigest()
            h.update(more)
        else:
            h = hashlib.sha256()
        view = memoryview(buf)
        while True:
            n = os.readv(fd, [buf]) if _HAVE_READV else _readinto(fd, buf)
            if not n:
                return h.hexdigest()
            h.update(view[:n])
    finally:
        os.close(fd)


def _hash_if_small(path: str, buf: bytearray) -> tuple[str | None, int]:
    """``(sha256 hex, size)`` for a file under the small-file size, else ``(None, size)``."""
    import hashlib

    fd = os.open(path, _O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size >= _SMALL:
            return None, size
        h = hashlib.sha256(os.read(fd, size) if size else b"")
        view = memoryview(buf)
        while True:
            n = os.readv(fd, [buf]) if _HAVE_READV else _readinto(fd, buf)
            if not n:
                return h.hexdigest(), size
            h.update(view[:n])
    finally:
        os.close(fd)


def _readinto(fd: int, buf: bytearray) -> int:
    data = os.read(fd, len(buf))
    buf[: len(data)] = data
    return len(data)


def path_problem(path: str) -> str | None:
    """Why *path* (relative, POSIX) cannot name a file in a plugin tree, or None.

    Refused: empty, absolute, ``.``/``..``/empty components, backslash, NUL, newline or
    any other control character, text that is not valid UTF-8, and names not in Unicode
    NFC (macOS and Linux would then disagree about which file it is).
    """
    if not path:
        return "empty path"
    if path.startswith("/"):
        return "absolute path"
    if "\\" in path:
        return "backslash in path"
    if path.isascii() and path.isprintable():
        # Printable ASCII: no control character, valid UTF-8 and NFC already; only the
        # components are left to check (most names, and no per-character loop for them).
        for part in path.split("/"):
            if part in ("", ".", ".."):
                return f"path component {part!r} is not allowed"
        return None
    for ch in path:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return f"control character {ch!r} in path"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return f"path component {part!r} is not allowed"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return "path is not valid UTF-8"
    import unicodedata  # here: only the laptop side checks names

    if not unicodedata.is_normalized("NFC", path):
        return "path is not in Unicode NFC form"
    return None


def case_collision(paths: Iterable[str]) -> tuple[str, str] | None:
    """Two distinct paths (files or their directories) equal when case is ignored, or None."""
    seen: dict[str, str] = {}
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            key = prefix.casefold()
            other = seen.setdefault(key, prefix)
            if other != prefix:
                return tuple(sorted((other, prefix)))  # type: ignore[return-value]
    return None


def digest_of_map(files: Mapping[str, str]) -> str:
    """The tree digest of a per-file map ``{relpath: sha256 hex}``."""
    return _digest_of_map(files, sha256_for(len(files) * 80))


def _digest_of_map(files: Mapping[str, str], sha256) -> str:
    h = sha256()
    # surrogateescape: a name that is not UTF-8 contributes its raw bytes, as in the shell
    for path in sorted(files, key=lambda p: p.encode("utf-8", "surrogateescape")):
        h.update(f"{files[path]}  {path}\n".encode("utf-8", "surrogateescape"))
    return PREFIX + h.hexdigest()


def digest_of_bytes(contents: Mapping[str, bytes]) -> str:
    """The tree digest of in-memory files ``{relpath: bytes}``."""
    sha256 = sha256_for(sum(len(b) for b in contents.values()))
    return _digest_of_map({p: sha256(b).hexdigest() for p, b in contents.items()}, sha256)


def _walk(root: str) -> list[tuple[str, str]]:
    """``(relpath, full path)`` of every regular file below *root*, sorted by UTF-8 path.

    Uses the directory entry's file type (no stat call per file where the file system
    reports it). Symlinks, to files or directories, are neither listed nor followed.
    """
    out = []
    stack = [("", root)]
    while stack:
        rel_dir, full_dir = stack.pop()
        with os.scandir(full_dir) as entries:
            for entry in entries:
                rel = f"{rel_dir}{entry.name}"
                if entry.is_dir(follow_symlinks=False):
                    stack.append((rel + "/", entry.path))
                elif entry.is_file(follow_symlinks=False):
                    out.append((rel, entry.path))
    out.sort(key=lambda item: item[0].encode("utf-8", "surrogateescape"))
    return out


def file_map(
    root: str | os.PathLike, paths: Iterable[str] | None = None, *, workers: int | None = None
) -> FileMap:
    """``{relpath: sha256 hex}`` for *paths* (default: every regular file below *root*).

    *workers*: ``1`` hashes everything on the calling thread. Otherwise files under
    256 KiB (whose cost is mostly Python and system calls, under the GIL) are hashed on
    the calling thread as they come, and the large ones (hashed with the GIL released)
    are then split by size, largest first, into one share per worker, each run by one
    long-lived thread with no queue between files. ``None`` (default) uses threads only
    when the large files add up to 16 MiB, then up to 4 bounded by the CPUs this process
    may use. The result never depends on *workers*.
    """
    root = os.fspath(root)
    if paths is None:
        pairs = _walk(root)
        rels = [rel for rel, _ in pairs]
        fulls = [full for _, full in pairs]
    else:
        rels = list(paths)
        fulls = [os.path.join(root, *p.split("/")) for p in rels]
    if workers is not None and workers < 1:
        raise ValueError("workers must be at least 1")
    if workers == 1 or len(fulls) < 2:
        return _hash_many(rels, fulls)
    # Small files are hashed here as they come; large ones are set aside with the size
    # fstat reported and then split over the threads.
    results: list[str | None] = [None] * len(fulls)
    large: list[tuple[int, int]] = []
    buf = bytearray(_CHUNK)
    for i, full in enumerate(fulls):
        digest, size = _hash_if_small(full, buf)
        if digest is None:
            large.append((i, size))
        else:
            results[i] = digest
    if workers is None:
        big = sum(size for _, size in large)
        workers = max(1, min(4, _usable_cpus())) if big >= _PARALLEL_MIN_BYTES else 1
    workers = min(workers, len(large))
    if workers <= 1:
        for i, _ in large:
            results[i] = _hash_path(fulls[i], buf)
    else:
        _hash_parallel(fulls, large, workers, results)
    return dict(zip(rels, results))  # type: ignore[arg-type]


def _usable_cpus() -> int:
    """CPUs this process may run on (the affinity mask, which containers narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _hash_many(rels: list[str], fulls: list[str]) -> FileMap:
    buf = bytearray(_CHUNK)
    return {rel: _hash_path(full, buf) for rel, full in zip(rels, fulls)}


def _hash_parallel(fulls: list[str], large: list[tuple[int, int]], workers: int, results: list) -> None:
    """Hash the ``(index, size)`` files of *large* on *workers* threads into *results*."""
    import threading

    # Largest first onto the least-loaded share, decided before any thread starts: each
    # thread then runs one long batch with no queue between files. The calling thread
    # takes share 0.
    shares: list[list[int]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for i, size in sorted(large, key=lambda item: -item[1]):
        k = loads.index(min(loads))
        shares[k].append(i)
        loads[k] += size
    errors: list[BaseException] = []

    def run(share: list[int]) -> None:
        buf = bytearray(_CHUNK)
        try:
            for i in share:
                results[i] = _hash_path(fulls[i], buf)
        except BaseException as exc:  # re-raised on the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(share,), daemon=True) for share in shares[1:]]
    for t in threads:
        t.start()
    run(shares[0])
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def tree_digest(
    root: str | os.PathLike, paths: Iterable[str] | None = None, *, workers: int | None = None
) -> str:
    """Tree digest of *root*, over *paths* when given (the laptop passes the packed set)."""
    if paths is not None:
        paths = list(paths)
    files = file_map(root, paths, workers=workers)
    if not files:
        raise VerificationError(f"{os.fspath(root)}: no files to digest")
    return digest_of_map(files)


class TreeDiff(Record):
    """What differs between an expected and an actual per-file map (``added``, ``removed``,
    ``changed``: sorted lists of paths). Immutable, compared by value."""

    added: list[str]
    removed: list[str]
    changed: list[str]
    __slots__ = ("added", "removed", "changed")

    def __init__(self, added: list | None = None, removed: list | None = None, changed: list | None = None) -> None:
        self._set([] if added is None else added, [] if removed is None else removed,
                  [] if changed is None else changed)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def describe(self) -> str:
        """One line: ``added: a.py; removed: b.py; changed: c.py``."""
        parts = [
            f"{label}: {', '.join(items)}"
            for label, items in (("added", self.added), ("removed", self.removed), ("changed", self.changed))
            if items
        ]
        return "; ".join(parts) or "no file differs"


def diff_maps(expected: Mapping[str, str], actual: Mapping[str, str]) -> TreeDiff:
    """Files added to, removed from and changed in *actual* relative to *expected*."""
    return TreeDiff(
        added=sorted(set(actual) - set(expected)),
        removed=sorted(set(expected) - set(actual)),
        changed=sorted(p for p in expected.keys() & actual.keys() if expected[p] != actual[p]),
    )


def _strict_entries(root: str) -> list[tuple[str, str, os.stat_result]]:
    """``(relpath, full path, lstat)`` of every file below *root*, refusing what is not plain.

    Symlinks, devices, FIFOs, sockets and files with more than one hard link raise
    :class:`VerificationError` naming the entry. Nothing is excluded.
    """
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        raise VerificationError(f"{root}: plugin directory is missing") from None
    if not stat.S_ISDIR(st.st_mode):
        raise VerificationError(f"{root}: not a directory")
    out = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        full_dir = os.path.join(root, *rel_dir.split("/")) if rel_dir else root
        with os.scandir(full_dir) as entries:
            for entry in entries:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    stack.append(rel)
                    continue
                _refuse_unplain(rel, st)
                out.append((rel, entry.path, st))
    return out


def _refuse_unplain(rel: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise VerificationError(f"{rel}: is a symlink; plugin trees hold regular files only")
    if not stat.S_ISREG(st.st_mode):
        raise VerificationError(f"{rel}: is not a regular file (device, FIFO or socket)")
    if st.st_nlink > 1:
        raise VerificationError(f"{rel}: has {st.st_nlink} hard links; plugin files must have one")


def read_tree_strict(root: str | os.PathLike) -> dict[str, bytes]:
    """Read every entry below *root* once, refusing anything that is not a plain file.

    Symlinks, devices, FIFOs, sockets and files with more than one hard link raise
    :class:`VerificationError`: each would let the bytes checked differ from the bytes
    executed. Nothing is excluded: a planted ``__pycache__/*.pyc`` is returned like code.
    """
    return {rel: _read_all(full, st.st_size) for rel, full, st in _strict_entries(os.fspath(root))}


def check_listing(root: str | os.PathLike, expected_files: Mapping[str, str]) -> None:
    """Check that *root* holds exactly the files of *expected_files*, each a plain file.

    Reads no file: a file added (a planted ``__pycache__/*.pyc`` too), removed, symlinked,
    hard-linked or replaced by a device or FIFO raises :class:`VerificationError`. What
    the files hold is checked as they are read (:class:`HashedFiles`).
    """
    listed = {rel for rel, _, _ in _strict_entries(os.fspath(root))}
    diff = TreeDiff(added=sorted(listed - expected_files.keys()), removed=sorted(expected_files.keys() - listed))
    if diff:
        raise VerificationError(f"{os.fspath(root)}: files differ from the JobSpec; {diff.describe()}")


def check_bound(tree_digest: str, expected_files: Mapping[str, str]) -> None:
    """Check that the per-file map *expected_files* digests to *tree_digest*.

    This binds the map to the digest: a per-file hash is only as good as the tree digest
    it is part of.
    """
    got = digest_of_map(expected_files)
    if got != tree_digest:
        raise VerificationError(
            f"the JobSpec's per-file hashes digest to {got}, not to its tree digest {tree_digest}"
        )


class HashedFiles(Mapping[str, bytes]):
    """The files of a plugin tree whose listing was checked, each hashed when first read.

    A read-only mapping ``{relpath: bytes}`` over the expected per-file map: the first
    access to a file reads it (no symlink followed, a plain file with one link), hashes
    those bytes and compares them with the expected sha256; the bytes returned are the
    bytes hashed, kept for later use in this process (never written anywhere). A
    mismatch calls *on_mismatch(message)* (which must not return) or raises
    :class:`VerificationError`. ``hashed`` lists the files read, in order.
    """

    def __init__(self, root: str | os.PathLike, files: Mapping[str, str], on_mismatch=None) -> None:
        self.root = os.fspath(root)
        self.files = files
        self.on_mismatch = on_mismatch
        self.hashed: list[str] = []
        self._bytes: dict[str, bytes] = {}

    def __iter__(self):
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def __contains__(self, rel: object) -> bool:  # without reading (Mapping's would hash the file)
        return rel in self.files

    def __getitem__(self, rel: str) -> bytes:
        data = self._bytes.get(rel)
        if data is not None:
            return data
        expected = self.files[rel]
        try:
            data = _read_plain(os.path.join(self.root, *rel.split("/")), rel)
            got = sha256_for(len(data))(data).hexdigest()
            if got != expected:
                raise VerificationError(f"changed: {rel} (since the job was staged: sha256 {got}, expected {expected})")
        except VerificationError as exc:
            if self.on_mismatch is not None:
                self.on_mismatch(str(exc))
            raise
        self._bytes[rel] = data
        self.hashed.append(rel)
        return data


def _read_plain(path: str, rel: str) -> bytes:
    """Every byte of the plain file at *path*, read through one descriptor."""
    try:
        fd = os.open(path, _O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise VerificationError(f"removed: {rel} (since the job was staged)") from None
    except OSError as exc:  # ELOOP: a symlink now
        if os.path.islink(path):
            raise VerificationError(f"{rel}: is a symlink; plugin trees hold regular files only") from None
        raise VerificationError(f"{rel}: cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        _refuse_unplain(rel, st)
        return _read_fd(fd, st.st_size)
    finally:
        os.close(fd)


def _read_all(path: str, size: int) -> bytes:
    """Every byte of the file at *path* (no symlink followed), *size* being what stat said."""
    fd = os.open(path, _O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        return _read_fd(fd, size)
    finally:
        os.close(fd)


def _read_fd(fd: int, size: int) -> bytes:
    """Every byte from *fd* to end of file, *size* being what stat said."""
    data = os.read(fd, size) if size else b""
    more = os.read(fd, 1 << 16)
    if not more:
        return data
    parts = [data, more]
    while more:
        more = os.read(fd, 1 << 16)
        parts.append(more)
    return b"".join(parts)


def verify_tree(
    root: str | os.PathLike, tree_digest: str, expected_files: Mapping[str, str] | None = None
) -> dict[str, bytes]:
    """Read *root* once and check it has *tree_digest*; return the verified bytes.

    On mismatch the error names the files added, removed and changed when the expected
    per-file map is known.
    """
    contents = read_tree_strict(root)
    sha256 = sha256_for(sum(len(b) for b in contents.values()))
    actual = {p: sha256(b).hexdigest() for p, b in contents.items()}
    got = _digest_of_map(actual, sha256)
    if got != tree_digest:
        detail = diff_maps(expected_files, actual).describe() if expected_files else "per-file hashes unknown"
        raise VerificationError(f"{os.fspath(root)}: digest mismatch (expected {tree_digest}, got {got}); {detail}")
    return contents
