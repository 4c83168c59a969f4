"""Every test runs with its own FORGE_HOME, so no test reads or writes the user's state."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated_forge_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("forge-home")
    monkeypatch.setenv("FORGE_HOME", str(home))
    for name in ("FORGE_REGISTRY", "FORGE_OWNER", "FORGE_DEBUG", "FORGE_DISABLE", "FORGE_JOBS_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home


# Under pytest-xdist (`-n auto --dist loadgroup`, as .ci/run and the README run the suite),
# the tests that use one of the session's expensive services run on one worker per service:
# one Ray head, one Slurm cluster and one set of trainer-venv Ray heads per run, not one per
# worker. The services are per process (session fixtures on free loopback ports, in their
# own temp dirs, stopped by their own PIDs), so any split of the tests is correct; the groups
# save start-ups and keep the torch-heavy framework checks from competing with each other for
# the cores. tests/test_xdist_safety.py checks the groups and the per-worker isolation.
SERVICE_GROUPS = (("slurm_cluster", "slurm"), ("ray_head", "ray"), ("ray_head_in", "frameworks"))


def service_group(item) -> str | None:
    """The xdist group of a collected test: the first expensive service it uses, or None."""
    group = next((g for fixture, g in SERVICE_GROUPS if fixture in item.fixturenames), None)
    if group is None and item.get_closest_marker("frameworks") is not None:
        group = "frameworks"
    return group


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks (it appends the group to the node id)
def pytest_collection_modifyitems(config, items):
    for item in items:
        group = service_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """``-n N`` alone distributes by those groups (xdist's default, ``load``, ignores them)."""
    if getattr(config.option, "numprocesses", None) and getattr(config.option, "dist", "no") == "no":
        config.option.dist = "loadgroup"
