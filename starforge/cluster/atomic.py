"""Atomic file writes: a temp file beside the target, then one rename.

A reader sees the old file or the new one, never a half-written one, and a failed write
leaves no temp file behind::

    atomic.write_file(path, text)                       # 0o644, replaces path
    atomic.write_file(key, pem, 0o600, exclusive=True)  # never replaces an existing key
    with atomic.writer(dest, fsync=True) as f:          # for data written in chunks
        shutil.copyfileobj(src, f)
    atomic.sweep_stale(folder)                          # what killed writers left there

A temp file is ``.<name>.<pid>-<n>@<host tag>.tmp``: the writer's pid and where that pid
means something (:func:`writer_tag`), so a sweep removes this host's dead writers' files
at once and another host's (on a shared directory) only after ``min_age``.

Standard library only (``os`` and ``itertools``; no ``tempfile`` or ``contextlib``, whose
imports cost milliseconds), so the launcher and every worker use it too.
"""

from __future__ import annotations

import itertools
import os

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Literal

_counter = itertools.count()
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class writer:
    """A binary file that becomes *path* (with permissions *mode*) when the block ends.

    The temp file has *mode* from the start, so a secret is never readable by others.
    With *fsync* the data reaches the disk before the rename. With *exclusive* an existing
    *path* is never replaced: the rename is a hard link and raises ``FileExistsError``.
    When the block raises, *path* is untouched and the temp file is removed. Inside the
    block, ``.tmp`` is the temp file's path, for code that writes it by name.
    """

    def __init__(self, path: str | os.PathLike, mode: int = 0o644, *, fsync: bool = False, exclusive: bool = False):
        self.path = os.fspath(path)
        self.mode = mode
        self.fsync = fsync
        self.exclusive = exclusive

    def __enter__(self):
        fd, self.tmp = _create_beside(self.path, self.mode)
        self.file = os.fdopen(fd, "wb")
        return self.file

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if exc_type is not None:
            _discard(self.file, self.tmp)
            named = _naming(exc, self.path)
            if named is not None:
                raise named from None
            return False
        try:
            self.file.flush()
            _finish(self.file.fileno(), self.mode, self.fsync)
            self.file.close()
            _publish(self.tmp, self.path, self.exclusive)
        except BaseException as failed:
            _discard(self.file, self.tmp)
            named = _naming(failed, self.path)
            if named is not None:
                raise named from None
            raise
        return False


def write_file(
    path: str | os.PathLike, data: bytes | str, mode: int = 0o644, *, fsync: bool = False, exclusive: bool = False
) -> None:
    """Write *data* (text is written as UTF-8) to *path* atomically; see :class:`writer`.

    Without *fsync*, five system calls: create the temp file, write, set its mode
    (whatever the umask), close, rename over *path*.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    path = os.fspath(path)
    fd, tmp = _create_beside(path, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            _finish(fd, mode, fsync)
        finally:
            os.close(fd)
        _publish(tmp, path, exclusive)
    except BaseException as exc:
        _remove(tmp)
        named = _naming(exc, path)
        if named is not None:
            raise named from None
        raise


def _naming(exc: BaseException | None, path: str) -> OSError | None:
    """An OS error of a write (a full disk, a quota) that does not say which file it was,
    as the same error naming *path*, the file being written (its temp file is gone by
    then); None for any other exception."""
    if not isinstance(exc, OSError) or exc.filename is not None or exc.errno is None:
        return None
    return type(exc)(exc.errno, exc.strerror, path)


_tag: str | None = None


def writer_tag() -> str:
    """This host and PID namespace, as temp names carry it: ``<hostname>+<pid ns inode>``.

    A pid means something only where it was taken: on this host, in this PID namespace
    (two containers sharing the host's name do not share pids). The tag says where, so a
    sweep can tell its own host's dead writers (removed at once) from another host's on a
    shared directory (left alone for ``min_age``).
    """
    global _tag
    if _tag is None:
        host = "".join(c if c.isalnum() or c in ".-" else "_" for c in os.uname().nodename)[:63] or "host"
        try:
            host += "+%d" % os.stat("/proc/self/ns/pid").st_ino
        except OSError:
            pass
        _tag = host
    return _tag


def _create_beside(path: str, mode: int) -> tuple[int, str]:
    folder, name = os.path.split(path)
    tag = writer_tag()
    while True:  # a name left behind by a killed process with the same pid is skipped
        tmp = os.path.join(folder or ".", f".{name}.{os.getpid()}-{next(_counter)}@{tag}.tmp")
        try:
            return os.open(tmp, _FLAGS, mode), tmp
        except FileExistsError:
            continue


def _finish(fd: int, mode: int, fsync: bool) -> None:
    os.fchmod(fd, mode)  # os.open's mode was narrowed by the umask
    if fsync:
        os.fsync(fd)


def _publish(tmp: str, path: str, exclusive: bool) -> None:
    if exclusive:
        os.link(tmp, path)
        os.unlink(tmp)
    else:
        os.replace(tmp, path)


def _discard(file, tmp: str) -> None:
    """Close *file* without raising and remove *tmp*. After a failed flush (a full disk)
    ``close()`` flushes again and raises again, though the descriptor is closed by then."""
    try:
        file.close()
    except OSError:
        pass
    _remove(tmp)


def _remove(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


def sweep_stale(folder: str | os.PathLike, min_age: float = 600.0) -> list:
    """Remove the temp files that writers killed before finishing left in *folder*; return their names.

    A temp file names its writer: ``.<name>.<pid>-<n>@<host tag>.tmp`` (:func:`writer_tag`).
    One written on this host (and PID namespace) is stale as soon as its pid is gone: a
    ``kill -9`` of a publish leaves nothing behind once the next publish ran. One written
    on another host of a shared directory, whose pid means nothing here (or one without a
    host tag, from an earlier release), is stale only when it was also last written more
    than *min_age* seconds ago, so a writer there is safe while it writes.
    """
    import time

    removed: list[str] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    now = time.time()
    here = writer_tag()
    for name in names:
        writer = _writer(name)
        if writer is None:
            continue
        pid, tag = writer
        if process_alive(pid):
            continue
        tmp = os.path.join(folder, name)
        try:
            if tag != here and now - os.lstat(tmp).st_mtime < min_age:
                continue
            os.unlink(tmp)
        except OSError:
            continue
        removed.append(name)
    return removed


def _writer(name: str) -> tuple[int, str | None] | None:
    """``(pid, host tag or None)`` from a temp file name written by :func:`_create_beside`, or None."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    body = name[: -len(".tmp")]
    head, at, after = body.rpartition("@")
    tag: str | None = None  # None: written before temp names carried the host
    if at and after:
        body, tag = head, after
    tail = body.rpartition(".")[2]
    pid, dash, count = tail.partition("-")
    if not (dash and pid.isdigit() and count.isdigit()):
        return None
    return int(pid), tag


def process_alive(pid: int) -> bool:
    """Whether process *pid* exists on this machine (this process counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
