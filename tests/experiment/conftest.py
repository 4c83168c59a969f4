"""The experiment tests' world: ``project``, a :class:`support.experiment.Project` per test."""

from __future__ import annotations

import pytest

from support.experiment import Project


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path)
