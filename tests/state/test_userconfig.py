"""The user config (config.yaml under FORGE_HOME) is read as strictly as every other YAML file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.cli import forge as run_forge

from starforge.errors import ManifestError
from starforge.registry.factory import default_registry_url
from starforge.registry.publish import default_owner
from starforge.state.userconfig import load_user_config


def config(home, text: str):
    path = home / "config.yaml"
    path.write_text(text)
    return path


def test_known_keys_are_read_and_a_missing_or_empty_file_is_empty(isolated_forge_home):
    assert load_user_config() == load_user_config(isolated_forge_home / "config.yaml")
    assert (load_user_config().registry, load_user_config().owner) == (None, None)
    config(isolated_forge_home, "# nothing yet\n")
    assert load_user_config().owner is None
    config(isolated_forge_home, "registry: oci://localhost:5000/forge\nowner: carol\n")
    assert default_owner() == "carol"
    assert default_registry_url() == "oci://localhost:5000/forge"


def test_a_misspelt_owner_is_an_error_not_the_login_name(isolated_forge_home):
    path = config(isolated_forge_home, "registry: /srv/reg\nownr: bob\n")
    with pytest.raises(ManifestError) as exc:
        default_owner()
    assert exc.value.message == f"{path}:2: unknown key 'ownr' (did you mean 'owner'?)"
    assert "known keys: registry, owner" in exc.value.hint
    with pytest.raises(ManifestError):
        default_registry_url()  # the same file, the same verdict


def test_a_registry_that_is_not_a_string_is_an_error_not_the_embedded_default(isolated_forge_home):
    path = config(isolated_forge_home, "owner: carol\nregistry: 5\n")
    with pytest.raises(ManifestError) as exc:
        default_registry_url()
    assert exc.value.message.startswith(f"{path}:2: registry: expected a non-empty string")
    assert exc.value.message.endswith("got int 5")
    assert "registry: oci://localhost:5000/forge" in exc.value.hint


def test_other_shapes_are_refused_with_the_file(isolated_forge_home):
    path = config(isolated_forge_home, "- owner: carol\n")
    with pytest.raises(ManifestError, match=f"^{path}: expected a mapping of settings, got list$"):
        load_user_config()
    config(isolated_forge_home, "owner: carol\nowner: dave\n")
    with pytest.raises(ManifestError, match="duplicate"):
        load_user_config()
    config(isolated_forge_home, "owner:\n")
    with pytest.raises(ManifestError, match="owner: expected a non-empty string .* got nothing"):
        load_user_config()


def test_the_environment_still_wins_over_the_config(isolated_forge_home, monkeypatch):
    config(isolated_forge_home, "owner: carol\nregistry: /srv/reg\n")
    monkeypatch.setenv("FORGE_OWNER", "erin")
    monkeypatch.setenv("FORGE_REGISTRY", "/srv/other")
    assert (default_owner(), default_registry_url()) == ("erin", "/srv/other")


def test_publish_with_a_misspelt_owner_key_fails_with_one_located_line(isolated_forge_home, tmp_path):
    path = config(isolated_forge_home, "ownr: bob\n")
    plugin = tmp_path / "p"
    plugin.mkdir()
    (plugin / "plugin.yaml").write_text("schema: forge/plugin/v1\nname: p\nversion: 0.1.0\nkind: algorithm\nentrypoint: p_mod:install\n")
    (plugin / "p_mod.py").write_text("def install(params):\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env["FORGE_HOME"] = str(isolated_forge_home)
    proc = run_forge("plugin", "publish", plugin, env=env)
    assert proc.returncode == 3
    assert proc.stderr.splitlines()[0] == f"error: {path}:1: unknown key 'ownr' (did you mean 'owner'?)"
    assert "Traceback" not in proc.stderr
    assert not (isolated_forge_home / "registry").exists()  # nothing was published as the login name


def test_registries_hold_tls_files_per_host_resolved_from_the_config_directory(isolated_forge_home):
    config(isolated_forge_home, "registries:\n  Harbor.Internal:8443:\n    ca_file: certs/ca.pem\n"
                                "    cert_file: /etc/forge/alice.crt\n    key_file: ~/alice.key\n")
    entry = load_user_config().registry_settings("harbor.internal:8443")
    assert entry.ca_file == isolated_forge_home / "certs" / "ca.pem"
    assert entry.cert_file == Path("/etc/forge/alice.crt")
    assert entry.key_file == Path("~/alice.key").expanduser()
    assert load_user_config().registry_settings("harbor.internal") is None  # host[:port] as written


@pytest.mark.parametrize("text, line, message", [
    ("registries:\n  h:5000:\n    ca_flie: ca.pem\n", 3, "registries: h:5000: unknown key 'ca_flie' (did you mean 'ca_file'?)"),
    ("registries:\n  h:5000:\n    key_file: k.pem\n", 3, "registries: h:5000: key_file without cert_file"),
    ("registries:\n  h:5000:\n    ca_file: 5\n", 3, "registries: h:5000: ca_file: expected a file path"),
    ("owner: carol\nregistries:\n  oci://h:5000/forge:\n    ca_file: ca.pem\n", 3,
     "registries: 'oci://h:5000/forge' is not a registry host"),
    ("registries: [h]\n", 1, "registries: expected a mapping of registry hosts to settings, got list"),
])
def test_a_wrong_registries_entry_is_an_error_naming_file_line_and_key(isolated_forge_home, text, line, message):
    path = config(isolated_forge_home, text)
    with pytest.raises(ManifestError) as exc:
        load_user_config()
    assert exc.value.message.startswith(f"{path}:{line}: {message}"), exc.value.message
    assert exc.value.hint
