"""What a killed staging leaves behind, and sweeping it once its process is gone.

A job is staged under a temporary name beside its final place (:func:`starforge.jobs.staged.stage`)
that says who is staging it: ``.<job id>.staging-<pid>@<host tag>-<random>``, the host tag
being :func:`starforge.cluster.atomic.writer_tag` (where that pid means something;
:func:`starforge.jobs.staged.staging_name_parts` reads such a name back). A
``forge submit`` killed while staging leaves that folder; a later command finds it in the
staging folders it knows of and removes it when

- it is a real directory (never a link, never through one) owned by this user, and
- its process is gone: at once for a pid of this host (and PID namespace); for one staged on
  another host of a shared folder, or named by an earlier release without a pid, only once it
  is :data:`STALE_AFTER` seconds old.

Laptop side, standard library only.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..cluster.atomic import process_alive, writer_tag
from .staged import remove_tree, staging_name_parts

STALE_AFTER = 24 * 3600  # a staging folder of another host (or without a pid) older than this is swept


@dataclass(frozen=True)
class Leftover:
    """A staging folder found beside the job directories: whose job it was and who staged it."""

    path: Path
    job_id: str
    pid: int | None  # None: named by an earlier release
    here: bool  # staged on this host (and PID namespace): the pid means something here

    def describe(self) -> str:
        """``half-staged job directory PATH (job ID; …)``, saying why it was taken for abandoned."""
        if self.pid is not None and self.here:
            why = f"the forge process that staged it, pid {self.pid}, ended before it finished"
        else:
            why = "staged on another host or by an earlier release, untouched for over a day"
        return f"half-staged job directory {self.path} (job {self.job_id}; {why})"


def leftovers(root: str | os.PathLike) -> list[Leftover]:
    """The staging folders in *root* that are this user's real directories (links and other
    users' folders are never listed); *root* itself must not go through a link."""
    root = Path(os.path.abspath(root))
    if os.path.realpath(root) != str(root):
        return []  # a link on the way: nothing of it is touched
    try:
        names = os.listdir(root)
    except OSError:
        return []
    here = writer_tag()
    found = []
    for name in sorted(names):
        parts = staging_name_parts(name)
        if parts is None:
            continue
        try:
            st = os.lstat(root / name)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            continue
        job_id, pid, tag = parts
        found.append(Leftover(path=root / name, job_id=job_id, pid=pid, here=tag == here))
    return found


def abandoned(leftover: Leftover, now: float | None = None) -> bool:
    """Whether the process that staged *leftover* is gone (for one of another host, or
    without a pid: whether the folder is older than :data:`STALE_AFTER`)."""
    if leftover.pid is not None and leftover.here:
        return not process_alive(leftover.pid)
    try:
        age = (time.time() if now is None else now) - os.lstat(leftover.path).st_mtime
    except OSError:
        return False
    return age > STALE_AFTER


def sweep(root: str | os.PathLike, *, job_id: str | None = None, pid: int | None = None) -> list[Leftover]:
    """Remove the abandoned staging folders in *root* (:func:`abandoned`); return them.

    With *job_id* and *pid*: exactly that process's folders of that job, whether it is still
    being reaped or not (its supervisor saw it end).
    """
    removed = []
    for leftover in leftovers(root):
        if job_id is not None:
            if (leftover.job_id, leftover.pid, leftover.here) != (job_id, pid, True):
                continue
        elif not abandoned(leftover):
            continue
        try:
            remove_tree(leftover.path)
        except OSError:
            continue  # another sweep got there first, or it cannot go: it stays listed next time
        removed.append(leftover)
    return removed


def sweep_beside(job_dirs) -> list[Leftover]:
    """:func:`sweep` the folders the job directories *job_dirs* were staged in (each once;
    relative or empty paths are no folder of a job)."""
    roots = {os.path.dirname(os.fspath(d)) for d in job_dirs if d and os.path.isabs(os.fspath(d))}
    removed = []
    for root in sorted(roots):
        removed += sweep(root)
    return removed
