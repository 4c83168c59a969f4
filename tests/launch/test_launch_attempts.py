"""The attempt number a launcher claims in its job directory."""

from __future__ import annotations

import pytest

from starforge.cluster.attempts import next_attempt as _next_attempt


@pytest.fixture
def job_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("FORGE_ATTEMPT", raising=False)
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    return tmp_path


def test_first_launch_is_0_then_one_more_each_time(job_dir):
    assert [_next_attempt(str(job_dir)) for _ in range(3)] == [0, 1, 2]
    assert sorted(p.name for p in (job_dir / ".forge-runtime" / "attempts.d").iterdir()) == ["0", "1", "2"]


def test_a_number_claimed_by_another_launcher_is_skipped(job_dir):
    assert _next_attempt(str(job_dir)) == 0
    folder = job_dir / ".forge-runtime" / "attempts.d"
    (folder / "1").touch()  # another launcher of the same directory got there first
    (folder / "stray.tmp").touch()  # not a number: ignored
    assert _next_attempt(str(job_dir)) == 2


def test_count_of_an_earlier_release_is_continued(job_dir):
    (job_dir / ".forge-runtime").mkdir()
    (job_dir / ".forge-runtime" / "attempts").write_text("4\n")  # four launches happened
    assert _next_attempt(str(job_dir)) == 4
    assert _next_attempt(str(job_dir)) == 5


def test_scheduler_numbers_win_and_claim_nothing(job_dir, monkeypatch):
    monkeypatch.setenv("SLURM_RESTART_COUNT", "3")
    assert _next_attempt(str(job_dir)) == 3
    monkeypatch.setenv("FORGE_ATTEMPT", "7")
    assert _next_attempt(str(job_dir)) == 7
    assert not (job_dir / ".forge-runtime").exists()
