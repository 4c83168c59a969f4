"""What happens to a Slurm job between its steps, on the real one-node test cluster: the
batch script edited after submit, a requeued attempt's ``work/`` that another user tries
to change, and a cancel that arrives while a keeper step collects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.waiting import wait_for

from starforge.experiment.submit import submit_experiment

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent


@pytest.fixture
def staging(slurm_job_env):
    """A shared staging root like a team's /shared/forge-jobs: every user may make folders
    there (mode 1777), so another user reaches the job directory; the job's python3 first on PATH."""
    root = Path(tempfile.mkdtemp(prefix="sfstaging", dir="/tmp"))
    root.chmod(0o1777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def forge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "forge"), *args], capture_output=True, text=True, timeout=60)


def scontrol(*args: str) -> str:
    return subprocess.run(["timeout", "30", "scontrol", *args], capture_output=True, text=True, check=True).stdout


def ended(job: str) -> str:
    """The job's final status line, once Slurm no longer runs any step of it."""
    wait_for(lambda: json.loads(forge("jobs", "status", job, "--json").stdout)["status"] not in ("pending", "running"),
             f"{job} ended", 120)
    return forge("jobs", "status", job).stdout.strip()


def test_a_batch_script_edited_after_submit_is_not_what_runs(staging, make_experiment, tmp_path, other_user):
    # slurmctld stores the script at submit: the file in the shared job directory is a copy
    # for the reader, and no edit of it (by the user, or by anyone who could write there)
    # changes what the job runs or the binding hashes it checks.
    ran = tmp_path / "edited-script-ran"
    exp = make_experiment("python -m workload.train", "slurm", {"staging": str(staging), "sbatch_args": ["--hold"]})
    sub = submit_experiment(exp, (), backend="slurm")
    slurm_id, job = sub.record.backend_ref["job_id"], sub.record.id
    script = Path(sub.record.dir) / "slurm" / "job.sbatch"
    try:
        refused = other_user.run("sh", "-c", f"echo 'touch /tmp/x' >> {script}", check=False)
        assert refused.returncode != 0 and "Permission denied" in refused.stderr  # not another user's to edit
        script.write_text(f"#!/bin/bash\ntouch {ran}\nexit 0\n")  # the job's own user, after submit
        scontrol("release", slurm_id)
        assert ended(job) == f"{job}: succeeded (exit 0)"
    finally:
        subprocess.run(["timeout", "30", "scancel", slurm_id], capture_output=True)
    assert not ran.exists()
    logs = forge("jobs", "logs", job).stdout
    assert "plugin  : tester/mark-worker@1.0.0 loaded" in logs and "RESULTS " in logs, logs


# attempt 0 writes its checkpoint into the working directory and waits to be requeued;
# attempt 1 resumes from what it finds there
RESUME = """\
n=${SLURM_RESTART_COUNT:-0}
if [ "$n" = 0 ]; then
    echo "attempt 0's checkpoint" > checkpoint.txt
    touch "$REQUEUE_MARK"
    sleep 300
fi
echo "attempt $n resumes in $PWD from: $(cat checkpoint.txt)"
echo "attempt $n finds: $(ls -A | tr '\\n' ' ')"
"""


