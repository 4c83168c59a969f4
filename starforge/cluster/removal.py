"""Deleting a tree forge made: the one walk that removes a job directory or a copy of one.

A staged job leaves ``jobspec.json``, ``forge_plugins/`` and ``recipe/`` read-only
(:mod:`starforge.cluster.readonly`). Root deletes such a tree anyway; its owner cannot
until each folder is writable again, and ``shutil.rmtree(..., ignore_errors=True)`` then
leaves it behind without a word. And a job's ``work/`` may nest a thousand folders deep,
where a recursive walk (``shutil.rmtree`` and ``os.walk`` of Python 3.11) ends in a
``RecursionError``. So :func:`remove_tree`:

- walks with a list, not recursion, and holds one open folder at a time (a deep tree
  needs no more file descriptors than a shallow one): down with ``openat(name,
  O_NOFOLLOW)``, back up with ``openat("..")``, checked to be the folder it came from;
- never follows a symbolic link (a link is removed itself, as a file);
- makes each folder of its own user readable, writable and searchable by that user
  before emptying it (a folder of another user is left as it is);
- returns what it could not delete, each as ``path: reason``, so no caller reports a
  deletion that did not happen.

Cluster side: standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


@dataclass
class _Level:
    """A folder on the way down: its name in its parent, its identity, its subfolders not yet done."""

    name: str
    ident: tuple
    subdirs: list = field(default_factory=list)
    failures_before: int = 0


def remove_tree(path: str | os.PathLike, *, dir_fd: int | None = None) -> list[str]:
    """Delete *path* (relative to *dir_fd* when given) and everything below it; return what
    could not be deleted (``[]``: all of it went, or nothing was there).

    A symbolic link at *path* is removed itself; nothing is followed below it either.
    """
    path = os.fspath(path)
    try:
        st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [f"{path}: {exc.strerror}"]
    if not stat.S_ISDIR(st.st_mode):
        failures: list[str] = []
        _unlink(path, dir_fd, None, failures)
        return failures
    try:
        fd = _open_dir(path, dir_fd, st)
    except OSError as exc:
        return [f"{path}: {exc.strerror}"]
    failures = _empty(fd, path, st)
    try:
        os.rmdir(path, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if not failures:
            failures.append(f"{path}: {exc.strerror}")
    return failures


def _empty(fd: int, top: str, st: os.stat_result) -> list[str]:
    """Delete everything in the open folder *fd* (named *top* in messages); closes *fd*."""
    failures: list[str] = []
    levels = [_Level(top, (st.st_dev, st.st_ino))]
    levels[0].subdirs = _remove_files(fd, levels, failures)
    try:
        while True:
            level = levels[-1]
            if level.subdirs:
                name = level.subdirs.pop()
                try:
                    child_st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISDIR(child_st.st_mode):  # replaced meanwhile: a file now
                        _unlink(name, fd, levels, failures)
                        continue
                    child = _open_dir(name, fd, child_st)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    failures.append(f"{_shown(levels, name)}: {exc.strerror}")
                    continue
                os.close(fd)
                fd = child
                levels.append(_Level(name, (child_st.st_dev, child_st.st_ino), failures_before=len(failures)))
                levels[-1].subdirs = _remove_files(fd, levels, failures)
                continue
            if len(levels) == 1:
                return failures
            done = levels.pop()
            try:
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                failures.append(f"{_shown(levels, done.name)}/..: {exc.strerror}")
                return failures
            os.close(fd)
            fd = parent
            here = os.fstat(fd)
            if (here.st_dev, here.st_ino) != levels[-1].ident:
                failures.append(f"{_shown(levels, done.name)}: moved elsewhere while it was being deleted; stopped there")
                return failures
            try:
                os.rmdir(done.name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if len(failures) == done.failures_before:  # not already explained by what is left inside
                    failures.append(f"{_shown(levels, done.name)}: {exc.strerror}")
    finally:
        os.close(fd)


def _open_dir(name: str, dir_fd: int | None, st: os.stat_result) -> int:
    """The folder *name* (``lstat`` gave *st*) opened without following a link, made
    readable, writable and searchable by its owner when that is this user."""
    own = st.st_uid == os.geteuid()
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        if not own:
            raise
        # a folder of ours that we may not even read: chmod by name, then make sure the
        # folder opened is the one lstat saw (only this user could have swapped it)
        os.chmod(name, stat.S_IMODE(st.st_mode) | 0o700, dir_fd=dir_fd)
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino):
        os.close(fd)
        raise OSError(errno.ESTALE, "replaced while it was being deleted")
    if own and stat.S_IMODE(opened.st_mode) & 0o700 != 0o700:
        try:
            os.fchmod(fd, stat.S_IMODE(opened.st_mode) | 0o700)
        except OSError:
            pass  # the unlinks below say what this costs
    return fd


def _shown(levels: list, name: str | None = None) -> str:
    """The path of the folder *levels* lead to (or of *name* in it), for a message."""
    return "/".join([lv.name for lv in levels] + ([name] if name is not None else []))


def _remove_files(fd: int, levels: list, failures: list) -> list[str]:
    """Unlink everything in the open folder *fd* that is not a folder; return the folders' names."""
    try:
        with os.scandir(fd) as it:
            entries = list(it)
    except OSError as exc:
        failures.append(f"{_shown(levels)}: {exc.strerror}")
        return []
    subdirs = []
    for entry in entries:
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        if is_dir:
            subdirs.append(entry.name)
        else:
            _unlink(entry.name, fd, levels, failures)
    return subdirs


def _unlink(name: str, dir_fd: int | None, levels: list | None, failures: list) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        failures.append(f"{_shown(levels, name) if levels is not None else name}: {exc.strerror}")


def describe_failures(failures: list[str], shown: int = 3, width: int = 160) -> str:
    """*failures* for one line of a message: the first *shown*, each cut to *width* characters.

    >>> describe_failures(["a/b: Permission denied"])
    'a/b: Permission denied'
    """
    parts = [f if len(f) <= width else "…" + f[-(width - 1):] for f in failures[:shown]]
    more = len(failures) - shown
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
