"""``forge lock diff`` and ``forge plugin diff`` on real registries (directory and OCI)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

DIFFERENT = 20  # docs/errors.md: the two sides differ (not an error)


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@example.com", "HOME": str(cwd), "PATH": "/usr/bin:/bin"})


def _plugin(project, version, *, scale=1.0, targets=("toy.algorithms",), extra_file=False, line="return None"):
    root = project.plugin("opsd-patch", version, params={"opsd.scale": ("float", scale)},
                          body=f"def install(params):\n    {line}\n")
    text = (root / "plugin.yaml").read_text()
    (root / "plugin.yaml").write_text(text + "targets: [" + ", ".join(targets) + "]\n")
    if extra_file:
        (root / "helpers.py").write_text("X = 1\n")
    return root


@pytest.fixture
def bumped(project):
    """An experiment locked to opsd-patch 1.2.0 and committed, then bumped to 1.3.0."""
    project.publish(_plugin(project, "1.2.0"))
    project.publish(_plugin(project, "1.3.0", scale=0.5, targets=("toy.algorithms", "toy.trainer"), extra_file=True,
                            line="return 'v13'"))
    project.experiment(plugins=["alice/opsd-patch@==1.2.0"])
    project.forge("lock")
    _git(project.exp, "init", "-q")
    _git(project.exp, "add", "forge.yaml", "plugins.lock.json")
    _git(project.exp, "commit", "-qm", "lock 1.2.0")
    project.experiment(plugins=["alice/opsd-patch@>=1.2"])
    project.forge("lock", "--upgrade")
    return project


def test_lock_bump_against_head(bumped):
    run = bumped.forge("lock", "diff", ok=False)
    assert run.returncode == DIFFERENT, run.stderr
    out = run.stdout
    assert "~ alice/opsd-patch 1.2.0 -> 1.3.0  (upgrade)" in out
    assert "params: opsd.scale default 1.0 -> 0.5" in out
    assert "targets: + toy.trainer" in out
    assert "files: 2 changed (opsd_patch.py, plugin.yaml); 1 added (helpers.py)" in out
    assert "1 re-versioned" in out.splitlines()[-1]
    doc = json.loads(bumped.forge("lock", "diff", "--json", ok=False).stdout)
    assert doc["equal"] is False
    [item] = doc["plugins"]
    assert item["change"] == "re-versioned" and item["old"]["version"] == "1.2.0" and item["new"]["version"] == "1.3.0"
    assert item["fields"]["params"]["changed"]["opsd.scale"]["new"]["default"] == 0.5


def test_files_shows_the_unified_diff_from_the_cache(bumped):
    run = bumped.forge("lock", "diff", "--files", ok=False)
    assert run.returncode == DIFFERENT, run.stderr
    assert "    --- opsd-patch@1.2.0/opsd_patch.py" in run.stdout
    assert "    +++ opsd-patch@1.3.0/opsd_patch.py" in run.stdout
    assert "    -    return None" in run.stdout and "    +    return 'v13'" in run.stdout
    assert "    +++ opsd-patch@1.3.0/helpers.py" in run.stdout


def test_equal_locks_exit_zero(bumped):
    _git(bumped.exp, "commit", "-qam", "bump")
    run = bumped.forge("lock", "diff")
    assert run.stdout.splitlines()[-1] == "no changes"
    both = bumped.forge("lock", "diff", str(bumped.lock), str(bumped.exp))
    assert json.loads(bumped.forge("lock", "diff", str(bumped.lock), str(bumped.lock), "--json").stdout)["equal"] is True
    assert both.returncode == 0


def _kept_lock(project, plugins: list) -> Path:
    """The experiment requesting *plugins*, locked; a copy of that lock file kept as ``old.lock.json``."""
    project.experiment(plugins=plugins)
    project.forge("lock")
    old = project.tmp / "old.lock.json"
    shutil.copy(project.lock, old)
    return old


def test_added_and_removed(project):
    project.publish(project.plugin("a-patch"))
    project.publish(project.plugin("b-patch"))
    old = _kept_lock(project, ["alice/a-patch@~=1.2"])
    project.experiment(plugins=["alice/b-patch@~=1.2"])
    project.forge("lock")
    run = project.forge("lock", "diff", str(old), str(project.lock), ok=False)
    assert run.returncode == DIFFERENT
    assert "+ alice/b-patch@1.2.0" in run.stdout and "(added)" in run.stdout
    assert "- alice/a-patch@1.2.0" in run.stdout and "(removed)" in run.stdout


def _same_version_other_content(project, registry_b):
    project.publish(project.plugin("opsd-patch", body="def install(params):\n    return 1\n"))
    old = _kept_lock(project, ["alice/opsd-patch@~=1.2"])
    other = project.plugin("opsd-patch", where=project.tmp / "other", body="def install(params):\n    return 2\n")
    project.forge("plugin", "publish", str(other), "--registry", registry_b, cwd=project.tmp)
    project.lock.unlink()
    project.forge("lock", "--registry", registry_b)
    return old


def test_re_digested_is_loud(project):
    old = _same_version_other_content(project, str(project.tmp / "registry-b"))
    run = project.forge("lock", "diff", str(old), str(project.lock), "--files", ok=False)
    assert run.returncode == DIFFERENT
    assert "! alice/opsd-patch@1.2.0 RE-DIGESTED: same version, other content" in run.stdout
    assert "    -    return 1" in run.stdout and "    +    return 2" in run.stdout


@pytest.mark.oci
def test_re_digested_against_an_oci_registry(project, oci_server):
    old = _same_version_other_content(project, oci_server.url)
    doc = json.loads(project.forge("lock", "diff", str(old), str(project.lock), "--json", ok=False).stdout)
    assert [p["change"] for p in doc["plugins"]] == ["re-digested"]


@pytest.mark.oci
def test_files_fetched_from_an_oci_registry_when_the_cache_is_empty(project, oci_server):
    project.env["FORGE_REGISTRY"] = oci_server.url
    project.publish(_plugin(project, "1.2.0"))
    project.publish(_plugin(project, "1.3.0", line="return 'v13'"))
    old = _kept_lock(project, ["alice/opsd-patch@==1.2.0"])
    project.experiment(plugins=["alice/opsd-patch@==1.3.0"])
    project.forge("lock")
    shutil.rmtree(project.home / "cache", ignore_errors=True)
    for cache in project.home.rglob("blobs"):
        shutil.rmtree(cache)
    run = project.forge("lock", "diff", str(old), str(project.lock), "--files", ok=False)
    assert run.returncode == DIFFERENT, run.stderr
    assert "    +    return 'v13'" in run.stdout


def test_missing_revision_and_shallow_clone(bumped, tmp_path):
    run = bumped.forge("lock", "diff", "--git", "no-such-branch", ok=False)
    assert run.returncode == 2
    assert run.stderr.splitlines()[0] == f"error: --git no-such-branch: no such revision in {bumped.exp}"
    _git(bumped.exp, "commit", "-qam", "bump")
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{bumped.exp}", str(clone))
    run = bumped.forge("lock", "diff", "--git", "HEAD~1", cwd=clone, ok=False)
    assert run.returncode == 2
    assert run.stderr.splitlines()[0] == "error: --git HEAD~1: revision not found in this shallow clone"
    assert "git fetch --unshallow" in run.stderr and "Traceback" not in run.stderr


def test_lock_of_another_schema_is_refused(bumped):
    data = json.loads(bumped.lock.read_text())
    data["schema"] = "forge/lock/v9"
    other = bumped.tmp / "v9.json"
    other.write_text(json.dumps(data))
    run = bumped.forge("lock", "diff", str(other), str(bumped.lock), ok=False)
    assert run.returncode == 15
    assert "schema: expected 'forge/lock/v2', got 'forge/lock/v9'" in run.stderr.splitlines()[0]


def test_signer_change(project):
    project.publish(project.plugin("opsd-patch"))
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    project.forge("lock")
    data = json.loads(project.lock.read_text())
    data["plugins"][0]["signature"] = {"envelope_digest": "sha256:" + "a" * 64, "key_id": "ab12cd34ef56ab12"}
    old = project.tmp / "old.json"
    old.write_text(json.dumps(data))
    run = project.forge("lock", "diff", str(old), str(project.lock), ok=False)
    assert run.returncode == DIFFERENT
    assert "    signature: key ab12cd34ef56… -> unsigned" in run.stdout


def test_plugin_diff_two_versions(project):
    project.exp.mkdir()
    project.publish(_plugin(project, "1.2.0"))
    project.publish(_plugin(project, "1.3.0", scale=0.5, line="return 'v13'"))
    run = project.forge("plugin", "diff", "alice/opsd-patch@1.2.0", "@1.3.0", ok=False)
    assert run.returncode == DIFFERENT, run.stderr
    assert "  params: opsd.scale default 1.0 -> 0.5" in run.stdout
    assert "-    return None" in run.stdout and "+    return 'v13'" in run.stdout
    stat = project.forge("plugin", "diff", "alice/opsd-patch@1.2.0", "alice/opsd-patch@1.3.0", "--stat", ok=False)
    assert "files: 2 changed (opsd_patch.py, plugin.yaml)" in stat.stdout and "return" not in stat.stdout
    same = project.forge("plugin", "diff", "alice/opsd-patch@1.2.0", "alice/opsd-patch@~=1.2", "--json", ok=False)
    assert same.returncode == DIFFERENT  # ~=1.2 resolves to 1.3.0
    assert project.forge("plugin", "diff", "alice/opsd-patch@1.2.0", "@1.2.0").stdout.splitlines()[-1] == "no changes"


def test_plugin_diff_unknown_ref(project):
    project.exp.mkdir()
    project.publish(_plugin(project, "1.2.0"))
    run = project.forge("plugin", "diff", "alice/opsd-patch@1.2.0", "@9.9.9", ok=False)
    assert run.returncode == 7
    assert run.stderr.startswith("error: ") and "Traceback" not in run.stderr


@pytest.mark.oci
def test_plugin_diff_on_oci(project, oci_server):
    project.exp.mkdir()
    project.env["FORGE_REGISTRY"] = oci_server.url
    project.publish(_plugin(project, "1.2.0"))
    project.publish(_plugin(project, "1.3.0", line="return 'v13'"))
    doc = json.loads(project.forge("plugin", "diff", "alice/opsd-patch@1.2.0", "@1.3.0", "--json", ok=False).stdout)
    assert doc["fields"]["files"]["changed"] == ["opsd_patch.py", "plugin.yaml"]
    assert "+    return 'v13'" in doc["diff"]


def test_an_old_schema_lock_and_no_git_repository(bumped, tmp_path):
    data = json.loads(bumped.lock.read_text())
    data["schema"] = "forge/lock/v1"
    for entry in data["plugins"]:
        entry["signature"] = {"status": "unsigned"}
    old = tmp_path / "v1.json"
    old.write_text(json.dumps(data))
    run = bumped.forge("lock", "diff", str(old), str(bumped.lock), ok=False)
    assert run.returncode == 15
    assert run.stderr.splitlines()[0] == f"error: {old} is a forge/lock/v1 lock; the diff compares plugins.lock.json files of the current schema"
    assert run.stderr.splitlines()[1].startswith("hint: rewrite it with 'forge lock'")
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    shutil.copy(bumped.lock, elsewhere / "plugins.lock.json")
    run = bumped.forge("lock", "diff", cwd=elsewhere, ok=False)
    assert run.returncode == 2
    assert run.stderr.splitlines()[0] == f"error: --git HEAD: {elsewhere} is not in a git repository"
