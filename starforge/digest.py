"""Tree digest: the identity of a plugin, computed from its files, never from an archive.

Format ``sf1:<64 hex>``: for every regular file, the line
``<sha256 hex>  <relative POSIX path>\\n``; lines sorted by the path's UTF-8 bytes; the
digest is the sha256 of their concatenation. This is the pre-image of Go's dirhash "h1"
and what ``find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum |
sha256sum`` prints on a clean tree.

Cluster side: standard library only.

>>> digest_of_map({"a.py": hashlib.sha256(b"x").hexdigest()})[:4]
'sf1:'
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .errors import VerificationError

PREFIX = "sf1:"
_CHUNK = 1 << 20

FileMap = dict  # relative POSIX path -> sha256 hex of the file's bytes


def is_digest(value: object) -> bool:
    """True when *value* looks like ``sf1:<64 lowercase hex>``."""
    if not isinstance(value, str) or not value.startswith(PREFIX) or len(value) != 68:
        return False
    return all(c in "0123456789abcdef" for c in value[4:])


def hash_file(path: str | os.PathLike) -> str:
    """sha256 hex of one file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def digest_of_map(files: Mapping[str, str]) -> str:
    """The tree digest of a per-file map ``{relpath: sha256 hex}``."""
    h = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.encode("utf-8")):
        h.update(f"{files[path]}  {path}\n".encode("utf-8"))
    return PREFIX + h.hexdigest()


def digest_of_bytes(contents: Mapping[str, bytes]) -> str:
    """The tree digest of in-memory files ``{relpath: bytes}``."""
    return digest_of_map({p: hashlib.sha256(b).hexdigest() for p, b in contents.items()})


def walk_files(root: str | os.PathLike) -> list[str]:
    """Every regular file below *root* as sorted relative POSIX paths (no excludes)."""
    root = os.fspath(root)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        for name in filenames:
            full = os.path.join(dirpath, name)
            if stat.S_ISREG(os.lstat(full).st_mode):
                out.append(name if rel == "." else f"{rel.replace(os.sep, '/')}/{name}")
    return sorted(out, key=lambda p: p.encode("utf-8"))


def file_map(root: str | os.PathLike, paths: Iterable[str] | None = None) -> FileMap:
    """``{relpath: sha256 hex}`` for *paths* (default: every regular file below *root*)."""
    root = os.fspath(root)
    rels = walk_files(root) if paths is None else list(paths)
    return {p: hash_file(os.path.join(root, *p.split("/"))) for p in rels}


def tree_digest(root: str | os.PathLike, paths: Iterable[str] | None = None) -> str:
    """Tree digest of *root*, over *paths* when given (the laptop passes the packed set)."""
    if paths is not None:
        paths = list(paths)
    files = file_map(root, paths)
    if not files:
        raise VerificationError(f"{os.fspath(root)}: no files to digest")
    return digest_of_map(files)


@dataclass(frozen=True)
class TreeDiff:
    """What differs between an expected and an actual per-file map."""

    added: list = field(default_factory=list)
    removed: list = field(default_factory=list)
    changed: list = field(default_factory=list)

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


def read_tree_strict(root: str | os.PathLike) -> dict[str, bytes]:
    """Read every entry below *root* once, refusing anything that is not a plain file.

    Symlinks, devices, FIFOs, sockets and files with more than one hard link raise
    :class:`VerificationError`: each would let the bytes checked differ from the bytes
    executed. Nothing is excluded: a planted ``__pycache__/*.pyc`` is returned like code.
    """
    root = os.fspath(root)
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        raise VerificationError(f"{root}: plugin directory is missing") from None
    if not stat.S_ISDIR(st.st_mode):
        raise VerificationError(f"{root}: not a directory")
    out: dict[str, bytes] = {}
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
                elif stat.S_ISLNK(st.st_mode):
                    raise VerificationError(f"{rel}: is a symlink; plugin trees hold regular files only")
                elif not stat.S_ISREG(st.st_mode):
                    raise VerificationError(f"{rel}: is not a regular file (device, FIFO or socket)")
                elif st.st_nlink > 1:
                    raise VerificationError(f"{rel}: has {st.st_nlink} hard links; plugin files must have one")
                else:
                    fd = os.open(entry.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
                    with os.fdopen(fd, "rb") as f:
                        out[rel] = f.read()
    return out


def verify_tree(
    root: str | os.PathLike, expected: str, expected_files: Mapping[str, str] | None = None
) -> dict[str, bytes]:
    """Read *root* once and check its digest; return the verified bytes.

    On mismatch the error names the files added, removed and changed when the expected
    per-file map is known.
    """
    contents = read_tree_strict(root)
    actual = {p: hashlib.sha256(b).hexdigest() for p, b in contents.items()}
    got = digest_of_map(actual)
    if got != expected:
        detail = diff_maps(expected_files, actual).describe() if expected_files else "per-file hashes unknown"
        raise VerificationError(f"{os.fspath(root)}: digest mismatch (expected {expected}, got {got}); {detail}")
    return contents
