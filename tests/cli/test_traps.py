"""Traps a new user walked into: each now gets the message that names the real cause."""

from __future__ import annotations

import os

import pytest
from support.cli import forge as run_forge


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("FORGE_", "XDG_"))}
    e.update(FORGE_HOME=str(tmp_path / "home"), FORGE_OWNER="alice", FORGE_JOBS_DIR=str(tmp_path / "jobs"))
    return e


def forge(env, *args, cwd, check=False):
    result = run_forge(*args, env=env, cwd=cwd, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_a_mistyped_registry_is_named_not_a_version_it_lacks(env, tmp_path):
    forge(env, "plugin", "init", "opsd-patch", cwd=tmp_path, check=True)
    forge(env, "plugin", "publish", "opsd-patch", cwd=tmp_path, check=True)
    (tmp_path / "forge.yaml").write_text("schema: forge/job/v1\nname: e\nentrypoint: python -c pass\nplugins: [alice/opsd-patch]\n")
    forge(env, "lock", cwd=tmp_path, check=True)
    typo = tmp_path / "regsitry"
    for args in (["lock"], ["lock", "--check"]):
        result = forge(env, *args, "--registry", str(typo), cwd=tmp_path)
        assert result.returncode == 7
        assert result.stderr.splitlines()[0] == f"error: no registry at {typo}", result.stderr
        assert "does not have" not in result.stderr


def test_publish_strict_refuses_a_plugin_with_warnings(env, tmp_path):
    forge(env, "plugin", "init", "opsd-patch", cwd=tmp_path, check=True)
    (tmp_path / "opsd-patch" / "yaml").mkdir()  # a top-level name an installed distribution (PyYAML) has: a warning
    (tmp_path / "opsd-patch" / "yaml" / "__init__.py").write_text("")
    strict = forge(env, "plugin", "publish", "opsd-patch", "--strict", cwd=tmp_path)
    assert strict.returncode == 4 and "error: " in strict.stderr and "'yaml'" in strict.stderr  # a check error
    assert "no plugin" in forge(env, "plugin", "show", "opsd-patch", cwd=tmp_path).stderr  # nothing was published
    assert forge(env, "plugin", "publish", "opsd-patch", cwd=tmp_path).returncode == 0  # a warning alone publishes


@pytest.mark.parametrize("kind, says", [
    ("environment", "(environment: the trainer builds it with starforge.plugins.load_environment)"),
    ("data-prep", "(data-prep: run on the laptop with forge prep)"),
    ("algorithm", "(algorithm, eager)"),
])
def test_plugin_init_says_how_each_kind_runs(env, tmp_path, kind, says):
    out = forge(env, "plugin", "init", "p", "--kind", kind, cwd=tmp_path, check=True).stdout
    assert out.startswith(f"created p/ {says}: plugin.yaml"), out


def test_plugin_init_refuses_a_load_mode_for_a_kind_without_one(env, tmp_path):
    result = forge(env, "plugin", "init", "p", "--kind", "environment", "--load", "deferred", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --load applies to algorithm plugins")
    assert not (tmp_path / "p").exists()
