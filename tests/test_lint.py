"""ruff and mypy report nothing on the package (configured in pyproject.toml, as pre-commit runs them).

Both run from the interpreter's own environment (the `dev` extra); the test skips only
when a tool is not installed there, and fails under CI even then.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "starforge"


def _tool(module: str) -> list[str]:
    if importlib.util.find_spec(module) is None:
        reason = f"{module} is not installed (install the 'dev' extra: pip install '.[dev]')"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return [sys.executable, "-m", module]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    # from the checkout, so pyproject.toml's settings apply and the source tree is what is read
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_reports_nothing_on_the_package():
    result = _run([*_tool("ruff"), "check", "--no-cache", "starforge"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_finds_no_unused_or_undefined_names_and_no_unsorted_imports_in_the_tests():
    result = _run([*_tool("ruff"), "check", "--no-cache", "--select", "F,I", "tests"])
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_reports_nothing_on_the_package():
    result = _run([*_tool("mypy"), "--no-incremental", "--cache-dir", os.devnull, "starforge"])
    assert result.returncode == 0, result.stdout + result.stderr