def test_another_user_cannot_change_a_requeued_attempts_work_directory(staging, make_experiment, tmp_path, monkeypatch, other_user):
    # The job's working directory stays on the shared file system between attempts
    # (FORGE_WORK_DIR): a requeued attempt resumes from what the last one left there. The
    # job directory and work/ are the user's and writable by nobody else (staging modes,
    # the batch script's umask), and the staging root's sticky bit keeps the job directory
    # where it is: another user changes nothing the next attempt reads.
    mark = tmp_path / "attempt-0-running"
    monkeypatch.setenv("REQUEUE_MARK", str(mark))  # reaches the job through sbatch --export=ALL
    exp = make_experiment("bash resume.sh", "slurm", {"staging": str(staging)})
    (exp / "resume.sh").write_text(RESUME)
    sub = submit_experiment(exp, (), backend="slurm")
    slurm_id, job = sub.record.backend_ref["job_id"], sub.record.id
    job_dir = Path(sub.record.dir)
    work = job_dir / "work"
    try:
        wait_for(mark.exists, "attempt 0 wrote its checkpoint")
        tries = {
            "rewrite the checkpoint": f"echo evil > {work}/checkpoint.txt",
            "plant a module": f"echo 'import os' > {work}/resume_hook.py",
            "replace work/": f"mv {work} {work}.old",
            "link work/ elsewhere": f"ln -s /tmp {job_dir}/work2 && mv -T {job_dir}/work2 {work}",
            "move the job directory": f"mv {job_dir} {job_dir}.old",
        }
        for what, command in tries.items():
            done = other_user.run("sh", "-c", command, check=False)
            assert done.returncode != 0, f"{other_user.name} could {what}"
            assert "Permission denied" in done.stderr or "Operation not permitted" in done.stderr, (what, done.stderr)
        scontrol("requeue", slurm_id)
        wait_for(lambda: {"JobState=PENDING", "Reason=BeginTime"} <= set(scontrol("show", "job", "-o", slurm_id).split()),
                 "the requeue hold")
        scontrol("update", f"JobId={slurm_id}", "StartTime=now")  # not the whole hold: the test's budget
        assert ended(job) == f"{job}: succeeded (exit 0)"
    finally:
        subprocess.run(["timeout", "30", "scancel", slurm_id], capture_output=True)
    logs = forge("jobs", "logs", job).stdout
    assert f"attempt 1 resumes in {work} from: attempt 0's checkpoint" in logs, logs
    found = next(line for line in logs.splitlines() if line.startswith("attempt 1 finds: "))
    assert "resume_hook.py" not in found and "checkpoint.txt" in found, found


# cp as the collect step runs it, slowed down once: the first copy into the job's shared
# provenance folder waits 3 s first, so the test's cancel arrives while a collect runs
SLOW_CP = """\
#!/bin/bash
dest="${@: -1}"
case "$dest" in
    "$SLOW_CP_UNDER"/*/provenance*) if mkdir "$SLOW_CP_MARK" 2>/dev/null; then sleep 3; fi ;;
esac
exec /bin/cp "$@"
"""


def test_a_cancel_during_the_keepers_collect_waits_for_it(staging, make_experiment, tmp_path, monkeypatch):
    # At the end of a job the batch script signals the keeper step, whose collect copies
    # the node's records back and removes the node-local copy. A `forge jobs cancel` that
    # arrives then (scancel: SIGTERM to every step) does not cut that collect short: the
    # keeper ignores SIGTERM while it collects, within the KillWait Slurm gives a step.
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "cp").write_text(SLOW_CP)
    (tools / "cp").chmod(0o755)
    paused = tmp_path / "collect-copying"
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLOW_CP_UNDER", str(staging))
    monkeypatch.setenv("SLOW_CP_MARK", str(paused))
    exp = make_experiment("python -m workload.train", "slurm", {"staging": str(staging)})
    sub = submit_experiment(exp, (), backend="slurm")
    slurm_id, job = sub.record.backend_ref["job_id"], sub.record.id
    job_dir = Path(sub.record.dir)
    try:
        wait_for(paused.exists, "a collect started copying")
        cancelled = forge("jobs", "cancel", job)
        assert cancelled.returncode == 0, cancelled.stderr
        wait_for(lambda: "JobState=CANCELLED" in scontrol("show", "job", "-o", slurm_id)
                 and not subprocess.run(["squeue", "-h", "-j", slurm_id], capture_output=True, text=True).stdout.strip(),
                 "Slurm ended every step of the job")
    finally:
        subprocess.run(["timeout", "30", "scancel", slurm_id], capture_output=True)
    assert forge("jobs", "status", job).stdout.strip() == f"{job}: cancelled"
    logs = forge("jobs", "logs", job).stdout
    [local] = [json.loads(line[len("RESULTS "):])["job_dir"] for line in logs.splitlines() if line.startswith("RESULTS ")]
    assert not os.path.exists(local), "the node-local copy stayed"
    host = os.uname().nodename.split(".")[0]
    assert (job_dir / "slurm" / "cleanup" / f"a0-{host}.done").read_text() == "removed\n"
    records = {p.name: p.read_text() for p in (job_dir / "provenance").glob("*.json")}
    for name, text in records.items():
        json.loads(text)  # whole, every one
    modes = sorted(json.loads(t).get("mode") for t in records.values() if json.loads(t).get("role") == "launcher")
    assert modes == ["launch", "verify-only"], records
    shown = json.loads(forge("jobs", "show", job, "--json").stdout)
    assert shown["launch_status"]["code"] == 0 and shown["provenance"]["hosts"] == [host], shown
