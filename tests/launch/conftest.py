"""Fixtures for the launcher tests (builders live in launch_jobs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch_jobs import JobBuilder


@pytest.fixture
def builder(tmp_path: Path) -> JobBuilder:
    return JobBuilder(tmp_path)
