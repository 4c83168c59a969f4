"""A yanked version in an experiment (SPEC §18): `forge lock` never resolves a range to
it, an exact pin needs `allow_yanked: true`, and `lock --check`, `submit` and `plan` refuse
a locked yanked version with exit 18 naming the reason and the newest version not yanked;
`--allow-yanked` runs it once and the job record says so."""

from __future__ import annotations

import json

REASON = "advantage divided by the group size twice"


def _publish_two(project) -> None:
    project.publish(project.plugin("dr-grpo", "1.0.0"))
    project.publish(project.plugin("dr-grpo", "1.1.0"))


def _yank(project, version: str = "1.1.0") -> None:
    project.forge("plugin", "yank", f"alice/dr-grpo@{version}", "--reason", REASON, cwd=project.tmp)


def _locked(project) -> dict:
    return json.loads(project.lock.read_text())["plugins"][0]


def test_a_range_never_locks_a_yanked_version(project):
    _publish_two(project)
    _yank(project)
    project.experiment(plugins=["alice/dr-grpo@~=1.0"])
    project.forge("lock")
    assert _locked(project)["version"] == "1.0.0"


def test_a_locked_version_yanked_later_is_refused_until_relocked_or_allowed(project):
    _publish_two(project)
    project.experiment(plugins=["alice/dr-grpo@~=1.0"])
    project.forge("lock")
    assert _locked(project)["version"] == "1.1.0"
    _yank(project)

    for command in (("lock", "--check"), ("submit",), ("plan",)):
        out = project.forge(*command, ok=False)
        assert out.returncode == 18, (command, out.stderr)
        assert "Traceback" not in out.stderr
        assert "error: alice/dr-grpo@1.1.0 is yanked (as of " in out.stderr and REASON in out.stderr
        assert "1.0.0 is the newest version that alice/dr-grpo@~=1.0 admits and that is not yanked" in out.stderr
    assert not project.jobs_dir().exists() or not any(project.jobs_dir().iterdir())  # nothing staged

    # --allow-yanked runs it once, and the record says so
    out = project.forge("submit", "--allow-yanked", "--json")
    record = json.loads(out.stdout)
    assert record["status"] == "succeeded" and "dr-grpo 1.1.0 installed" in out.stderr
    [ran] = record["ran_yanked"]
    assert ran["ref"] == "alice/dr-grpo@1.1.0" and ran["reason"] == REASON and ran["allowed_by"] == "--allow-yanked"
    assert ran["tree_digest"] == _locked(project)["digest"] and ran["sequence"] == 1
    shown = project.forge("jobs", "show", record["id"]).stdout
    assert f"ran alice/dr-grpo@1.1.0 although it is yanked ({REASON}); allowed by --allow-yanked" in shown
    # the next submit is refused again
    assert project.forge("submit", ok=False).returncode == 18

    out = project.forge("lock")
    assert f"alice/dr-grpo 1.1.0 -> 1.0.0 (1.1.0 is yanked: {REASON})" in out.stdout
    project.forge("lock", "--check")
    record = json.loads(project.forge("submit", "--json").stdout)
    assert record["ran_yanked"] == []


def test_an_exact_pin_to_a_yanked_version_needs_the_experiments_acknowledgement(project):
    _publish_two(project)
    _yank(project)
    project.experiment(plugins=["alice/dr-grpo@1.1.0"])
    out = project.forge("lock", ok=False)
    assert out.returncode == 18 and REASON in out.stderr
    assert "the newest version not yanked is 1.0.0" in out.stderr and "allow_yanked: true" in out.stderr
    assert not project.lock.exists()

    project.experiment(plugins=["{request: alice/dr-grpo@1.1.0, allow_yanked: true}"])
    project.forge("lock")
    entry = _locked(project)
    assert entry["version"] == "1.1.0" and entry["allow_yanked"] is True
    project.forge("lock", "--check")
    record = json.loads(project.forge("submit", "--json").stdout)
    assert record["ran_yanked"][0]["allowed_by"] == "forge.yaml"

    # taking the acknowledgement out of forge.yaml makes the lock stale, never silently kept
    project.experiment(plugins=["alice/dr-grpo@1.1.0"])
    out = project.forge("submit", ok=False)
    assert out.returncode == 15 and "allow_yanked changed in forge.yaml" in out.stderr


def test_a_malformed_acknowledgement_is_a_manifest_error(project):
    project.experiment(plugins=["{request: alice/dr-grpo@1.1.0, allow_yanked: 'yes'}"])
    out = project.forge("lock", ok=False)
    assert out.returncode == 3 and "plugins[0].allow_yanked: expected true or false" in out.stderr
    project.experiment(plugins=["{request: alice/dr-grpo@1.1.0, allow_yank: true}"])
    out = project.forge("lock", ok=False)
    assert out.returncode == 3 and "did you mean 'allow_yanked'" in out.stderr


def test_a_replay_runs_the_now_yanked_version_and_warns(project):
    project.publish(project.plugin("dr-grpo", "1.0.0"))
    project.experiment(plugins=["alice/dr-grpo@~=1.0"])
    project.forge("lock")
    old = json.loads(project.forge("submit", "--json").stdout)
    _yank(project, "1.0.0")
    out = project.forge("jobs", "replay", old["id"], "--json")
    record = json.loads(out.stdout)
    assert record["status"] == "succeeded" and "dr-grpo 1.0.0 installed" in out.stderr
    assert "warning: alice/dr-grpo@1.0.0 is yanked (as of " in out.stderr and REASON in out.stderr
    assert record["replay_of"] == old["id"]
    [ran] = record["ran_yanked"]
    assert ran["ref"] == "alice/dr-grpo@1.0.0" and ran["allowed_by"] == "replay" and ran["reason"] == REASON


def test_without_the_registry_the_last_facts_seen_still_refuse(project):
    _publish_two(project)
    project.experiment(plugins=["alice/dr-grpo@~=1.0"])
    project.forge("lock")
    _yank(project)  # seen, and remembered, on this machine
    (project.home / "registry").rename(project.tmp / "registry-away")  # the registry is gone; the cache stays
    out = project.forge("submit", ok=False)
    assert out.returncode == 18 and REASON in out.stderr
    assert "the registry could not answer for it, these are the last facts seen here" in out.stderr
    out = project.forge("submit", "--allow-yanked", "--json")
    assert json.loads(out.stdout)["ran_yanked"][0]["reason"] == REASON
