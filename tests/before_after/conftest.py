"""Fixtures for the before-and-after commands (plan, replay, lock and plugin diff): the
experiment ``Project`` (support.experiment) and a real OCI registry (support.oci), the same
definitions the experiment and registry tests use."""

from __future__ import annotations

import pytest
from support.experiment import Project
from support.oci import new_server


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path)


@pytest.fixture
def oci_server(tmp_path):
    """A real OCI registry (docker-registry on 127.0.0.1) of this test's own."""
    server = new_server(tmp_path / "oci")
    yield server
    server.stop()
