"""The end of an attempt: declared output directories expanded, the manifest, the sidecar."""

from __future__ import annotations

import json
import os

from starforge.cluster.jobspec import JobSpec, example, write_spec
from starforge.cluster.lineage import (
    SIDECAR,
    SIDECAR_READ_CAP,
    declared_dir_problem,
    expand_dir,
    output_dirs,
    record_attempt_end,
    scan,
)


def test_declared_directories_are_absolute_or_start_with_a_variable():
    assert declared_dir_problem("/lustre/ckpt/$FORGE_JOB_ID") is None
    assert declared_dir_problem("${SCRATCH}/ckpt") is None
    assert "absolute" in declared_dir_problem("ckpt")
    assert "control character" in declared_dir_problem("/ckpt\n/x")


def test_expansion_on_the_node_names_the_job_and_refuses_what_it_cannot_expand():
    env = {"SCRATCH": "/scratch/alice"}
    assert expand_dir("$SCRATCH/ckpt/${FORGE_JOB_ID}", dict(env, FORGE_JOB_ID="j1")) == "/scratch/alice/ckpt/j1"
    assert expand_dir("$UNSET/ckpt", env) is None
    assert expand_dir("$REL/ckpt", {"REL": "relative"}) is None
    spec = JobSpec.from_dict(dict(example(), lineage={"outputs": ["$SCRATCH/$FORGE_JOB_ID"]}))
    # the job's id is the spec's, whatever the environment says
    assert output_dirs(spec, dict(env, FORGE_JOB_ID="other")) == [("$SCRATCH/$FORGE_JOB_ID", f"/scratch/alice/{spec.id}")]


def test_scan_lists_regular_files_without_following_links_or_listing_the_sidecar(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "w.bin").write_bytes(b"12345")
    (tmp_path / "top.txt").write_text("x")
    (tmp_path / SIDECAR).write_text("{}")
    (tmp_path / "link").symlink_to("/etc")
    st = os.stat(tmp_path / "top.txt")
    assert scan(str(tmp_path)) == [["a/b/w.bin", 5, os.stat(tmp_path / "a/b/w.bin").st_mtime_ns], ["top.txt", 1, st.st_mtime_ns]]


def _job(tmp_path, outputs, **more):
    job_dir = tmp_path / "job"
    (job_dir / "work").mkdir(parents=True)
    spec = JobSpec.from_dict(dict(example(), lineage={"outputs": outputs, **more}))
    write_spec(spec, job_dir / "jobspec.json")
    return spec, job_dir


def test_the_end_of_an_attempt_records_the_manifest_and_a_sidecar_in_each_declared_directory(tmp_path):
    spec, job_dir = _job(tmp_path, [str(tmp_path / "ckpt" / "$FORGE_JOB_ID"), "$NOPE/x", str(tmp_path / "absent")])
    ckpt = tmp_path / "ckpt" / spec.id
    ckpt.mkdir(parents=True)
    (ckpt / "model.bin").write_bytes(b"m" * 100)
    (job_dir / "work" / "log.csv").write_text("1,2\n")
    path = record_attempt_end(str(job_dir / "jobspec.json"), str(job_dir), attempt=2, host="n1", env={})
    doc = json.loads(open(path).read())
    assert os.path.basename(path) == "outputs-a2-n1.json" and (doc["job_id"], doc["attempt"], doc["host"]) == (spec.id, 2, "n1")
    work, declared, unset, absent = doc["dirs"]
    assert [f[:2] for f in work["files"]] == [["log.csv", 4]]
    assert [f[:2] for f in declared["files"]] == [["model.bin", 100]] and declared["sidecar"] is True
    assert unset["unresolved"] and absent["missing"]
    side = json.loads((ckpt / SIDECAR).read_text())
    entry, = side["jobs"]
    assert (entry["job_id"], entry["attempt"], entry["params"]) == (spec.id, 2, dict(spec.hyperparams))
    assert entry["plugins"] == [{"ref": "alice/opsd-patch@1.2.0", "digest": "sf1:" + "0" * 64, "yank": None}]


def test_a_sidecar_keeps_other_jobs_entries_and_replaces_an_unreadable_one(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / SIDECAR).write_text(json.dumps({"jobs": [{"job_id": "someone-else"}]}))
    spec, job_dir = _job(tmp_path, [str(shared)])
    record_attempt_end(str(job_dir / "jobspec.json"), str(job_dir), attempt=0, host="h", env={})
    record_attempt_end(str(job_dir / "jobspec.json"), str(job_dir), attempt=1, host="h", env={})
    jobs = json.loads((shared / SIDECAR).read_text())["jobs"]
    assert [(j["job_id"], j.get("attempt")) for j in jobs] == [("someone-else", None), (spec.id, 1)]
    (shared / SIDECAR).write_bytes(b"[" * (SIDECAR_READ_CAP + 10))  # planted garbage: not parsed, replaced
    record_attempt_end(str(job_dir / "jobspec.json"), str(job_dir), attempt=2, host="h", env={})
    assert [j["job_id"] for j in json.loads((shared / SIDECAR).read_text())["jobs"]] == [spec.id]


def test_a_plan_only_job_records_nothing(tmp_path):
    spec, job_dir = _job(tmp_path, [str(tmp_path / "ckpt")])
    (tmp_path / "ckpt").mkdir()
    write_spec(spec.replace(ledger_only=True), job_dir / "jobspec.json")
    assert record_attempt_end(str(job_dir / "jobspec.json"), str(job_dir), attempt=0, host="h", env={}) is None
    assert not (job_dir / "lineage").exists() and not (tmp_path / "ckpt" / SIDECAR).exists()
