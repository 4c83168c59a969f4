"""An exclusive ``flock`` held for the length of a ``with`` block.

    with exclusive_lock(plugin_dir / ".lock"):
        ...  # read, decide, write atomically

The lock file is created when missing and left in place (removing it would let two
processes hold locks on different files). Standard library only.
"""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike):
    """Block until this process holds the exclusive lock on *path*; release it when the block ends."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except PermissionError:  # created by another user (a shared registry); flock needs no write access
        fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
