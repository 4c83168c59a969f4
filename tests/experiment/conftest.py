"""The experiment tests' world: ``project``, a :class:`support.experiment.Project` per test, and
``opsd``, that project with one plugin published and requested."""

from __future__ import annotations

import pytest
from support.experiment import Project


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path)


@pytest.fixture
def opsd(project):
    """alice/opsd-patch 1.2.0 (eager, declares opsd.scale) published; experiment requests it."""
    project.publish(project.plugin("opsd-patch", params={"opsd.scale": ("float", 1.0)}))
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    return project
