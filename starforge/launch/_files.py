"""Atomic file writes for the launcher and the private per-user cache directories.

They live in :mod:`starforge.launch.runtime` (every process of a job needs them, and every
module a process imports costs it time); these names stay importable from here.

Cluster side: standard library only.
"""

from __future__ import annotations

from .runtime import atomic_write, private_cache_dir  # noqa: F401
