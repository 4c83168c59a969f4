"""Something costly made once per test run and read by every xdist worker that needs it.

A session fixture is made once per worker process; what several workers read the same way
(the docs world, forge's own wheel) is made by the first worker to ask for it, in the run's
temp directory that every worker's own lies in, while the others wait on a lock. What is
made stays where it was made (it may name its own absolute paths); a half-made one, left by
a worker that failed, is made again by the next.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The directory *name* in the run's temp directory, made by ``make(directory)`` unless
    another worker (or an earlier call) made it already."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's temp directory: gw0's and gw1's own are in it
    root, made = base / name, base / f"{name}.made"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            make(root)
            made.touch()
    return root
