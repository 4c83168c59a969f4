"""The catalogue tests' fixtures: one headless browser for the session (its start is the cost),
and the folder the run saves its screenshots to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.browser import Browser


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory, request) -> Path:
    """Where this run saves the pages' screenshots (FORGE_CATALOG_SCREENSHOTS, else the run's
    pytest temp folder), printed at the end of the session."""
    chosen = os.environ.get("FORGE_CATALOG_SCREENSHOTS")
    base = tmp_path_factory.getbasetemp()
    folder = Path(chosen) if chosen else (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "catalog-screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    yield folder
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"catalogue screenshots: {folder}")


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """Headless chromium through chromedriver, shared by every browser test of the session."""
    b = Browser(tmp_path_factory.mktemp("browser"))
    yield b
    b.close()
