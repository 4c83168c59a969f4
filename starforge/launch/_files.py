"""Atomic file writes for the launcher (temp file in the same directory, then rename), and
the private per-user cache directories.

``tempfile`` is avoided on purpose: importing it costs every process of the job a few
milliseconds, and the names here only need to be unique per process and call.

Cluster side: standard library only.
"""

from __future__ import annotations

import itertools
import os
import stat

_counter = itertools.count()
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def atomic_write(path: str, data: bytes, mode: int = 0o644) -> None:
    """Write *data* to *path* atomically; nothing half-written is ever visible.

    Five system calls: create the temp file, write, set its mode (whatever the umask),
    close, rename over *path*.
    """
    folder = os.path.dirname(path) or "."
    tmp = os.path.join(folder, f".tmp-{os.getpid()}-{next(_counter)}-{os.path.basename(path)}")
    fd = os.open(tmp, _FLAGS, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def private_cache_dir(name: str) -> str | None:
    """``<cache>/<name>`` created private to this user, or None when it cannot be.

    ``<cache>`` is ``$FORGE_HOME/cache``, else ``$XDG_CACHE_HOME/starforge`` (default
    ``~/.cache/starforge``). A directory another user owns or can write is refused: what
    is cached there (compiled code, requirement verdicts) would be theirs to decide.
    """
    if os.environ.get("FORGE_HOME"):
        base = os.path.join(os.environ["FORGE_HOME"], "cache")
    else:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "starforge")
    path = os.path.join(base, name)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o077 or not stat.S_ISDIR(st.st_mode):
            return None
    except OSError:
        return None
    return path
