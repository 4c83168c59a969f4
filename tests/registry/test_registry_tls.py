"""A registry whose certificate a private CA signed (Harbor inside an air gap), on 127.0.0.1.

A real ``docker-registry`` serving TLS with a certificate from a CA made here: refused
without the CA (with a hint naming ``--ca-file`` and ``ca_file``), accepted with it from the
flag, the user config or ``SSL_CERT_FILE``; ``--insecure`` never stands in for a named CA;
a registry that asks for a client certificate gets the one the config names.
"""

from __future__ import annotations

import json
import shutil
import ssl

import pytest
from support.oci import new_server
from support.registry_world import User, write_experiment, write_plugin
from support.tls import TestCA

pytestmark = pytest.mark.oci


@pytest.fixture
def ca(tmp_path) -> TestCA:
    return TestCA(tmp_path / "ca")


@pytest.fixture
def tls_registry(tmp_path, ca):
    """A TLS registry whose certificate *ca* signed (for 127.0.0.1 and localhost)."""
    issued = ca.server()
    server = new_server(tmp_path / "registry", tls=(issued.cert, issued.key))
    yield server
    server.stop()


@pytest.fixture
def user(tmp_path) -> User:
    user = User(tmp_path / "user")
    user.env = {k: v for k, v in user.env.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")}
    return user


def test_refused_without_the_ca_and_published_with_it(user, ca, tls_registry, tmp_path):
    src = write_plugin(tmp_path / "src")
    refused = user.forge("plugin", "publish", src, "--registry", tls_registry.url, ok=False)
    assert refused.returncode == 6, refused.stderr
    assert "certificate verify failed" in refused.stderr
    hint = refused.stderr.split("hint: ", 1)[1]
    assert "--ca-file" in hint and "ca_file" in hint and str(user.home / "config.yaml") in hint
    assert "is the registry running and reachable" not in refused.stderr
    assert refused.stderr.count("\n") == 2  # one error line, one hint line

    published = user.forge("plugin", "publish", src, "--registry", tls_registry.url, "--ca-file", ca.cert)
    assert "published alice/opsd-patch@1.0.0" in published.stdout
    pulled = user.forge("plugin", "pull", "alice/opsd-patch@1.0.0", "--registry", tls_registry.url,
                        "--ca-file", ca.cert, "-o", tmp_path / "pulled")
    assert (tmp_path / "pulled" / "opsd_patch.py").is_file(), pulled.stdout

    # the documented environment variable of OpenSSL works too
    listed = user.forge("plugin", "list", "--registry", tls_registry.url, "--json", env={"SSL_CERT_FILE": str(ca.cert)})
    assert "alice/opsd-patch" in listed.stdout


def test_a_ca_file_in_the_user_config_for_the_registry_host(user, ca, tls_registry, tmp_path):
    host = f"127.0.0.1:{tls_registry.port}"
    user.home.mkdir(parents=True, exist_ok=True)
    (user.home / "certs").mkdir()
    (user.home / "certs" / "internal-ca.pem").write_bytes(ca.cert.read_bytes())
    (user.home / "config.yaml").write_text(f"registries:\n  {host}:\n    ca_file: certs/internal-ca.pem\n")
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", tls_registry.url)
    shown = json.loads(user.forge("plugin", "show", "alice/opsd-patch", "--registry", tls_registry.url, "--json").stdout)
    assert shown["version"] == "1.0.0"
    tls = json.loads(user.forge("config", "--json", "--registry", tls_registry.url).stdout)["registry_tls"]
    assert tls == {"value": f"the system trust store and {user.home / 'certs' / 'internal-ca.pem'} "
                            f"(from ca_file of registries: {host} in {user.home / 'config.yaml'})",
                   "source": f"ca_file of registries: {host} in {user.home / 'config.yaml'}"}
    # the entry is for that host only: the same registry by another name is not covered
    other = user.forge("plugin", "list", "--registry", f"oci://localhost:{tls_registry.port}/forge", ok=False)
    assert other.returncode == 6 and "certificate verify failed" in other.stderr


def test_insecure_never_stands_in_for_a_named_ca(user, ca, tls_registry, tmp_path):
    """A CA named for a registry is checked, --insecure or not; --insecure alone accepts the certificate."""
    wrong = TestCA(tmp_path / "other-ca", name="Another CA")
    src = write_plugin(tmp_path / "src")
    refused = user.forge("plugin", "publish", src, "--registry", tls_registry.url, "--ca-file", wrong.cert, "--insecure",
                         ok=False)
    assert refused.returncode == 6 and "certificate verify failed" in refused.stderr
    assert f"signed neither by {wrong.cert} (from --ca-file)" in refused.stderr
    assert "published" not in refused.stdout
    user.forge("plugin", "publish", src, "--registry", tls_registry.url, "--insecure")


def test_a_registry_that_asks_for_a_client_certificate(user, ca, tmp_path):
    issued = ca.server()
    server = new_server(tmp_path / "mtls-registry", tls=(issued.cert, issued.key), client_cas=(ca.cert,))
    try:
        src = write_plugin(tmp_path / "src")
        refused = user.forge("plugin", "publish", src, "--registry", server.url, "--ca-file", ca.cert, ok=False)
        assert refused.returncode == 6, refused.stderr
        assert "set cert_file and key_file under registries:" in refused.stderr

        client = ca.client()
        user.home.mkdir(parents=True, exist_ok=True)
        (user.home / "config.yaml").write_text(
            f"registries:\n  127.0.0.1:{server.port}:\n    ca_file: {ca.cert}\n"
            f"    cert_file: {client.cert}\n    key_file: {client.key}\n")
        published = user.forge("plugin", "publish", src, "--registry", server.url)
        assert "published alice/opsd-patch@1.0.0" in published.stdout

        # a client certificate from another CA is refused by the registry, and the hint names the file
        other = TestCA(tmp_path / "other-ca", name="Another CA").client()
        (user.home / "config.yaml").write_text(
            f"registries:\n  127.0.0.1:{server.port}:\n    ca_file: {ca.cert}\n"
            f"    cert_file: {other.cert}\n    key_file: {other.key}\n")
        bad = user.forge("plugin", "list", "--registry", server.url, ok=False)
        assert bad.returncode == 6 and f"with the client certificate {other.cert}" in bad.stderr
    finally:
        server.stop()


def test_ca_file_reaches_the_registry_from_every_kind_of_command(user, ca, tls_registry, tmp_path):
    """lock, bundle create and push, plugin copy, submit: --ca-file on each, nothing else trusted."""
    ca_file = ["--ca-file", str(ca.cert)]
    user.forge("plugin", "publish", write_plugin(tmp_path / "src"), "--registry", tls_registry.url, *ca_file)
    exp = write_experiment(tmp_path / "exp", tls_registry.url)
    refused = user.forge("lock", exp, ok=False)
    assert refused.returncode == 6 and "--ca-file" in refused.stderr
    user.forge("lock", exp, *ca_file)
    user.forge("lock", exp, "--check", *ca_file)
    user.forge("bundle", "create", exp, "-o", tmp_path / "exp.tar", *ca_file)
    far = f"oci://127.0.0.1:{tls_registry.port}/far"
    pushed = user.forge("bundle", "push", tmp_path / "exp.tar", "--registry", far, *ca_file)
    assert "imported 1 plugin" in pushed.stdout
    mirror = f"oci://127.0.0.1:{tls_registry.port}/mirror"
    copied = user.forge("plugin", "copy", "alice/opsd-patch", "--from", tls_registry.url, "--to", mirror, *ca_file)
    assert "copied alice/opsd-patch@1.0.0" in copied.stdout
    shutil.rmtree(user.home / "cache")  # staging must fetch from the registry
    spec = json.loads(user.forge("submit", exp, "--dry-run", "--registry", mirror, *ca_file, cwd=exp).stdout)
    assert [p["name"] for p in spec["plugins"]] == ["opsd-patch"]


def test_every_command_that_takes_insecure_takes_ca_file_too():
    import click

    from starforge.cli.main import forge as cli

    def commands(group, path=()):
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if isinstance(command, click.Group):
                yield from commands(command, (*path, name))
            else:
                yield (*path, name), command

    seen = 0
    for path, command in commands(cli):
        options = {o for p in command.params for o in getattr(p, "opts", ())}
        if "--insecure" in options:
            seen += 1
            assert "--ca-file" in options, " ".join(path)
    assert seen >= 15


def test_unreadable_ca_and_certificate_files_are_one_error_line(user, ca, tls_registry, tmp_path):
    missing = user.forge("plugin", "list", "--registry", tls_registry.url, "--ca-file", tmp_path / "nope.pem", ok=False)
    assert missing.returncode == 2
    assert f"error: cannot read the CA file {tmp_path / 'nope.pem'} (from --ca-file)" in missing.stderr
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    garbage = user.forge("plugin", "list", "--registry", tls_registry.url, "--ca-file", not_pem, ok=False)
    assert garbage.returncode == 2 and "cannot read the CA file" in garbage.stderr and "hint: " in garbage.stderr
    user.home.mkdir(parents=True, exist_ok=True)
    (user.home / "config.yaml").write_text(
        f"registries:\n  127.0.0.1:{tls_registry.port}:\n    cert_file: {ca.cert}\n    key_file: {not_pem}\n")
    bad_key = user.forge("plugin", "list", "--registry", tls_registry.url, ok=False)
    assert bad_key.returncode == 2 and f"cannot read the client certificate {ca.cert} with key {not_pem}" in bad_key.stderr


def test_the_system_trust_store_is_loaded():
    """What `update-ca-certificates` installs (OpenSSL's default CA file) is trusted, beside certifi's."""
    from starforge.registry.oci_tls import RegistryTrust, ssl_context

    default = ssl.get_default_verify_paths().cafile
    if not default:
        pytest.skip("OpenSSL has no default CA file here")
    system = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    system.load_verify_locations(cafile=default)
    ours = ssl_context(RegistryTrust()).get_ca_certs()
    wanted = system.get_ca_certs()
    assert wanted and all(cert in ours for cert in wanted)


def test_the_trust_store_is_loaded_once_per_process_and_follows_ssl_cert_file(ca, monkeypatch):
    """Clients of registries without a CA file of their own share one context (loading the
    stores takes a noticeable part of a second); SSL_CERT_FILE set later is still honoured."""
    from starforge.registry.oci_tls import RegistryTrust, ssl_context

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    first = ssl_context(RegistryTrust())
    assert ssl_context(RegistryTrust()) is first
    assert ssl_context(RegistryTrust(), verify=False) is not first
    ours = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ours.load_verify_locations(cafile=str(ca.cert))
    [ca_cert] = ours.get_ca_certs()
    assert ca_cert not in first.get_ca_certs()
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.cert))
    assert ca_cert in ssl_context(RegistryTrust()).get_ca_certs()
    assert ca_cert in ssl_context(RegistryTrust(ca_file=ca.cert, ca_from="--ca-file")).get_ca_certs()
