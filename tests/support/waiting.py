"""Waiting for something a test started (a job, a process, a file) to happen."""

from __future__ import annotations

import time


def wait_for(check, what: str = "condition", timeout: float = 60.0, interval: float = 0.2):
    """The first true value ``check()`` returns, asked every *interval* seconds; an
    ``AssertionError`` naming *what* when none came within *timeout* seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")
