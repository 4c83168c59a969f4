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
