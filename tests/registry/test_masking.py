"""Credentials never reach the terminal (SPEC §12): malformed userinfo, --debug tracebacks,
Docker config.json ``auth`` values. Run as a user runs forge, against a real registry
where the case needs one."""

from __future__ import annotations

import base64
import json
import os

import pytest
from support.cli import forge as run_forge

SECRET = "S3cr3tPass"


def forge(*args, env=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    e.update(env or {})
    return run_forge(*args, env=e, timeout=60)


@pytest.mark.parametrize("url", [
    f"oci://ci:pa/ss-{SECRET}@registry.example/x",      # '/' in the password: the authority looks like 'ci:pa'
    f"oci://ci:pa ss-{SECRET}@registry.example/x",      # a blank
    f"oci://ci:p@ss-{SECRET}@registry.example/x",       # a second '@'
    f"oci://ci:pa'ss-{SECRET}@registry.example/x",      # a quote
    f"oci://ci:pa?ss-{SECRET}@registry.example/x",      # '?' would start a query
    f"https://ci:pa/ss-{SECRET}@registry.example/x",    # not even a registry kind forge knows
])
def test_userinfo_that_must_be_percent_encoded_is_refused_with_the_authority_masked(url, tmp_path):
    for args, env in (((("plugin", "list", "--registry", url)), {}),
                      (("plugin", "pull", "alice/x@1.0.0", "--registry", url), {}),
                      (("plugin", "list"), {"FORGE_REGISTRY": url}),
                      (("--debug", "plugin", "list", "--registry", url), {})):
        proc = forge(*args, env={"FORGE_HOME": str(tmp_path / "home"), **env})
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out
        assert SECRET not in out and "ci:pa" not in out and "registry.example" not in out, out
        assert f"{url.split('://')[0]}://***/x" in proc.stderr
        assert "percent-encoded" in proc.stderr


def test_ray_address_with_malformed_userinfo_is_refused_masked():
    from starforge.backends.ray import resolve_address
    from starforge.errors import UsageError

    for address in (f"http://ci:pa/ss-{SECRET}@head:8265", f"ci:pa/ss-{SECRET}@head:8265"):
        with pytest.raises(UsageError) as refused:
            resolve_address({"address": address}, {})
        assert SECRET not in str(refused.value) and "http://***" in str(refused.value)


def test_well_formed_urls_are_not_refused():
    from starforge.urls import malformed_userinfo

    for url in ("oci://127.0.0.1:5000/forge", "oci://ci:S3cret@127.0.0.1:5000/forge", "oci://ci:p%2Fss%40x@h/x",
                "file:///srv/team@home/registry", "/srv/team@home/registry", "http://[::1]:8265"):
        assert not malformed_userinfo(url), url


@pytest.mark.parametrize("debug", [("--debug",), ()])
def test_debug_tracebacks_mask_credentials(tmp_path, debug):
    url = f"oci://ciuser:{SECRET}@127.0.0.1:5999/forge"
    env = {"FORGE_HOME": str(tmp_path / "home")}
    if not debug:
        env["FORGE_DEBUG"] = "1"
    proc = forge(*debug, "plugin", "list", "--registry", url, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr  # the traceback is shown ...
    assert SECRET not in proc.stderr + proc.stdout and "ciuser" not in proc.stderr  # ... scrubbed
    assert "oci://***@127.0.0.1:5999/forge" in proc.stderr


def test_a_bugs_traceback_is_scrubbed_too(monkeypatch, capsys):
    """An exception forge did not expect still prints a traceback, masked the same way."""
    from starforge.cli import main as cli_main
    from starforge.registry import factory

    def broken(url=None, **_):
        try:
            raise KeyError(f"https://bob:{SECRET}@mirror.example/v2/")
        except KeyError as inner:
            raise RuntimeError(f"unexpected answer from oci://bob:pa/ss-{SECRET}@mirror.example/x") from inner

    monkeypatch.setattr(factory, "open_registry", broken)
    with pytest.raises(SystemExit) as ended:
        cli_main.main(["plugin", "list", "--registry", "oci://127.0.0.1:1/forge"])
    err = capsys.readouterr().err
    assert ended.value.code == 1
    assert "RuntimeError" in err and "KeyError" in err and SECRET not in err and "bob" not in err


def _docker_config(tmp_path, host: str, auth: str):
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.json").write_text(json.dumps({"auths": {host: {"auth": auth}}}))


def test_a_docker_auth_value_without_a_colon_is_never_printed(oci_registry_auth, tmp_path):
    host = f"127.0.0.1:{oci_registry_auth.port}"
    token = f"token-{SECRET}-without-colon"
    _docker_config(tmp_path, host, base64.b64encode(token.encode()).decode())
    env = {"FORGE_HOME": str(tmp_path / "home"), "DOCKER_CONFIG": str(tmp_path / "docker-config")}
    for debug in ((), ("--debug",)):
        proc = forge(*debug, "plugin", "list", "--registry", oci_registry_auth.url, env=env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 6, out
        assert SECRET not in out and base64.b64encode(token.encode()).decode() not in out, out
        assert "the 'auth' entry for" in proc.stderr and "is not base64 of user:password" in proc.stderr


def test_refused_docker_auth_credentials_are_named_by_their_entry_not_their_user(oci_registry_auth, tmp_path):
    host = f"127.0.0.1:{oci_registry_auth.port}"
    value = base64.b64encode(f"{oci_registry_auth.user}:wrong-{SECRET}".encode()).decode()
    _docker_config(tmp_path, host, value)
    env = {"FORGE_HOME": str(tmp_path / "home"), "DOCKER_CONFIG": str(tmp_path / "docker-config")}
    proc = forge("plugin", "list", "--registry", oci_registry_auth.url, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 6, out
    assert f"refused the credentials of the 'auth' entry for {host}" in proc.stderr
    assert SECRET not in out and value not in out and f"'{oci_registry_auth.user}'" not in out


def test_a_ray_address_with_credentials_is_masked_in_job_json(tmp_path):
    """The jobs store keeps the address (later calls need it); no --json output shows the password."""
    from starforge.jobs.jobrecord import JobRecord
    from starforge.jobs.store import JobStore

    store = JobStore(tmp_path / "store")
    (tmp_path / "exp-1").mkdir()
    store.save(JobRecord(id="exp-1", name="exp", backend="ray", status="succeeded", dir=str(tmp_path / "exp-1"),
                         created="2026-11-29T12:00:00Z", exit_code=0,
                         backend_ref={"address": f"http://ray:{SECRET}@127.0.0.1:8265", "submission_id": "forge-exp-1"}))
    env = {"FORGE_HOME": str(tmp_path / "home"), "FORGE_JOBS_DIR": str(tmp_path / "store")}
    for args in (("jobs", "list", "--json"), ("jobs", "show", "exp-1", "--json"), ("jobs", "show", "exp-1")):
        proc = forge(*args, env=env)
        assert proc.returncode == 0, proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
    shown = json.loads(forge("jobs", "show", "exp-1", "--json", env=env).stdout)
    assert shown["backend_ref"]["address"] == "http://***@127.0.0.1:8265"
    assert SECRET in (tmp_path / "store" / "exp-1.json").read_text()  # kept where forge needs it
