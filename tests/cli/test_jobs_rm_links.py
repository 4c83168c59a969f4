"""`forge jobs rm` / `prune` never follow a symlink out of the jobs folder (issue: a
symlinked `.forge/jobs` made `rm` delete the directory it pointed at)."""

import os
import sys
from pathlib import Path

import pytest
from support.cli import forge as run_forge

from starforge.jobs.jobrecord import JobRecord
from starforge.jobs.store import JobStore


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_JOBS_DIR", str(tmp_path / "store"))
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    return JobStore(tmp_path / "store")


def staged(store, tmp_path, job_id="exp-20261129-120000-aaaa", created="2026-11-29T12:00:00Z"):
    """A job staged as submit stages it: <exp>/.forge/jobs/<id>, recorded resolved."""
    job_dir = tmp_path / "exp" / ".forge" / "jobs" / job_id
    job_dir.mkdir(parents=True)
    (job_dir / "jobspec.json").write_text("{}")
    store.save(JobRecord(id=job_id, name="exp", backend="local", status="succeeded", dir=str(job_dir.resolve()),
                         created=created, exit_code=0))
    return job_dir


def victim(tmp_path, job_id):
    """Somebody's data in a folder holding a directory of the job's name."""
    precious = tmp_path / "victim" / job_id / "precious.txt"
    precious.parent.mkdir(parents=True)
    precious.write_text("keep me")
    return precious


def forge(*args):
    return run_forge(*args, env=os.environ.copy())


def _swap_for_link(folder: Path, target: Path) -> None:
    os.rename(folder, folder.with_name(folder.name + ".moved"))
    folder.symlink_to(target, target_is_directory=True)


@pytest.mark.parametrize("command", [("jobs", "rm", "exp-20261129-120000-aaaa"), ("jobs", "prune", "--older-than", "1d")])
def test_a_symlinked_jobs_folder_is_refused_and_nothing_outside_is_deleted(jobs, tmp_path, command):
    job_dir = staged(jobs, tmp_path).resolve()
    precious = victim(tmp_path, job_dir.name)
    _swap_for_link(job_dir.parent, precious.parent.parent)  # .forge/jobs -> victim/
    proc = forge(*command)
    assert proc.returncode == 16, proc.stderr
    assert proc.stderr.startswith(f"error: job {job_dir.name}: its directory {job_dir} ")
    assert "goes through a symlink now" in proc.stderr and f"-> {precious.parent.parent}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert precious.read_text() == "keep me"
    assert [r.id for r in jobs.list()] == [job_dir.name]  # the record stays: nothing was done


def test_a_symlinked_job_directory_or_experiment_folder_is_refused_too(jobs, tmp_path):
    job_dir = staged(jobs, tmp_path)
    precious = victim(tmp_path, job_dir.name)
    _swap_for_link(job_dir, precious.parent)  # the job directory itself -> victim/<id>
    assert forge("jobs", "rm", job_dir.name).returncode == 16 and precious.exists()
    os.unlink(job_dir)
    os.rename(job_dir.with_name(job_dir.name + ".moved"), job_dir)
    _swap_for_link(tmp_path / "exp" / ".forge", tmp_path / "victim")  # a level higher: .forge -> victim/
    (tmp_path / "victim" / "jobs").mkdir()
    os.rename(precious.parent, tmp_path / "victim" / "jobs" / job_dir.name)
    proc = forge("jobs", "rm", job_dir.name)
    assert proc.returncode == 16 and "goes through a symlink now" in proc.stderr
    assert (tmp_path / "victim" / "jobs" / job_dir.name / "precious.txt").read_text() == "keep me"


def test_rm_checks_every_job_before_deleting_any(jobs, tmp_path):
    good = staged(jobs, tmp_path, "exp-20261129-120000-bbbb")
    (tmp_path / "other").mkdir()
    bad_dir = tmp_path / "other" / "exp-20261129-120000-cccc"
    bad_dir.mkdir()
    jobs.save(JobRecord(id=bad_dir.name, name="exp", backend="local", status="failed", dir=str(bad_dir), created="2026-11-29T12:00:00Z"))
    precious = victim(tmp_path, bad_dir.name)
    _swap_for_link(bad_dir.parent, precious.parent.parent)
    proc = forge("jobs", "rm", good.name, bad_dir.name)
    assert proc.returncode == 16 and good.is_dir() and precious.exists()


def test_an_honest_job_directory_is_still_deleted(jobs, tmp_path):
    job_dir = staged(jobs, tmp_path)
    proc = forge("jobs", "rm", job_dir.name)
    assert proc.returncode == 0 and proc.stdout == f"removed {job_dir.name}\n" and not job_dir.exists()
    assert jobs.list() == []


@pytest.mark.skipif(sys.version_info < (3, 11), reason="rmtree(dir_fd=) is 3.11+; before, the path check alone guards")
def test_a_link_swapped_in_after_the_check_is_not_followed(jobs, tmp_path):
    from starforge.errors import BackendError
    from starforge.jobs.jobdir import removable_job_dir, remove_job_dir

    job_dir = staged(jobs, tmp_path)
    precious = victim(tmp_path, job_dir.name)
    checked = removable_job_dir(jobs.get(job_dir.name))
    assert checked == job_dir.resolve()
    _swap_for_link(job_dir.parent, precious.parent.parent)  # between the check and the delete
    with pytest.raises(BackendError, match="changed while it was being deleted"):
        remove_job_dir(checked)
    assert precious.read_text() == "keep me"


def test_once_the_directory_is_gone_the_record_can_be_removed_even_through_a_link(jobs, tmp_path):
    """The hint says: delete the staged directory yourself, then rm again. That must work."""
    job_dir = staged(jobs, tmp_path).resolve()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _swap_for_link(job_dir.parent, elsewhere)  # .forge/jobs -> elsewhere/, which has no such job
    proc = forge("jobs", "rm", job_dir.name)
    assert proc.returncode == 0 and proc.stdout == f"removed {job_dir.name}\n", proc.stderr
    assert jobs.list() == [] and list(elsewhere.iterdir()) == []

