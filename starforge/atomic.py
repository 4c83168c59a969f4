"""Atomic file writes: a temp file beside the target, then one rename.

A reader sees the old file or the new one, never a half-written one, and a failed write
leaves no temp file behind::

    atomic.write_file(path, text)                       # 0o644, replaces path
    atomic.write_file(key, pem, 0o600, exclusive=True)  # never replaces an existing key
    with atomic.writer(dest, fsync=True) as f:          # for data written in chunks
        shutil.copyfileobj(src, f)

Standard library only, and no ``tempfile`` (its import costs a few milliseconds), so the
cluster side may use this module too.
"""

from __future__ import annotations

import contextlib
import itertools
import os

_counter = itertools.count()
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


@contextlib.contextmanager
def writer(path: str | os.PathLike, mode: int = 0o644, *, fsync: bool = False, exclusive: bool = False):
    """A binary file that becomes *path* (with permissions *mode*) when the block ends.

    The temp file has *mode* from the start, so a secret is never readable by others.
    With *fsync* the data reaches the disk before the rename. With *exclusive* an existing
    *path* is never replaced: the rename is a hard link and raises ``FileExistsError``.
    When the block raises, *path* is untouched and the temp file is removed.
    """
    path = os.fspath(path)
    fd, tmp = _create_beside(path, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)  # os.open's mode was narrowed by the umask
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_file(
    path: str | os.PathLike, data: bytes | str, mode: int = 0o644, *, fsync: bool = False, exclusive: bool = False
) -> None:
    """Write *data* (text is written as UTF-8) to *path* atomically; see :func:`writer`."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with writer(path, mode, fsync=fsync, exclusive=exclusive) as f:
        f.write(data)


def _create_beside(path: str, mode: int) -> tuple[int, str]:
    folder, name = os.path.split(path)
    while True:  # a name left behind by a killed process with the same pid is skipped
        tmp = os.path.join(folder or ".", f".{name}.{os.getpid()}-{next(_counter)}.tmp")
        try:
            return os.open(tmp, _FLAGS, mode), tmp
        except FileExistsError:
            continue
