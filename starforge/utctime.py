"""UTC timestamps as StarForge records them: ``2026-11-29T12:00:00Z`` (to the second).

Job records, JobSpecs and registry entries all use this one format, and the jobs store
sorts records by the text, so every writer takes it from here. Standard library only.
"""

from __future__ import annotations

import time

TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"  # strftime format


def utc_now() -> str:
    """The current UTC time as ``2026-11-29T12:00:00Z``."""
    return time.strftime(TIMESTAMP, time.gmtime())
