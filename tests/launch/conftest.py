"""Fixtures for the launcher tests (builders live in launch_jobs.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from launch_jobs import JobBuilder


@pytest.fixture
def builder(tmp_path: Path) -> JobBuilder:
    return JobBuilder(tmp_path)


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory) -> str:
    """An interpreter whose environment has neither starforge-core nor packaging."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import starforge"], capture_output=True, env={"PATH": "/usr/bin:/bin"}, cwd=str(venv))
    if probe.returncode == 0:
        pytest.fail("the bare venv can import starforge; the test would prove nothing")
    return python
