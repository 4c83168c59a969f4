"""A requeued Slurm job on the real one-node test cluster (``scontrol requeue``, the way
slurmctld requeues a job whose node failed): every attempt's output is kept, and while the
job waits to start again ``forge jobs status`` says it was requeued."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.waiting import wait_for

from starforge.experiment.submit import submit_experiment

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent

# attempt 0 says it started, leaves a mark and waits to be requeued; attempt 1 finishes
REQUEUE_ONCE = """\
echo "attempt ${SLURM_RESTART_COUNT:-0} of the trainer starts"
if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
    echo "attempt 0 was here before the requeue"
    touch "$REQUEUE_MARK"
    sleep 300
fi
echo "attempt ${SLURM_RESTART_COUNT:-0} of the trainer ends"
"""


def forge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "forge"), *args], capture_output=True, text=True, timeout=60)


def scontrol(*args: str) -> str:
    return subprocess.run(["timeout", "30", "scontrol", *args], capture_output=True, text=True, check=True).stdout


def test_a_requeued_job_keeps_each_attempts_log_and_says_it_was_requeued(slurm_env, make_experiment, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    mark = tmp_path / "attempt-0-running"
    monkeypatch.setenv("REQUEUE_MARK", str(mark))  # reaches the job through sbatch --export=ALL
    exp = make_experiment("bash requeue_once.sh", "slurm", {"staging": str(tmp_path / "shared")})
    (exp / "requeue_once.sh").write_text(REQUEUE_ONCE)
    sub = submit_experiment(exp, (), backend="slurm")
    slurm_id, job = sub.record.backend_ref["job_id"], sub.record.id
    try:
        wait_for(mark.exists, "attempt 0 of the trainer started")
        scontrol("requeue", slurm_id)
        # Slurm holds a requeued job back (BeginTime, the credential lifetime: 2 min by default)
        held = wait_for(lambda: {"JobState=PENDING", "Reason=BeginTime"} <= set((s := scontrol("show", "job", "-o", slurm_id)).split())
                        and s, "the requeue hold")
        start = re.search(r"\bStartTime=(\S+)", held).group(1)
        status = forge("jobs", "status", job)
        assert status.returncode == 0, status.stderr
        assert status.stdout.strip() == (f"{job}: pending: requeued (attempt 2, recorded as attempt 1); "
                                         f"Slurm starts it again at {start} (BeginTime)")
        as_json = json.loads(forge("jobs", "status", job, "--json").stdout)
        assert (as_json["status"], as_json["message"]) == ("pending", status.stdout.strip().split(": ", 2)[2])
        scontrol("update", f"JobId={slurm_id}", "StartTime=now")  # not the whole hold: the test's budget
        wait_for(lambda: forge("jobs", "status", job).stdout.strip() == f"{job}: succeeded (exit 0)", "the job succeeded", 120)
    finally:
        subprocess.run(["timeout", "30", "scancel", slurm_id], capture_output=True)
    logs = forge("jobs", "logs", job)
    assert logs.returncode == 0, logs.stderr
    out = logs.stdout
    # both attempts' lines, in order, with where the second begins (it used to overwrite the first)
    first = out.index("attempt 0 was here before the requeue")
    begins = out.index("forge: Slurm requeued this job: attempt 2 (recorded as attempt 1) starts on ")
    assert first < begins < out.index("attempt 1 of the trainer starts") < out.index("attempt 1 of the trainer ends"), out
    assert "attempt 0 of the trainer ends" not in out
    assert "CANCELLED AT" in out and "DUE TO JOB REQUEUE" in out, out  # slurmstepd says why attempt 0 ended
    assert out.count("plugin  : tester/mark-worker@1.0.0 loaded") == 2, out
