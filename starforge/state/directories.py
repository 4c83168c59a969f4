"""Directories StarForge creates (registry, cache, job and key directories) get explicit modes.

``os.makedirs(path)`` asks for 0o777 and leaves the rest to the umask; under ``umask 000``
that is a world-writable registry, cache or job directory, where anyone on the machine
could plant files that later run. :func:`make_dirs` creates each missing level itself with
*mode* narrowed by the umask and never world-writable, whatever the umask. Standard library
only.

>>> make_dirs("/tmp/forge-doc/a/b", 0o755)   # doctest: +SKIP
PosixPath('/tmp/forge-doc/a/b')
"""

from __future__ import annotations

import os
from pathlib import Path

SHARED = 0o775  # a directory registry: group-writable when the umask allows (umask 002 teams)
PRIVATE = 0o755  # caches, job directories, FORGE_HOME
SECRET = 0o700  # keys


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def dir_mode(mode: int) -> int:
    """*mode* as the umask narrows it, never writable by others."""
    return mode & ~current_umask() & ~0o002


def make_dirs(path: str | os.PathLike, mode: int = PRIVATE) -> Path:
    """Create *path* and its missing parents, each with :func:`dir_mode` of *mode*; existing ones are left as they are."""
    path = Path(path)
    missing = []
    level = path
    while not os.path.isdir(level):
        missing.append(level)
        if level.parent == level:
            break
        level = level.parent
    final = dir_mode(mode)
    for directory in reversed(missing):
        try:
            os.mkdir(directory, final)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise
            continue  # made by a concurrent writer, which set its mode
        os.chmod(directory, final)  # os.mkdir's mode was narrowed by the umask only
    return path


def file_system_of(path: str | os.PathLike) -> str:
    """The file system holding *path*, for a message: its mount point, type and free space.

    >>> file_system_of("/tmp/forge-doc/x")   # doctest: +SKIP
    'the tmpfs file system mounted at /tmp (0 bytes free)'
    """
    level = os.path.abspath(path)
    while not os.path.exists(level) and os.path.dirname(level) != level:
        level = os.path.dirname(level)
    while not os.path.ismount(level) and os.path.dirname(level) != level:
        level = os.path.dirname(level)
    kind = ""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
            for line in mounts:  # the last mount at a point is the one in use
                fields = line.split()
                if len(fields) > 2 and fields[1].replace("\\040", " ") == level:
                    kind = fields[2] + " "
    except OSError:
        pass
    try:
        stat = os.statvfs(level)
        free = f" ({stat.f_bavail * stat.f_frsize:,} bytes free)"
    except OSError:
        free = ""
    return f"the {kind}file system mounted at {level}{free}"


def disk_hint(exc: OSError, path: str | os.PathLike | None = None) -> str | None:
    """The hint for a full disk, a used-up quota or a read-only file system at *path*
    (else the error's own file name), naming that file system; None for other errors."""
    import errno

    where = path or exc.filename
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS) or not where:
        return None
    fs = file_system_of(os.fsdecode(where))
    if exc.errno == errno.EROFS:
        return f"{fs} is read-only; point FORGE_HOME (or the experiment, or the registry) at a writable one (nothing was half-written)"
    full = "is full" if exc.errno == errno.ENOSPC else "has no quota left for you"
    return f"{fs} {full}; free some space there and run the command again (nothing was half-written or left behind)"
