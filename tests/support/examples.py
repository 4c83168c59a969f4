"""The project's examples/ as a fresh clone holds them, copied for a test.

A checkout where someone ran the README's first command, or an example, also holds what
running them wrote inside the experiment: its jobs (``.forge/``, with staged trees that are
read-only), the lock ``forge lock`` wrote and Python's bytecode. A test copies an example as
a new user would start from it, without any of that, whichever checkout it runs in.
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: What running an example writes inside it (none of it is in a fresh clone).
RUN_LEFTOVERS = (".forge", "plugins.lock.json", "__pycache__", "*.pyc")


def copy_example(name: str, dest: Path, *, repo: Path = REPO) -> Path:
    """Copy ``examples/<name>`` of *repo* to *dest* (which must not exist) as a fresh clone holds it."""
    shutil.copytree(repo / "examples" / name, dest, ignore=shutil.ignore_patterns(*RUN_LEFTOVERS))
    return dest
