"""A test that needs what this machine may lack (a binary, root, a venv): it fails under CI,
where everything it needs is installed, and is skipped elsewhere."""

from __future__ import annotations

import os

import pytest


def need(condition: bool, reason: str) -> None:
    """Fail (under CI) or skip (elsewhere) the test when *condition* is false."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
