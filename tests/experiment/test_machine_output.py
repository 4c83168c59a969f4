"""`--json` on submit and on the commands that edit an experiment: what CI reads."""

from __future__ import annotations

import json

import pytest

SCALE = {"opsd.scale": ("float", 1.0)}


@pytest.fixture
def opsd(project):
    project.publish(project.plugin("opsd-patch", params=SCALE))
    project.experiment(plugins=["alice/opsd-patch@~=1.2"])
    project.forge("lock")
    return project


def test_submit_json_says_a_trainer_exit_7_came_from_the_job(opsd):
    run = opsd.forge("submit", "--json", "--set", "+exit.code=7", ok=False)
    assert run.returncode == 7  # the trainer's code, the same number as forge's "not found"
    record = json.loads(run.stdout)  # stdout is the record alone; the job's output went to stderr
    assert "trainer done" in run.stderr
    assert record["status"] == "failed" and record["exit_code"] == 7
    assert record["exit_source"] == "job" and record["phase"] == "entrypoint"
    assert record["id"] and record["dir"].endswith(record["id"])
    ok = json.loads(opsd.forge("submit", "--json").stdout)
    assert ok["status"] == "succeeded" and ok["exit_code"] == 0 and ok["exit_source"] is None


def test_submit_json_says_a_launcher_failure_came_from_forge(project):
    project.publish(project.plugin("boom", "1.0.0", body="def install(params):\n    raise RuntimeError('no')\n"))
    project.experiment(plugins=["alice/boom"])
    project.forge("lock")
    run = project.forge("submit", "--json", ok=False)
    record = json.loads(run.stdout)
    assert run.returncode == 13 and record["exit_code"] == 13
    assert record["exit_source"] == "forge" and record["phase"] == "install"


def test_submit_json_detached_prints_the_started_record(opsd):
    run = opsd.forge("submit", "--json", "--detach")
    record = json.loads(run.stdout)
    assert record["status"] in ("pending", "running", "succeeded") and record["exit_source"] is None


def test_plugin_add_and_remove_json(opsd):
    opsd.publish(opsd.plugin("gspo", "1.0.0"))
    added = json.loads(opsd.forge("plugin", "add", "alice/gspo", "--json").stdout)
    assert added["action"] == "added" and added["forge_yaml_written"] and added["lock_written"]
    assert any("alice/gspo@1.0.0" in change for change in added["changes"])
    removed = json.loads(opsd.forge("plugin", "remove", "gspo", "--json").stdout)
    assert removed["action"] == "removed" and removed["lock_written"]
