"""Every test runs with its own FORGE_HOME, so no test reads or writes the user's state."""

import pytest


@pytest.fixture(autouse=True)
def isolated_forge_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("forge-home")
    monkeypatch.setenv("FORGE_HOME", str(home))
    for name in ("FORGE_REGISTRY", "FORGE_OWNER", "FORGE_DEBUG", "FORGE_DISABLE", "FORGE_JOBS_DIR"):
        monkeypatch.delenv(name, raising=False)
    return home
