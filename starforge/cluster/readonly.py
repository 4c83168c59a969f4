"""Leaving a staged tree read-only: the one walk that clears write bits.

Staging leaves each plugin tree read-only, and the launcher does it again on the node
(a requeued job on the same directory verifies again). Symlinks are never followed or
changed; errors on single entries are ignored (a tree already read-only, a file another
user owns). :func:`make_deletable` gives the folders' write bits back, for a copy that
someone else deletes once the job is done with it (Ray's copy of the job on a node).
Standard library only.
"""

from __future__ import annotations

import os
import stat


def make_read_only(path: str | os.PathLike[str]) -> None:
    """Clear the write bits below and at *path* (files first, then each directory); symlinks are left alone."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        entries = []
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            make_read_only(entry.path)
        elif not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o222:
            try:
                os.chmod(entry.path, stat.S_IMODE(st.st_mode) & ~0o222)
            except OSError:
                pass
    try:
        st = os.lstat(path)
        if st.st_mode & 0o222:
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o222)
    except OSError:
        pass


def make_deletable(path: str | os.PathLike[str]) -> None:
    """Give the owner's write bit back to *path* and every folder below it that this user owns.

    Files keep their modes: a read-only file in a writable folder can be deleted. Symlinks
    are never followed; the walk keeps a list, not a recursion (a job's folders may nest
    deep); errors on single entries are ignored, as in :func:`make_read_only`.
    """
    uid = os.geteuid()
    todo = [os.fspath(path)]
    while todo:
        folder = todo.pop()
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        if st.st_mode & 0o300 != 0o300:
            try:
                os.chmod(folder, stat.S_IMODE(st.st_mode) | 0o300)
            except OSError:
                continue
        try:
            with os.scandir(folder) as entries:
                todo.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
