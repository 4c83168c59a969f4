"""Attempts: which launch of a job directory this is (a requeued job launches again).

The launcher claims the next number (:func:`next_attempt`) and exports it as
``FORGE_ATTEMPT``; every process of the job reads it back (:func:`attempt_number`).
Provenance records are named by it. Standard library only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Mapping


def _given(env: Mapping[str, str]) -> int | None:
    """The attempt the environment names: ``FORGE_ATTEMPT``, else ``SLURM_RESTART_COUNT``."""
    for key in ("FORGE_ATTEMPT", "SLURM_RESTART_COUNT"):
        value = env.get(key, "")
        if value.isdigit():
            return int(value)
    return None


def attempt_number(env: Mapping[str, str]) -> int:
    """This process's attempt: what the environment names, else 0."""
    given = _given(env)
    return 0 if given is None else given


_CLAIM_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def next_attempt(job_dir: str) -> int:
    """FORGE_ATTEMPT / SLURM_RESTART_COUNT when set, else the next attempt of the job directory.

    Each launch claims its number by creating an empty file named after it in
    ``.forge-runtime/attempts.d/`` (exclusive create: two launchers in one directory never
    get the same number, and there is no file to rewrite — rewriting one through a rename
    cost a tenth of a millisecond or more on every launch). The first launch is 0. A
    directory launched by a release that kept the count in ``.forge-runtime/attempts``
    continues from that count.
    """
    if _given(os.environ) is not None:
        return attempt_number(os.environ)
    from .jobdir_layout import ATTEMPTS_DIR, RUNTIME_DIR  # the launcher's only: a worker reads FORGE_ATTEMPT

    folder = os.path.join(job_dir, RUNTIME_DIR, ATTEMPTS_DIR)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        names = []
        try:
            os.makedirs(folder, 0o755, exist_ok=True)
            os.chmod(folder, 0o755)  # explicit, whatever the umask: nobody else adds attempts
        except OSError:
            pass
    except OSError:
        names = []
    n = max((int(name) for name in names if name.isascii() and name.isdigit()), default=-1) + 1
    if n == 0:
        try:
            with open(os.path.join(job_dir, RUNTIME_DIR, "attempts"), "rb") as f:
                n = int(f.read().strip() or 0)
        except (OSError, ValueError):
            n = 0
    for _ in range(1000):
        try:
            os.close(os.open(os.path.join(folder, str(n)), _CLAIM_FLAGS, 0o644))
        except FileExistsError:
            n += 1  # another launcher claimed it first
            continue
        except OSError:
            pass
        return n
    return n


def last_attempt(job_dir: str, env: Mapping[str, str]) -> int:
    """The attempt that ran last in *job_dir*: the one *env* names, else the highest claimed
    (read after a launcher has ended, by whoever records the end of its attempt)."""
    given = _given(env)
    if given is not None:
        return given
    from .jobdir_layout import ATTEMPTS_DIR, RUNTIME_DIR

    try:
        names = os.listdir(os.path.join(job_dir, RUNTIME_DIR, ATTEMPTS_DIR))
    except OSError:
        return 0
    return max((int(name) for name in names if name.isascii() and name.isdigit()), default=0)
