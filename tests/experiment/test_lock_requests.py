"""forge lock follows forge.yaml as the user edits it: a changed request is re-resolved and
said so, plugin add writes a compatible request, a misspelt built-in gets did-you-mean."""

from __future__ import annotations

import json

import pytest

SCALE = {"opsd.scale": ("float", 1.0)}


@pytest.fixture
def opsd(project):
    project.publish(project.plugin("opsd-patch", params=SCALE))
    project.publish(project.plugin("opsd-patch", "1.3.0", params=SCALE))
    project.publish(project.plugin("opsd-patch", "2.0.0", params=SCALE))
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    return project


def _locked_version(project) -> str:
    return json.loads(project.lock.read_text())["plugins"][0]["version"]


def test_a_changed_request_is_re_resolved_and_said_so(opsd):
    assert "alice/opsd-patch@1.3.0" in opsd.forge("lock").stdout
    yaml_path = opsd.exp / "forge.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("@~=1.2", "@>=2"))
    stale = opsd.forge("lock", "--check", ok=False)
    assert stale.returncode == 15 and stale.stderr.rstrip().endswith("hint: run: forge lock")
    relocked = opsd.forge("lock")
    assert relocked.stdout.splitlines()[0].startswith("alice/opsd-patch 1.3.0 -> 2.0.0 (request changed)")
    assert _locked_version(opsd) == "2.0.0"
    opsd.forge("lock", "--check")
    # a request that still admits the locked version keeps it
    yaml_path.write_text(yaml_path.read_text().replace("@>=2", "@>=1.0"))
    assert "stays at 2.0.0" in opsd.forge("lock").stdout and _locked_version(opsd) == "2.0.0"


def test_stale_hint_names_the_experiment_directory(opsd):
    opsd.forge("lock")
    yaml_path = opsd.exp / "forge.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("@~=1.2", "@>=2"))
    stale = opsd.forge("submit", "exp", ok=False, cwd=opsd.tmp)
    assert stale.returncode == 15 and stale.stderr.rstrip().endswith("hint: run: forge lock exp")
    assert "request changed" in opsd.forge("lock", "exp", cwd=opsd.tmp).stdout


def test_plugin_add_writes_a_compatible_request_unless_one_is_named(opsd):
    opsd.publish(opsd.plugin("gspo", "1.0.0"))
    opsd.publish(opsd.plugin("grpo-clip", "0.4.1"))
    opsd.forge("plugin", "add", "alice/gspo")
    opsd.forge("plugin", "add", "alice/grpo-clip@~=0.4")
    text = (opsd.exp / "forge.yaml").read_text()
    assert "plugins: [alice/opsd-patch@~=1.2, alice/gspo@>=1.0.0, alice/grpo-clip@~=0.4]" in text
    opsd.forge("lock", "--check")


def test_a_misspelt_builtin_gets_did_you_mean_and_a_manifest_exit(project):
    project.plugin("reward-clip", "0.1.0", where=project.exp / "common" / "algorithms" / "reward-clip")
    project.experiment(builtins=["rewrd-clip"])
    for args in (("lock",), ("submit",)):
        failed = project.forge(*args, ok=False)
        assert failed.returncode == 3, (args, failed.stderr)
        error, hint = failed.stderr.strip().splitlines()
        assert "recipe.plugins names 'rewrd-clip'" in error and "(did you mean 'reward-clip'?)" in error
        assert hint == "hint: built-ins here: reward-clip; or remove it from recipe.plugins"
