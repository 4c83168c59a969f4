"""Fixtures for the before-and-after commands (plan, replay, lock and plugin diff): the
experiment ``Project`` of tests/experiment and the real OCI registry of tests/registry,
loaded from those folders so one definition serves every test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS / "registry"))  # plugin_builders, which the registry conftest imports


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_experiment = _load("_before_after_experiment", TESTS / "experiment" / "conftest.py")
_registry = _load("_before_after_registry", TESTS / "registry" / "conftest.py")
Project = _experiment.Project


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path)


@pytest.fixture
def oci_server(tmp_path):
    """A real OCI registry (docker-registry on 127.0.0.1) of this test's own."""
    server = _registry._new_server(tmp_path / "oci")
    yield server
    server.stop()
