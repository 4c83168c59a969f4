"""forge jobs outputs, forge trace and forge audit over real local jobs: digests made here and
cached, a directory matched file by file with files several jobs wrote alike not deciding,
sidecars taken as untrusted claims, and a path no job wrote."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.experiment import Project

TRAINER = """\
import os
from starforge import plugins
hp = plugins.hyperparams()
out = os.environ["FORGE_OUTPUT_DIR"]
with open(os.path.join(out, "model.bin"), "wb") as f:  # what this run learned: its own bytes
    f.write(("weights %s " % hp["seed"]).encode() * int(hp["size"]))
with open(os.path.join(out, "tokenizer.json"), "w") as f:  # the same in every run
    f.write('{"vocab": ["a", "b", "c"]}')
"""


def _two_jobs(root: Path):
    """Two jobs of one experiment in *root*: different weights, the same tokenizer."""
    project = Project(root)
    project.experiment(config={"seed": 1, "size": 1000}, entrypoint="python trainer.py",
                       extra=f"outputs: {{dirs: [{root}/ckpt/$FORGE_JOB_ID], sample_above: 4000000}}\n")
    (project.exp / "trainer.py").write_text(TRAINER)
    project.forge("lock")
    jobs = [json.loads(project.forge("submit", "--json", "--set", f"seed={seed}").stdout)["id"] for seed in (1, 2)]
    return project, jobs


@pytest.fixture
def world(tmp_path):
    """The two jobs, for a test that changes what they wrote or what forge keeps of them."""
    return _two_jobs(tmp_path)


@pytest.fixture(scope="module")
def read_world(tmp_path_factory):
    """The two jobs made once per worker, for the tests that only trace them (their own files
    go in their own tmp_path): ``(project, jobs, the folder the jobs' ckpt/ is in)``."""
    root = tmp_path_factory.mktemp("lineage-read")
    return (*_two_jobs(root), root)


def _copy_without_sidecar(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    (dest / ".forge-provenance.json").unlink()
    return dest


def test_a_copied_directory_is_traced_by_content_and_a_shared_tokenizer_does_not_decide(read_world, tmp_path):
    project, (a, b), root = read_world
    copy = _copy_without_sidecar(root / "ckpt" / a, tmp_path / "elsewhere" / "run-a")
    out = project.forge("trace", copy, "--json")
    doc = json.loads(out.stdout)
    job, = doc["jobs"]  # job b wrote the same tokenizer, and is not named
    assert (job["job_id"], job["source"], job["matched"], job["shared"], doc["files"]) == (a, "content", 1, 1, 2)
    assert job["params"]["seed"] == 1 and job["backend"] == "local" and job["hosts"]
    text = project.forge("trace", copy).stdout
    assert f"written by job {a}, by content: 1 of 2 files matched its outputs manifest (1 more written alike" in text
    # the tokenizer alone: both jobs wrote it alike, both are named, neither decided by another file
    shared = json.loads(project.forge("trace", copy / "tokenizer.json", "--json").stdout)
    assert sorted(j["job_id"] for j in shared["jobs"]) == sorted([a, b]) and all(j["matched"] == 0 for j in shared["jobs"])


def test_a_file_in_a_declared_directory_is_traced_by_its_sidecar_and_cross_checked(world, tmp_path):
    project, (a, _) = world
    ckpt = tmp_path / "ckpt" / a
    doc = json.loads(project.forge("trace", ckpt / "model.bin", "--json").stdout)
    job, = doc["jobs"]
    assert (job["job_id"], job["source"], job["record"], job["disagreements"]) == (a, "sidecar", True, [])
    assert doc["sidecar"] == str(ckpt / ".forge-provenance.json")
    # whoever can write the directory can write the claim: it is cross-checked and shown escaped
    sidecar = json.loads((ckpt / ".forge-provenance.json").read_text())
    sidecar["jobs"][0]["plugins"] = [{"ref": "mallory/\x1b[31mfake@1.0.0", "digest": "sf1:" + "1" * 64}]
    sidecar["jobs"][0]["params"] = {"seed": 99}
    (ckpt / ".forge-provenance.json").write_text(json.dumps(sidecar))
    out = project.forge("trace", ckpt / "model.bin")
    assert "DISAGREES with its job record" in out.stdout and "\x1b" not in out.stdout
    assert "mismatch: plugins: the sidecar says mallory/^[[31mfake@1.0.0" in out.stdout
    assert "mismatch: parameters: the sidecar's differ from the job record's" in out.stdout


def test_a_teammate_without_our_records_gets_the_sidecar_claim(read_world, tmp_path):
    project, (a, _), root = read_world
    teammate = dict(project.env, FORGE_HOME=str(tmp_path / "teammate-home"))
    from support.cli import forge

    out = forge("trace", root / "ckpt" / a, "--json", env=teammate, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    job, = json.loads(out.stdout)["jobs"]
    assert (job["job_id"], job["record"], job["params"]["seed"], job["backend"]) == (a, False, 1, "local")
    text = forge("trace", root / "ckpt" / a, env=teammate, cwd=tmp_path).stdout
    assert "no job record of it is readable here" in text


def test_a_path_no_job_wrote_says_so_without_a_traceback(read_world, tmp_path):
    project, _, _root = read_world
    stray = tmp_path / "stray.bin"
    stray.write_bytes(b"weights 1 " * 1000 + b"!")  # one byte more than job a's weights
    out = project.forge("trace", stray, ok=False)
    assert out.returncode == 7 and "Traceback" not in out.stderr
    assert out.stderr.startswith(f"error: {stray}: no job wrote this") and "hint:" in out.stderr
    missing = project.forge("trace", tmp_path / "nope", ok=False)
    assert missing.returncode == 2 and "no such file or directory" in missing.stderr and "hint:" in missing.stderr


def test_jobs_outputs_lists_and_digests_once_then_says_what_changed(world, tmp_path):
    project, (a, _) = world
    listed = json.loads(project.forge("jobs", "outputs", a, "--json").stdout)
    by_name = {Path(f["path"]).name: f for f in listed["files"]}
    assert by_name["model.bin"]["size"] == 10000 and by_name["model.bin"]["digest"] is None
    hashed = json.loads(project.forge("jobs", "outputs", a, "--hash", "--json").stdout)
    model = next(f for f in hashed["files"] if f["path"].endswith("model.bin"))
    import hashlib

    assert model["digest"] == "sha256:" + hashlib.sha256(b"weights 1 " * 1000).hexdigest() and not model["probable"]
    cache = json.loads((project.home / "cache" / "output-digests.json").read_text())
    assert any(k.endswith("model.bin") and v[2] == model["digest"] for k, v in cache.items())
    path = Path(model["path"])
    path.write_bytes(b"overwritten")
    os.utime(path, ns=(1, 1))
    again = json.loads(project.forge("jobs", "outputs", a, "--hash", "--json").stdout)
    changed = next(f for f in again["files"] if f["path"].endswith("model.bin"))
    assert (changed["state"], changed["digest"]) == ("changed", None)
    text = project.forge("jobs", "outputs", a).stdout
    assert f"job {a}: " in text and "sidecar written" in text and "[changed since it was listed]" in text


def test_a_file_above_sample_above_matches_by_sampled_digest_as_probable(tmp_path):
    project = Project(tmp_path)
    project.experiment(config={"seed": 1, "size": 1}, entrypoint="python trainer.py",
                       extra=f"outputs: {{dirs: [{tmp_path}/ckpt/$FORGE_JOB_ID], sample_above: 100}}\n")
    (project.exp / "trainer.py").write_text(TRAINER)
    project.forge("lock")
    job = json.loads(project.forge("submit", "--json").stdout)["id"]
    copy = _copy_without_sidecar(tmp_path / "ckpt" / job, tmp_path / "copy")
    found, = json.loads(project.forge("trace", copy / "model.bin", "--json").stdout)["jobs"]
    assert (found["job_id"], found["probable"]) == (job, False)  # 10 bytes: under sample_above, a sha256
    (copy / "big.bin").write_bytes(os.urandom(3 << 20))
    shutil.copy(copy / "big.bin", tmp_path / "ckpt" / job / "big.bin")
    # listed by a later attempt's end: record it again as the launcher's end would
    from starforge.cluster.lineage import record_attempt_end

    record_attempt_end(str(project.jobs_dir() / job / "jobspec.json"), str(project.jobs_dir() / job), attempt=1, host="h2")
    found, = json.loads(project.forge("trace", copy / "big.bin", "--json").stdout)["jobs"]
    assert (found["job_id"], found["probable"]) == (job, True)
    assert "(probable: a sampled digest)" in project.forge("trace", copy / "big.bin").stdout


def test_a_planted_sidecar_too_large_or_not_json_is_no_claim_and_content_decides(world, tmp_path):
    project, (a, _) = world
    copy = _copy_without_sidecar(tmp_path / "ckpt" / a, tmp_path / "planted")
    (copy / ".forge-provenance.json").write_bytes(b"{" * (2 << 20))
    out = project.forge("trace", copy / "model.bin", "--json")
    doc = json.loads(out.stdout)
    assert [(j["job_id"], j["source"]) for j in doc["jobs"]] == [(a, "content")] and doc["sidecar"] is None
    assert "larger than 1048576 bytes; not used as a claim" in " ".join(doc["notes"])
    (copy / ".forge-provenance.json").write_text(json.dumps({"jobs": [{"job_id": "../../etc"}, "x"]}))
    doc = json.loads(project.forge("trace", copy / "model.bin", "--json").stdout)
    assert [(j["job_id"], j["source"]) for j in doc["jobs"]] == [(a, "content")]


def test_a_damaged_manifest_is_named_and_the_others_still_read(world):
    project, (a, _) = world
    (project.jobs_dir() / a / "lineage" / "outputs-a7-x.json").write_text('{"schema": "forge/outputs/v1", "dirs": 3}')
    out = project.forge("jobs", "outputs", a)
    assert "outputs-a7-x.json: not an outputs manifest" in out.stderr and "Traceback" not in out.stderr
    assert "model.bin" in out.stdout


def test_files_of_each_ray_hosts_own_copy_of_work_at_the_same_path_are_listed_for_each_host(tmp_path):
    from starforge.experiment.lineage import KnownJob
    from starforge.jobs.jobrecord import JobRecord

    copy = "/tmp/ray/session_1/runtime_resources/working_dir_files/starforge_0123/work"  # the same on every node

    def manifest(host, node_local, files):
        return {"schema": "forge/outputs/v1", "job_id": "j1", "attempt": 1, "host": host, "dirs": [
            {"kind": "work", "declared": "work/", "path": copy, "files": files, **({"node_local": True} if node_local else {})},
            {"kind": "declared", "declared": "/shared/ckpt", "path": "/shared/ckpt", "files": [["model.bin", 9, 1]]}]}

    record = JobRecord(id="j1", name="n", backend="ray", status="succeeded", dir=str(tmp_path), created="t")
    job = KnownJob(record, tmp_path, removed=True, kept=(manifest("rh", True, [["log.txt", 1, 1]]),
                                                        manifest("rn2", True, [["log.txt", 2, 2], ["rn2.txt", 3, 3]])))
    listed = [(f.rel, f.host, f.size) for f in job.files()]
    # the shared directory's file once (its newest listing), each host's own log.txt apart
    assert listed == [("model.bin", "rn2", 9), ("log.txt", "rh", 1), ("log.txt", "rn2", 2), ("rn2.txt", "rn2", 3)]
    assert [(d["path"], d["host"], d["files"]) for d in job.output_dirs()] == [
        (copy, "rh", 1), ("/shared/ckpt", "rn2", 1), (copy, "rn2", 2)]
    # a work/ every host shares (Slurm: one staging directory) is listed once, as before
    shared = KnownJob(record, tmp_path, removed=True, kept=(manifest("n1", False, [["log.txt", 1, 1]]),
                                                           manifest("n2", False, [["log.txt", 2, 2]])))
    assert [(f.rel, f.host) for f in shared.files()] == [("model.bin", "n2"), ("log.txt", "n2")]
