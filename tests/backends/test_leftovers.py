"""A ``forge submit`` killed at each step of staging and recording: what a later command
reports and cleans (nothing pending for ever, no half-staged folder kept), and the sweep of
staging leftovers (never another user's, never through a link)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.cli import forge
from support.killpoints import POINTS, STAGING_POINTS, supervisors_started_by
from support.waiting import wait_for

KILLPOINTS = Path(__file__).parent.parent / "support" / "killpoints.py"
# what a later command finds after a kill at each point, the supervisor left to do its part
NOTHING_LEFT = ("supervisor-started", *STAGING_POINTS, "renamed-into-place")


def killed_submit(exp: Path, point: str, *, with_supervisor: bool = False) -> int:
    """``forge submit --detach`` in *exp*, killed right after *point*; returns its pid once it
    and every supervisor it started have ended."""
    argv = [sys.executable, str(KILLPOINTS), point, *(["--with-supervisor"] if with_supervisor else []), "--",
            "submit", "--detach"]
    proc = subprocess.Popen(argv, cwd=exp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, f"{point}: not killed there ({proc.returncode})\n{out}\n{err}"
    wait_for(lambda: not supervisors_started_by(proc.pid), "the killed submit's supervisors ended", interval=0.05)
    return proc.pid


def entries(exp: Path) -> list:
    jobs = exp / ".forge" / "jobs"
    return sorted(p.name for p in jobs.iterdir()) if jobs.is_dir() else []


def jobs_json(*args) -> tuple[list, str]:
    run = forge("jobs", "list", "--json", *args)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout), run.stderr


@pytest.mark.parametrize("point", list(POINTS))
def test_a_submit_killed_at_each_step_leaves_no_job_pending_and_nothing_half_staged(point, make_experiment):
    exp = make_experiment("python -m workload.show_env", "local")
    killed_submit(exp, point)
    rows, notes = jobs_json()
    if point in NOTHING_LEFT:
        # no record was saved: the supervisor removed what the submit had staged
        assert rows == [] and entries(exp) == [], (rows, entries(exp))
        return
    (row,) = rows
    if point == "recorded":
        assert row["status"] == "lost", row
        assert row["message"].startswith("the job never started: its supervising process ended"), row["message"]
        assert entries(exp) == [row["id"]]  # the job's directory, whole, until rm
    else:  # handed over: the job runs to its end
        row = wait_for(lambda: [r for r in jobs_json()[0] if r["status"] == "succeeded"], "a job succeeded", interval=0.05)[0]
    removed = forge("jobs", "rm", row["id"])
    assert removed.returncode == 0, removed.stderr
    assert entries(exp) == [] and jobs_json()[0] == []


@pytest.mark.parametrize("point", STAGING_POINTS)
def test_what_a_submit_killed_with_its_supervisor_left_is_swept_by_the_next_command(point, make_experiment):
    exp = make_experiment("python -m workload.show_env", "local")
    pid = killed_submit(exp, point, with_supervisor=True)
    (left,) = entries(exp)
    assert left.startswith(".") and f".staging-{pid}@" in left
    listed, notes = jobs_json()  # no record names this experiment yet: nothing to look at
    assert listed == [] and entries(exp) == [left]
    run = forge("submit", cwd=exp)
    assert run.returncode == 0, run.stderr
    assert f"note: removed half-staged job directory {exp.resolve() / '.forge' / 'jobs' / left}" in run.stderr
    assert f"pid {pid}, ended before it finished" in run.stderr
    assert not any(".staging-" in name for name in entries(exp))


def test_jobs_list_rm_and_prune_sweep_the_folders_their_jobs_were_staged_in(make_experiment):
    exp = make_experiment("python -m workload.show_env", "local")
    assert forge("submit", cwd=exp).returncode == 0
    for command in (("jobs", "list"), ("jobs", "prune", "--gone"), ("jobs", "rm")):
        pid = killed_submit(exp, "work-copied", with_supervisor=True)
        (left,) = [name for name in entries(exp) if ".staging-" in name]
        job_id = next(name for name in entries(exp) if not name.startswith("."))
        run = forge(*command, *([job_id] if command[-1] == "rm" else []))
        assert run.returncode == 0, run.stderr
        assert f"note: removed half-staged job directory {exp.resolve() / '.forge' / 'jobs' / left}" in run.stderr
        assert f"pid {pid}" in run.stderr
        assert left not in entries(exp)
        if command[-1] == "rm":
            assert entries(exp) == []


def test_the_sweep_leaves_a_live_process_another_users_folder_and_links_alone(tmp_path, other_user):
    from starforge.cluster.atomic import writer_tag
    from starforge.jobs.leftovers import sweep
    from starforge.jobs.staged import staging_prefix

    root = tmp_path.resolve() / "exp" / ".forge" / "jobs"
    root.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone_pid = int(dead.stdout)
    ours = root / f".demo-1.staging-{gone_pid}@{writer_tag()}-abcd1234"
    (ours / "forge_plugins" / "p").mkdir(parents=True)
    os.chmod(ours / "forge_plugins", 0o555)  # read-only, as staging leaves plugins
    live = root / (staging_prefix("demo-2") + "efgh5678")  # this process: still staging
    live.mkdir()
    theirs = root / f".demo-3.staging-{gone_pid}@{writer_tag()}-ijkl9012"
    theirs.mkdir()
    os.chown(theirs, other_user.uid, -1)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep.txt").write_text("x")
    link = root / f".demo-4.staging-{gone_pid}@{writer_tag()}-mnop3456"
    link.symlink_to(precious)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ".forge").mkdir(parents=True)
    (elsewhere / ".forge" / "jobs").symlink_to(root)  # a root reached through a link
    assert sweep(elsewhere / ".forge" / "jobs") == []
    assert ours.is_dir()
    removed = sweep(root)
    assert [leftover.path for leftover in removed] == [ours]
    assert not ours.exists()
    assert live.is_dir() and theirs.is_dir() and link.is_symlink() and (precious / "keep.txt").exists()


def test_a_record_an_earlier_release_left_without_a_supervisor_is_lost_after_a_while(tmp_path, forge_home):
    from starforge.jobs.jobrecord import JobRecord
    from starforge.jobs.store import JobStore

    store = JobStore()
    for job_id, age in (("old-1", 3600), ("new-1", 0)):
        store.save(JobRecord(id=job_id, name="old", backend="local", status="pending", dir=str(tmp_path / job_id),
                             created="2026-11-29T12:00:00Z"))
        when = time.time() - age
        os.utime(store.path(job_id), (when, when))
    rows = {row["id"]: row for row in jobs_json()[0]}
    assert rows["new-1"]["status"] == "pending"  # it may be the moment between two writes
    assert rows["old-1"]["status"] == "lost" and "no supervising process was ever recorded" in rows["old-1"]["message"]
    assert forge("jobs", "rm", "old-1").returncode == 0


def test_as_an_ordinary_user_the_sweep_removes_a_read_only_staging_leftover(other_user):
    # root deletes a read-only tree whatever its modes; an ordinary user must make it writable first
    import shutil
    import tempfile

    import starforge
    from starforge.cluster.atomic import writer_tag

    base = Path(tempfile.mkdtemp(prefix="sfsweep", dir="/tmp"))
    try:
        base.chmod(0o755)
        shutil.copytree(Path(starforge.__file__).parent, base / "lib" / "starforge")  # for the system's python3
        root = base / "exp" / ".forge" / "jobs"
        gone_pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                      text=True).stdout)
        left = root / f".demo-1.staging-{gone_pid}@{writer_tag()}-abcd1234"
        (left / "forge_plugins" / "p").mkdir(parents=True)
        (left / "forge_plugins" / "p" / "mod.py").write_text("x = 1\n")
        subprocess.run(["chown", "-R", other_user.name, str(base / "exp")], check=True)
        for path in (left / "forge_plugins" / "p" / "mod.py", left / "forge_plugins" / "p", left / "forge_plugins"):
            path.chmod(0o444 if path.is_file() else 0o555)  # as staging leaves plugins: read-only
        code = ("import sys; sys.path.insert(0, sys.argv[1]); from starforge.jobs.leftovers import sweep; "
                "print([str(leftover.path) for leftover in sweep(sys.argv[2])])")
        run = other_user.run("/usr/bin/python3", "-c", code, str(base / "lib"), str(root), check=False)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == repr([str(left)]) and not left.exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
