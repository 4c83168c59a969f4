"""The registry tests' fixtures: real OCI registries (support.oci), an isolated FORGE_HOME
and packed plugin versions (plugin_builders), one user and one registry of each kind."""

from __future__ import annotations

import pytest

# The plugin builders' fixtures, for every test in this folder (a conftest is where pytest looks).
from plugin_builders import forge_home, make_version  # noqa: F401
from support.oci import RegistryServer, need_binary, new_server
from support.registry_world import User


@pytest.fixture(scope="session")
def oci_registry(tmp_path_factory):
    """A plain-HTTP registry without auth, shared by the session; yields the server."""
    server = new_server(tmp_path_factory.mktemp("oci-plain"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def oci_registry_auth(tmp_path_factory):
    """A registry behind htpasswd Basic auth (user ``alice``), shared by the session."""
    server = new_server(tmp_path_factory.mktemp("oci-auth"), auth=True)
    yield server
    server.stop()


@pytest.fixture
def private_registry(tmp_path):
    """A registry of this test's own (to kill, restart or damage); stopped at the end."""
    servers = []

    def start(auth: bool = False) -> RegistryServer:
        server = new_server(tmp_path / f"registry-{len(servers)}", auth=auth)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def skopeo():
    """Path of the skopeo binary (an independent OCI client)."""
    return need_binary("skopeo")


@pytest.fixture(autouse=True)
def _no_ambient_registry_credentials(monkeypatch, tmp_path):
    """Tests see only the credentials they set: no user env vars, no ~/.docker/config.json."""
    monkeypatch.delenv("FORGE_REGISTRY_USER", raising=False)
    monkeypatch.delenv("FORGE_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker-config"))


@pytest.fixture(params=["directory", pytest.param("oci", marks=pytest.mark.oci)])
def registry(request, tmp_path):
    """A fresh registry of each kind: a directory, or a repository prefix of its own on a real OCI registry."""
    if request.param == "directory":
        return str(tmp_path / "registry")
    server = request.getfixturevalue("oci_registry")
    return f"oci://127.0.0.1:{server.port}/{tmp_path.name.replace('_', '-').lower()[-40:]}"


@pytest.fixture
def user(tmp_path) -> User:
    return User(tmp_path / "user")
