"""The end of every attempt on the local backend: the outputs manifest and the sidecars,
for a job that ends, one that is cancelled, and an output directory the job cannot write."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from support.experiment import Project

TRAINER = """\
import os, sys, time
from starforge import plugins
hp = plugins.hyperparams()
out = os.environ["FORGE_OUTPUT_DIR"]
with open(os.path.join(out, "model.bin"), "wb") as f:
    f.write(b"w" * 4096)
with open("metrics.csv", "w") as f:
    f.write("step,loss\\n1,0.5\\n")
print("trainer wrote " + out, flush=True)
time.sleep(hp.get("sleep", 0))
"""


def _project(tmp_path) -> Project:
    project = Project(tmp_path)
    project.experiment(config={"sleep": 0, "lr": 0.25}, entrypoint="python trainer.py",
                       extra=f"outputs: [{tmp_path}/ckpt/$FORGE_JOB_ID]\n")
    (project.exp / "trainer.py").write_text(TRAINER)
    project.forge("lock")
    return project


def _manifests(job_dir: Path) -> list:
    return [json.loads(p.read_text()) for p in sorted((job_dir / "lineage").glob("outputs-*.json"))]


def test_a_job_that_ends_leaves_its_manifest_and_a_sidecar_in_its_declared_directory(tmp_path):
    project = _project(tmp_path)
    out = project.forge("submit", "--json")
    job = json.loads(out.stdout)
    ckpt = tmp_path / "ckpt" / job["id"]
    assert (ckpt / "model.bin").stat().st_size == 4096  # FORGE_OUTPUT_DIR named the declared directory, made for it
    manifest, = _manifests(Path(job["dir"]))
    assert manifest["recorded_by"] == "launcher"
    work, declared = manifest["dirs"]
    assert "metrics.csv" in [f[0] for f in work["files"]]
    assert (declared["path"], [f[:2] for f in declared["files"]]) == (str(ckpt), [["model.bin", 4096]])
    entry, = json.loads((ckpt / ".forge-provenance.json").read_text())["jobs"]
    assert (entry["job_id"], entry["attempt"], entry["params"]["lr"]) == (job["id"], 0, 0.25)


def test_a_cancelled_attempt_still_gets_its_manifest_and_sidecar(tmp_path):
    project = _project(tmp_path)
    job = json.loads(project.forge("submit", "--detach", "--json", "--set", "sleep=60").stdout)
    log = Path(job["dir"]) / "log.txt"
    deadline = time.monotonic() + 60
    while "trainer wrote" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
        time.sleep(0.1)
    project.forge("jobs", "cancel", job["id"])
    shown = json.loads(project.forge("jobs", "show", job["id"], "--json").stdout)
    assert shown["status"] == "cancelled"
    manifest, = _manifests(Path(job["dir"]))  # the launcher was killed: its supervisor made it
    assert manifest["recorded_by"] == "local supervisor" and [f[0] for f in manifest["dirs"][1]["files"]] == ["model.bin"]
    assert (tmp_path / "ckpt" / job["id"] / ".forge-provenance.json").is_file()


def test_an_output_directory_the_user_cannot_write_is_listed_and_said_without_a_sidecar(tmp_path, other_user):
    import starforge
    from starforge.cluster.jobspec import JobSpec, example, write_spec

    base = Path(tempfile.mkdtemp(prefix="sflineage", dir="/tmp"))
    try:
        base.chmod(0o755)
        shutil.copytree(Path(starforge.__file__).parent, base / "lib" / "starforge")  # for the system's python3
        teammates = base / "teammate-ckpt"  # root's, not writable by the job's user
        teammates.mkdir()
        (teammates / "shard-0.bin").write_bytes(b"s" * 10)
        job_dir = base / "job"
        (job_dir / "work").mkdir(parents=True)
        write_spec(JobSpec.from_dict(dict(example(), lineage={"outputs": [str(teammates)]})), job_dir / "jobspec.json")
        subprocess.run(["chown", "-R", other_user.name, str(job_dir)], check=True)
        run = other_user.run("/usr/bin/env", f"PYTHONPATH={base / 'lib'}", "/usr/bin/python3", "-m",
                             "starforge.cluster.lineage", "--spec", str(job_dir / "jobspec.json"),
                             "--job-dir", str(job_dir), "--attempt", "0", check=False)
        assert run.returncode == 0, run.stderr
        manifest = json.loads(next((job_dir / "lineage").glob("outputs-a0-*.json")).read_text())
        declared = manifest["dirs"][1]
        assert declared["sidecar"] == "not written: Permission denied"
        assert [f[0] for f in declared["files"]] == ["shard-0.bin"] and not (teammates / ".forge-provenance.json").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)

