"""starforge.jobs.cleanup: which jobs rm and prune delete, called directly (the CLI only prints)."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from starforge.errors import BackendError, UsageError
from starforge.jobs.cleanup import check_removable, created_at, parse_age, remove_jobs, select_prune
from starforge.jobs.jobrecord import JobRecord
from starforge.jobs.store import JobStore

NOW = 1_800_000_000  # 2027-01-15T08:00:00Z
DAY = 86400


def record(job_id, *, days_old=0.0, status="succeeded", job_dir=None, created=None):
    stamp = created or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - days_old * DAY))
    return JobRecord(id=job_id, name="exp", backend="local", status=status, dir=str(job_dir or f"/nonexistent/{job_id}"),
                     created=stamp, exit_code=0 if status == "succeeded" else None)


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("12h", 43200), ("7d", 7 * DAY), ("2w", 14 * DAY), (" 1d ", DAY)])
def test_ages(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["soon", "7", "d", "-1d", "1.5d", "1y", "1234567d"])
def test_not_ages(text):
    with pytest.raises(UsageError, match="is not an age"):
        parse_age(text)


def test_created_at_reads_the_record_timestamp_and_tolerates_garbage():
    assert created_at(record("a", days_old=1)) == NOW - DAY
    assert created_at(record("b", created="yesterday")) is None


def test_prune_by_age_keeps_young_running_and_unreadable_jobs(tmp_path):
    dirs = {name: tmp_path / name for name in ("old", "young", "old-running", "garbled")}
    for d in dirs.values():
        d.mkdir()
    records = [
        record("old", days_old=8, job_dir=dirs["old"]),
        record("young", days_old=1, job_dir=dirs["young"]),
        record("old-running", days_old=30, status="running", job_dir=dirs["old-running"]),
        record("garbled", created="not a time", job_dir=dirs["garbled"]),
    ]
    plan = select_prune(records, older_than=7 * DAY, gone=False, now=NOW)
    assert [r.id for r in plan.chosen] == ["old"] and plan.dirless == ()


def test_prune_asks_the_backend_only_about_candidates_and_uses_its_answer(tmp_path):
    asked = []

    def refresh(r):
        asked.append(r.id)
        return r.with_changes(status="failed", exit_code=1)  # it ended meanwhile

    (tmp_path / "old-running").mkdir()
    (tmp_path / "young-running").mkdir()
    records = [record("old-running", days_old=9, status="running", job_dir=tmp_path / "old-running"),
               record("young-running", days_old=0, status="running", job_dir=tmp_path / "young-running")]
    plan = select_prune(records, older_than=7 * DAY, gone=False, refresh=refresh, now=NOW)
    assert asked == ["old-running"]
    assert [(r.id, r.status) for r in plan.chosen] == [("old-running", "failed")]


def test_prune_gone_drops_ended_records_without_a_directory(tmp_path):
    (tmp_path / "here").mkdir()
    records = [record("here", job_dir=tmp_path / "here"), record("gone"), record("gone-running", status="running")]
    by_age = select_prune(records, older_than=7 * DAY, gone=False, now=NOW)
    assert by_age.chosen == () and [r.id for r in by_age.dirless] == ["gone", "gone-running"]
    plan = select_prune(records, older_than=None, gone=True, now=NOW)
    assert [r.id for r in plan.chosen] == ["gone"]
    assert [r.id for r in plan.dirless] == ["gone-running"]  # a job still running keeps its record
    with pytest.raises(UsageError, match="--older-than AGE, --gone"):
        select_prune(records, older_than=None, gone=False)


def test_remove_checks_every_job_before_deleting_any(tmp_path):
    store = JobStore(tmp_path / "store")
    ended_dir = tmp_path / "jobs" / "ended"
    ended_dir.mkdir(parents=True)
    (ended_dir / "jobspec.json").write_text("{}")
    ended, running = record("ended", job_dir=ended_dir), record("running", status="running")
    for r in (ended, running):
        store.save(r)
    with pytest.raises(UsageError, match="job running is running"):
        remove_jobs([ended, running], store)
    assert ended_dir.is_dir() and {r.id for r in store.list()} == {"ended", "running"}
    assert remove_jobs([ended, ended], store) == ["ended"]  # named twice, removed once
    assert not ended_dir.exists() and [r.id for r in store.list()] == ["running"]


def test_a_directory_reached_through_a_link_is_refused_and_nothing_goes(tmp_path):
    elsewhere = tmp_path / "elsewhere" / "linked"
    elsewhere.mkdir(parents=True)
    (elsewhere / "precious").write_text("keep")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    os.symlink(elsewhere.parent, jobs / "staging")
    linked = record("linked", job_dir=jobs / "staging" / "linked")
    with pytest.raises(BackendError, match="goes through a symlink"):
        check_removable([linked])
    with pytest.raises(BackendError):
        remove_jobs([linked], JobStore(tmp_path / "store"))
    assert (elsewhere / "precious").read_text() == "keep"


def test_a_directory_that_is_not_the_jobs_own_is_left_alone(tmp_path):
    store = JobStore(tmp_path / "store")
    shared = tmp_path / "not-named-after-the-job"
    shared.mkdir()
    r = record("job-1", job_dir=shared)
    store.save(r)
    assert remove_jobs([r], store) == ["job-1"]
    assert shared.is_dir() and store.list() == []


def _nest(top, depth: int) -> None:
    """*depth* folders ``d/d/…`` under *top*, a file at the bottom, made by descriptor (past PATH_MAX)."""
    here = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=here)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=here)
            os.close(here)
            here = below
        os.close(os.open("ckpt.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=here))
    finally:
        os.close(here)


def test_outputs_too_deep_to_read_by_path_are_never_deleted_unasked(tmp_path):
    # 2,100 levels: past the recursion limit and, by path, past PATH_MAX: the folder that
    # cannot be read may hold outputs, so rm asks for --with-outputs, then deletes it all
    store = JobStore(tmp_path / "store")
    job_dir = tmp_path / "jobs" / "deep"
    (job_dir / "recipe").mkdir(parents=True)
    (job_dir / "work").mkdir()
    try:
        _nest(job_dir / "work", 2100)
        deep = record("deep", job_dir=job_dir)
        store.save(deep)
        with pytest.raises(UsageError, match=r"holds outputs \(0 files, 0 B in .*/work, and 1 entry that could not be read\)"):
            remove_jobs([deep], store)
        assert remove_jobs([deep], store, with_outputs=True) == ["deep"]
        assert not os.path.lexists(job_dir) and store.list() == []
    finally:  # whatever failed: no tree deeper than the recursion limit is left for pytest's own cleanup
        subprocess.run(["rm", "-rf", str(job_dir)], check=True, timeout=120)
