"""UTC timestamps as StarForge records them.

Two precisions, one format: ``2026-11-29T12:00:00Z`` (to the second: job records,
JobSpecs, registry entries, ``status.json``; the jobs store sorts records by the text)
and ``2026-11-29T12:00:00.123Z`` (to the millisecond: provenance records and patch
records, where several events fall in one second). Every writer takes them from here.
Standard library only.
"""

from __future__ import annotations

import time

TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"  # strftime format


def utc_now() -> str:
    """The current UTC time as ``2026-11-29T12:00:00Z``."""
    return time.strftime(TIMESTAMP, time.gmtime())


def utc_millis(ts: float | None) -> str | None:
    """*ts* (seconds since the epoch) as ``2026-11-29T12:00:00.123Z``; None stays None.

    >>> utc_millis(0.25)
    '1970-01-01T00:00:00.250Z'
    """
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + ".%03dZ" % int((ts % 1) * 1000)
