"""Leaving a staged tree read-only: the one walk that clears write bits.

Staging leaves each plugin tree read-only, and the launcher does it again on the node
(a requeued job on the same directory verifies again). Symlinks are never followed or
changed; errors on single entries are ignored (a tree already read-only, a file another
user owns). :func:`make_deletable` gives the folders' write bits back, for a copy that
someone else deletes once the job is done with it: Ray's copy of the job on a node
(:func:`deletable_when_done`). Standard library only.
"""

from __future__ import annotations

import os
import stat

from . import jobdir_layout

# Where the launchers running in one of Ray's copies of a job note themselves (one file per
# pid), so that only the last to end gives the folders back.
LAUNCHERS_DIR = os.path.join(jobdir_layout.RUNTIME_DIR, jobdir_layout.LAUNCHERS_DIR)


def make_read_only(path: str | os.PathLike[str]) -> None:
    """Clear the write bits below and at *path* (files first, then each directory); symlinks are left alone."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        entries = []
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            make_read_only(entry.path)
        elif not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o222:
            try:
                os.chmod(entry.path, stat.S_IMODE(st.st_mode) & ~0o222)
            except OSError:
                pass
    try:
        st = os.lstat(path)
        if st.st_mode & 0o222:
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o222)
    except OSError:
        pass


def make_deletable(path: str | os.PathLike[str]) -> None:
    """Give the owner's write bit back to *path* and every folder below it that this user owns.

    Files keep their modes: a read-only file in a writable folder can be deleted. Symlinks
    are never followed; the walk keeps a list, not a recursion (a job's folders may nest
    deep); errors on single entries are ignored, as in :func:`make_read_only`.
    """
    uid = os.geteuid()
    todo = [os.fspath(path)]
    while todo:
        folder = todo.pop()
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        if st.st_mode & 0o300 != 0o300:
            try:
                os.chmod(folder, stat.S_IMODE(st.st_mode) | 0o300)
            except OSError:
                continue
        try:
            with os.scandir(folder) as entries:
                todo.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue


def is_ray_copy(job_dir: str) -> bool:
    """True when *job_dir* is the copy Ray unpacked from the package the Ray backend named."""
    from .ray_init import PACKAGE_ENV

    package = os.environ.pop(PACKAGE_ENV, "")  # this job's: a job started from inside it has its own
    return bool(package) and os.path.basename(os.path.abspath(job_dir)) == package


def deletable_when_done(job_dir: str, roots: list[str]) -> None:
    """When this launcher ends, give the folders of *roots* their owner's write bit back,
    unless another launcher in *job_dir* still runs (the last one does it).

    Ray deletes its unpacked copy of a job with a plain ``shutil.rmtree`` once no process
    of the job uses it, which fails on read-only folders unless Ray runs as root. The copy
    is this job's alone (the package's name is the hash of a zip holding the job's own
    JobSpec; only the same staged job submitted twice shares it), and on its node the
    launcher is the job's last process: Ray ends the job's workers when the driver ends.
    So: at the interpreter's exit (a normal end, a failure, ``sys.exit``), and on SIGTERM
    or SIGHUP (Ray's stop), before the signal ends the process as it would have. A kill by
    SIGKILL, or ``os._exit`` in the trainer, leaves the copy read-only (docs/backends.md).
    """
    import atexit
    import signal

    launchers = os.path.join(job_dir, LAUNCHERS_DIR)
    mine = os.path.join(launchers, str(os.getpid()))
    try:
        os.makedirs(launchers, exist_ok=True)
        with open(mine, "w"):
            pass
    except OSError:
        pass

    def give_back() -> None:
        try:
            os.unlink(mine)
        except OSError:
            pass
        if not any(_alive(name) for name in _listing(launchers)):
            for root in roots:
                make_deletable(root)

    atexit.register(give_back)

    def on_signal(signum, frame) -> None:
        give_back()
        previous = before.get(signum, signal.SIG_DFL)
        signal.signal(signum, previous)
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signum)

    before = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        current = signal.getsignal(signum)
        if current is signal.SIG_IGN or current is None:  # an ignored signal ends nothing
            continue
        before[signum] = current
        try:
            signal.signal(signum, on_signal)
        except ValueError:  # not the main thread: the exit alone gives the folders back
            return


def _listing(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _alive(name: str) -> bool:
    """True when *name* is the pid of a process alive on this node."""
    if not name.isdigit():
        return False
    try:
        os.kill(int(name), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # alive, another user's
    return True
