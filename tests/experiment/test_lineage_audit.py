"""forge audit's grouping over several job stores, and its exit code (a code no error uses)."""

from __future__ import annotations

import json
import os

from starforge.experiment.audit import FOUND, audit
from starforge.experiment.lineage import YankNow, read_jobs
from starforge.jobs.jobrecord import JobRecord
from starforge.jobs.store import JobStore

BAD, GOOD = "sf1:" + "b" * 64, "sf1:" + "a" * 64


def _record(job_id, digest, tmp_path):
    return JobRecord(id=job_id, name="demo", backend="slurm", status="succeeded", dir=str(tmp_path / job_id),
                     created=f"2026-12-05T10:00:0{job_id[-1]}Z", plugins=[{"ref": "alice/dr-grpo@2.0.1" if digest == BAD
                                                                          else "alice/dr-grpo@2.0.2", "digest": digest}],
                     params={"seed": 1})


def _yanked(pins):
    return {BAD: YankNow("alice/dr-grpo@2.0.1", BAD, "divided twice", "2026-12-05T10:02:00Z")} if any(
        d == BAD for _, d in pins) else {}, []


def test_audit_groups_the_jobs_of_every_store_by_yanked_version(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_JOBS_DIR", str(tmp_path / "mine"))
    mine, team = JobStore(tmp_path / "mine"), JobStore(tmp_path / "team")
    mine.save(_record("job-1", BAD, tmp_path))
    mine.save(_record("job-2", GOOD, tmp_path))
    team.save(_record("job-3", BAD, tmp_path))
    team.remove("job-3")  # a removed job of the team's: its tombstone still counts
    result = audit(read_jobs([tmp_path / "team"]), yank_check=_yanked)
    doc = result.to_json()
    group, = doc["versions"]
    assert (group["ref"], group["reason"]) == ("alice/dr-grpo@2.0.1", "divided twice")
    assert [(j["id"], j["removed"], j["store"]) for j in group["jobs"]] == [
        ("job-1", False, str(tmp_path / "mine")), ("job-3", True, str(tmp_path / "team"))]
    assert result.found and json.loads(json.dumps(doc))["found"] is True
    assert not audit(read_jobs([]), yank_check=lambda pins: ({}, [])).found


def test_the_audit_code_is_one_no_error_uses():
    import starforge.errors as errors
    from starforge.cluster.errors import ForgeError

    def every(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from every(sub)

    assert FOUND == 22
    assert all(getattr(cls, "exit_code", None) != FOUND for cls in every(ForgeError)), errors.__name__


def test_a_store_named_that_does_not_exist_is_an_error_not_an_empty_audit(tmp_path):
    from support.cli import forge

    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    out = forge("audit", "--store", tmp_path / "typo", env=dict(env, FORGE_HOME=str(tmp_path / "home")))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"error: --store {tmp_path / 'typo'}: no such directory\nhint: name a jobs store")
