"""The local backend through the CLI: waiting, detaching, logs, cancel, Ctrl-C, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import forge as run_forge
from support.waiting import wait_for

TRAINER = """\
import os, sys, time
from starforge import plugins
hp = plugins.hyperparams()
print("trainer pid %d" % os.getpid(), flush=True)
time.sleep(hp.get("sleep", 0))
print("trainer done", flush=True)
sys.exit(hp.get("code", 0))
"""


@pytest.fixture
def exp(tmp_path):
    d = tmp_path / "exp"
    d.mkdir()
    (d / "trainer.py").write_text(TRAINER)
    (d / "forge.yaml").write_text(
        "schema: forge/job/v1\nname: local-demo\nentrypoint: python -m trainer\nconfig:\n  sleep: 0\n  code: 0\n"
    )
    return d


@pytest.fixture
def env(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    e.update(FORGE_HOME=str(tmp_path / "home"), FORGE_CANCEL_GRACE="5")
    return e


def forge(env, cwd, *args, ok=True):
    proc = run_forge(*args, env=env, cwd=cwd, timeout=120)
    if ok:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def job_id_of(stdout: str) -> str:
    return stdout.splitlines()[0].split(": ", 1)[1]


def trainer_pid(log: Path):
    text = log.read_text() if log.exists() else ""
    for line in text.splitlines():
        if line.startswith("trainer pid "):
            return int(line.split()[-1])
    return None


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1].startswith("Z")


def test_waiting_submit_exits_with_the_jobs_code(exp, env):
    forge(env, exp, "lock")
    run = forge(env, exp, "submit", "--set", "code=7", ok=False)
    assert run.returncode == 7
    job_id = job_id_of(run.stdout)
    assert run.stdout.splitlines()[1] == f"dir     : {exp / '.forge' / 'jobs' / job_id}"
    assert "trainer done" in run.stdout
    assert run.stderr.strip().endswith(f"job {job_id} failed, exit code 7")
    record = json.loads((Path(env["FORGE_HOME"]) / "jobs" / f"{job_id}.json").read_text())
    assert (record["status"], record["exit_code"], record["backend"]) == ("failed", 7, "local")
    assert "trainer done" in (exp / ".forge" / "jobs" / job_id / "log.txt").read_text()


def test_detach_list_logs_and_cancel(exp, env):
    forge(env, exp, "lock")
    run = forge(env, exp, "submit", "--detach", "--set", "sleep=60")
    job_id = job_id_of(run.stdout)
    assert f"follow with: forge jobs logs {job_id} -f" in run.stdout
    log = exp / ".forge" / "jobs" / job_id / "log.txt"
    pid = wait_for(lambda: trainer_pid(log), "the trainer started", timeout=30, interval=0.1)
    record_file = Path(env["FORGE_HOME"]) / "jobs" / f"{job_id}.json"
    wait_for(lambda: json.loads(record_file.read_text())["status"] == "running", "the job is recorded running",
             timeout=30, interval=0.1)
    rows = json.loads(forge(env, exp, "jobs", "list", "--json").stdout)
    assert [(r["id"], r["status"], r["exit_code"], r["backend"]) for r in rows] == [(job_id, "running", None, "local")]
    assert job_id in forge(env, exp, "jobs", "list").stdout
    assert f"trainer pid {pid}" in forge(env, exp, "jobs", "logs", job_id).stdout
    out = forge(env, exp, "jobs", "cancel", job_id[:-2])  # a unique prefix is enough
    assert out.stdout.strip() == f"job {job_id} cancelled"
    assert gone(pid)
    shown = json.loads(forge(env, exp, "jobs", "show", job_id, "--json").stdout)
    assert (shown["status"], shown["exit_code"]) == ("cancelled", 128 + signal.SIGTERM)
    again = forge(env, exp, "jobs", "cancel", job_id)
    assert again.stdout.strip() == f"job {job_id} already ended: cancelled"


def test_logs_follow_returns_when_the_job_ends(exp, env):
    forge(env, exp, "lock")
    job_id = job_id_of(forge(env, exp, "submit", "--detach", "--set", "sleep=1").stdout)
    followed = forge(env, exp, "jobs", "logs", job_id, "-f")
    assert followed.stdout.rstrip().endswith("trainer done")
    assert json.loads(forge(env, exp, "jobs", "show", job_id, "--json").stdout)["status"] == "succeeded"


def test_ctrl_c_on_a_waiting_submit_cancels_the_job(exp, env):
    forge(env, exp, "lock")
    # the child gets the default SIGINT handler even when the test runner was started with
    # SIGINT ignored (which the child would inherit, and then never see Ctrl-C)
    proc = subprocess.Popen([sys.executable, "-m", "starforge", "submit", "--set", "sleep=60"], env=env, cwd=exp,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        job_id = proc.stdout.readline().split(": ", 1)[1].strip()
        log = exp / ".forge" / "jobs" / job_id / "log.txt"
        pid = wait_for(lambda: trainer_pid(log), "the trainer started", timeout=30, interval=0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert f"job {job_id} cancelled" in err
    assert gone(pid)
    record = json.loads(forge(env, exp, "jobs", "show", job_id, "--json").stdout)
    assert record["status"] == "cancelled"


def test_jobs_commands_on_unknown_ids(exp, env):
    missing = forge(env, exp, "jobs", "show", "nope", ok=False)
    assert missing.returncode == 7 and "no job 'nope'" in missing.stderr
    assert forge(env, exp, "jobs", "list").stderr.startswith("no jobs yet")  # a note: stderr


def supervisors_of(store: Path) -> list:
    """The pids of supervisors of the jobs store *store* (``--supervise STORE …`` on their command line)."""
    marker = b"--supervise\0" + str(store).encode() + b"\0"
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_submit_whose_staging_fails_leaves_no_supervisor_behind(exp, env, monkeypatch):
    # The supervisor starts while the job is staged; when staging fails it ends with the
    # submit, also in a process that lives on (a submit made in-process), and nothing is recorded.
    from starforge.experiment.submit import submit_experiment

    forge(env, exp, "lock")
    (exp / ".forge").mkdir(exist_ok=True)
    (exp / ".forge" / "jobs").write_text("not a directory: the job directory cannot be made")
    monkeypatch.setenv("FORGE_HOME", env["FORGE_HOME"])
    with pytest.raises(OSError):
        submit_experiment(exp)
    store = Path(env["FORGE_HOME"]) / "jobs"
    assert supervisors_of(store) == []
    assert not list(store.glob("*.json"))
    (exp / ".forge" / "jobs").unlink()
    run = forge(env, exp, "submit")  # the next submit starts its own, which ends once it has recorded the exit
    assert "trainer done" in run.stdout
    wait_for(lambda: supervisors_of(store) == [], "the supervisor ended", timeout=30, interval=0.1)


@pytest.mark.parametrize("started_with", ["ignored", "default"])
def test_a_local_job_keeps_sighup_as_forge_submit_was_started_with_it(exp, env, started_with):
    """nohup forge submit … &: the job keeps SIGHUP ignored, as the shell gave it; started
    with the default, the job has the default too (its supervisor's own handler is not
    passed on). docs/launcher.md, "Signals"."""
    (exp / "trainer.py").write_text(
        "import signal\n"
        "print('trainer SIGHUP', 'ignored' if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else 'default')\n"
    )
    forge(env, exp, "lock")
    disposition = signal.SIG_IGN if started_with == "ignored" else signal.SIG_DFL
    run = subprocess.run([sys.executable, "-m", "starforge", "submit"], env=env, cwd=exp, capture_output=True, text=True,
                         timeout=120, preexec_fn=lambda: signal.signal(signal.SIGHUP, disposition))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"trainer SIGHUP {started_with}" in run.stdout.splitlines()
