"""Deleting a job's directory (``forge jobs rm``, ``prune``) without leaving the jobs folder.

A job record names its directory (``dir``), resolved when the job was submitted, so it
holds no symlink. If one appears later anywhere on that path — ``.forge/jobs`` or a shared
staging folder replaced by a link to elsewhere, the job directory itself a link — deleting
"the job directory" would delete whatever the link points at. So a path that no longer
resolves to itself is refused, naming the link; nothing is followed. The walk down to the
job directory opens each level with ``O_NOFOLLOW`` and the tree is removed relative to
that open parent (:func:`starforge.cluster.removal.remove_tree`, which never follows links
inside), so a link swapped in after the check is not followed either. What could not be
deleted is returned, never passed over.

Laptop side, standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..cluster.removal import remove_tree
from ..errors import BackendError


def _first_link(path: Path) -> Path | None:
    """The first component of *path* (absolute) that is a symlink now, or None."""
    current = Path(path.anchor)
    for part in path.parts[1:]:
        current = current / part
        if os.path.islink(current):
            return current
        if not os.path.lexists(current):
            return None
    return None


def removable_job_dir(record) -> Path | None:
    """The directory ``forge jobs rm`` may delete for *record*, None when there is none of its own.

    None: no directory there any more, or one that is not this job's (its name is not the
    job id). Raises :class:`BackendError` when the path goes through a symlink now.
    """
    job_dir = Path(record.dir)
    if not record.dir or not job_dir.is_absolute() or job_dir.name != record.id:
        return None
    if not os.path.lexists(job_dir) and not os.path.exists(job_dir):
        return None  # nothing there, through a link or not: only the record goes
    link = _first_link(job_dir)
    if link is not None:
        target = os.readlink(link)
        raise BackendError(
            f"job {record.id}: its directory {job_dir} goes through a symlink now ({link} -> {target}); nothing deleted",
            hint="a job directory is deleted only where it was staged, never through a link; check who made the link, "
                 f"delete the staged directory yourself if it is yours, then run forge jobs rm {record.id} again",
        )
    if not os.path.isdir(job_dir):
        return None
    return job_dir


def _open_parent(job_dir: Path) -> int:
    """An fd of *job_dir*'s parent, each level opened without following a link."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(job_dir.anchor, flags)
    try:
        for part in job_dir.parent.parts[1:]:
            try:
                next_fd = os.open(part, flags, dir_fd=fd)
            except OSError as exc:
                raise BackendError(
                    f"{job_dir}: {part} changed while it was being deleted ({exc.strerror}); nothing deleted",
                    hint="a job directory is deleted only where it was staged, never through a link",
                ) from None
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_job_dir(job_dir: Path) -> list[str]:
    """Delete *job_dir* (checked by :func:`removable_job_dir`) without following any link;
    return what could not be deleted (:func:`starforge.cluster.removal.remove_tree`: the
    staged read-only folders are made writable by their owner first, a deep tree is walked
    without recursion)."""
    parent = _open_parent(job_dir)
    try:
        st = os.stat(job_dir.name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            raise BackendError(f"{job_dir} is no longer a directory (a link or a file took its place); nothing deleted")
        return remove_tree(job_dir.name, dir_fd=parent)
    except FileNotFoundError:
        return []
    finally:
        os.close(parent)
