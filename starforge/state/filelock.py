"""An exclusive ``flock`` held for the length of a ``with`` block.

    with exclusive_lock(plugin_dir / ".lock"):
        ...  # read, decide, write atomically

The lock file is created when missing and left in place, except by a holder that removes
the directory it guards (a publish that failed before anything else was written there).
A process that waited on a lock file removed meanwhile holds nothing: it opens the path
again (and fails, naming it, when the directory is gone), so two processes never hold
locks on different files. Standard library only.
"""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike):
    """Block until this process holds the exclusive lock on *path*; release it when the block ends."""
    import fcntl

    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except PermissionError:  # created by another user (a shared registry); flock needs no write access
            fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder removed it while this process waited: not a lock any more
    try:
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _same_file(fd: int, path: str | os.PathLike) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)
