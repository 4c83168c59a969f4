"""Leaving a staged tree read-only: the one walk that clears write bits.

Staging leaves each plugin tree read-only, and the launcher does it again on the node
(a requeued job on the same directory verifies again). Symlinks are never followed or
changed; errors on single entries are ignored (a tree already read-only, a file another
user owns). Standard library only.
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
