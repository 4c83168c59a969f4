"""`forge jobs` through the installed command: listing, lookup, status, rm and prune."""

import json
import os

import pytest
from support.cli import forge as run_forge

from starforge.jobs.jobrecord import JobRecord
from starforge.jobs.store import JobStore


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    root = tmp_path / "jobs"
    monkeypatch.setenv("FORGE_JOBS_DIR", str(root))
    monkeypatch.setenv("FORGE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NO_COLOR", raising=False)
    return JobStore(root)


def add(store, job_id, *, created="2026-11-29T12:00:00Z", status="succeeded", job_dir=None):
    record = JobRecord(
        id=job_id, name=job_id.split("-")[0], backend="local", status=status,
        dir=str(job_dir or f"/nonexistent/{job_id}"), created=created, exit_code=0 if status == "succeeded" else None,
    )
    store.save(record)
    return record


def forge(*args):
    return run_forge(*args, env=os.environ.copy())


def test_list_says_how_many_it_left_out_and_json_shows_the_same_jobs(jobs):
    for i in range(23):
        add(jobs, f"exp-20261129-1200{i:02d}-aaaa", created=f"2026-11-29T12:00:{i:02d}Z")
    text = forge("jobs", "list")
    assert text.returncode == 0
    assert len(text.stdout.strip().splitlines()) == 1 + 20  # header + 20 rows
    assert "20 of 23 jobs shown" in text.stderr and "3 older omitted" in text.stderr and "--all" in text.stderr
    as_json = forge("jobs", "list", "--json")
    assert len(json.loads(as_json.stdout)) == 20 and "20 of 23" in as_json.stderr
    assert len(json.loads(forge("jobs", "list", "--json", "--all").stdout)) == 23
    limited = forge("jobs", "list", "--limit", "5")
    assert len(limited.stdout.strip().splitlines()) == 6 and "18 older omitted" in limited.stderr
    everything = forge("jobs", "list", "--all")
    assert len(everything.stdout.strip().splitlines()) == 24 and everything.stderr == ""


def test_ambiguous_prefix_lists_the_matches_and_marks_the_cut(jobs):
    for i in range(3):
        add(jobs, f"small-2026112{i}")
    result = forge("jobs", "show", "small")
    assert result.returncode == 2
    assert "matches 3 jobs" in result.stderr and "small-20261120, small-20261121, small-20261122" in result.stderr
    assert "…" not in result.stderr
    for i in range(12):
        add(jobs, f"quick-{i:02d}")
    result = forge("jobs", "show", "quick")
    assert "matches 12 jobs" in result.stderr and result.stderr.rstrip().endswith(", …")


def test_unknown_job_exits_not_found(jobs):
    for args in (["show", "nope"], ["status", "nope"], ["logs", "nope"], ["rm", "nope"]):
        result = forge("jobs", *args)
        assert result.returncode == 7, (args, result.stderr)
        assert result.stderr.startswith("error: no job 'nope'")


def test_status_prints_status_and_exit_code(jobs):
    add(jobs, "exp-20261129-120000-aaaa")
    result = forge("jobs", "status", "exp-20261129-120000")
    assert result.returncode == 0 and result.stdout.strip() == "exp-20261129-120000-aaaa: succeeded (exit 0)"
    data = json.loads(forge("jobs", "status", "exp-20261129-120000-aaaa", "--json").stdout)
    assert data == {"id": "exp-20261129-120000-aaaa", "status": "succeeded", "exit_code": 0}


def test_rm_deletes_records_and_job_directories_but_refuses_a_live_job(jobs, tmp_path):
    job_dir = tmp_path / "exp" / ".forge" / "jobs" / "exp-1"
    job_dir.mkdir(parents=True)
    (job_dir / "jobspec.json").write_text("{}")
    add(jobs, "exp-1", job_dir=job_dir)
    add(jobs, "exp-2")
    add(jobs, "exp-3", status="running")
    refused = forge("jobs", "rm", "exp-1", "exp-3")
    assert refused.returncode == 2 and "job exp-3 is running" in refused.stderr and "forge jobs cancel exp-3" in refused.stderr
    assert job_dir.is_dir() and (jobs.root / "exp-1.json").exists()  # nothing deleted
    done = forge("jobs", "rm", "exp-1", "exp-2", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == ["exp-1", "exp-2"]
    assert not job_dir.exists()
    assert [r.id for r in jobs.list()] == ["exp-3"]


def test_prune_deletes_ended_jobs_older_than_the_age(jobs):
    add(jobs, "old-1", created="2020-01-01T00:00:00Z")
    add(jobs, "old-running", created="2020-01-01T00:00:00Z", status="running")
    from starforge.cluster.utctime import utc_now

    add(jobs, "new-1", created=utc_now())
    dry = forge("jobs", "prune", "--older-than", "7d", "--dry-run")
    assert dry.stdout.strip() == "would remove old-1" and len(jobs.list()) == 3
    result = forge("jobs", "prune", "--older-than", "12h")
    assert result.returncode == 0 and result.stdout.strip() == "removed old-1"
    assert sorted(r.id for r in jobs.list()) == ["new-1", "old-running"]
    bad = forge("jobs", "prune", "--older-than", "soon")
    assert bad.returncode == 2 and "'soon' is not an age" in bad.stderr and "7d" in bad.stderr


def test_show_lists_each_patch_once_with_its_status(jobs, tmp_path):
    job_dir = tmp_path / "exp-1"
    (job_dir / "provenance").mkdir(parents=True)
    patch = {"target": "toy_grpo.adv:compute", "plugin": "alice/opsd-patch", "mode": "wrap", "function": "f"}
    for role, pid, status in (("launcher", 1, "pending"), ("trainer", 2, "applied")):
        record = {"role": role, "host": "h", "pid": pid, "attempt": 0, "plugins": [], "patches": [{**patch, "status": status}]}
        (job_dir / "provenance" / f"h-{pid}-0.json").write_text(json.dumps(record))
    add(jobs, "exp-1", job_dir=job_dir)
    out = forge("jobs", "show", "exp-1").stdout
    patch_lines = [line for line in out.splitlines() if "toy_grpo.adv:compute" in line]
    assert len(patch_lines) == 1, out
    assert patch_lines[0].split()[:3] == ["applied", "wrap", "alice/opsd-patch"]
    assert "STATUS" in out
    # --json holds the same one row, with what each process saw
    (row,) = json.loads(forge("jobs", "show", "exp-1", "--json").stdout)["provenance"]["patches"]
    assert (row["status"], row["mode"], row["plugin"], row["target"]) == ("applied", "wrap", "alice/opsd-patch", "toy_grpo.adv:compute")
    assert row["processes"] == 2 and row["statuses"] == {"pending": 1, "applied": 1}


def test_a_job_whose_directory_is_gone_says_so(jobs, tmp_path):
    job_dir = tmp_path / "exp-gone"
    add(jobs, "exp-gone", job_dir=job_dir)  # never created: deleted by hand
    for command in ("show", "logs"):
        result = forge("jobs", command, "exp-gone")
        assert result.returncode == 7, result.stderr
        assert result.stderr.splitlines()[0] == f"error: job exp-gone: its directory {job_dir} is gone (deleted outside forge)"
        assert "forge jobs rm exp-gone" in result.stderr and "forge jobs prune --gone" in result.stderr
    assert forge("jobs", "status", "exp-gone").returncode == 0  # the record itself still reads


def test_prune_gone_drops_only_records_whose_directory_is_gone(jobs, tmp_path):
    from starforge.cluster.utctime import utc_now

    kept_dir = tmp_path / "exp-here"
    kept_dir.mkdir()
    add(jobs, "exp-here", job_dir=kept_dir, created=utc_now())
    add(jobs, "exp-gone", job_dir=tmp_path / "nowhere", created=utc_now())
    by_age = forge("jobs", "prune", "--older-than", "7d")
    assert by_age.returncode == 0 and "1 job kept whose directory is gone: forge jobs prune --gone" in by_age.stderr
    dry = forge("jobs", "prune", "--gone", "--dry-run")
    assert dry.stdout.strip() == "would remove exp-gone" and len(jobs.list()) == 2
    done = forge("jobs", "prune", "--gone", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == ["exp-gone"]
    assert [r.id for r in jobs.list()] == ["exp-here"] and kept_dir.is_dir()
    nothing = forge("jobs", "prune")
    assert nothing.returncode == 2 and "--older-than AGE, --gone" in nothing.stderr


def test_a_truncated_record_is_listed_as_unreadable_with_its_path_and_rm_removes_it(jobs):
    add(jobs, "exp-20261129-120000-good")
    whole = (jobs.root / "exp-20261129-120000-good.json").read_text()
    truncated = jobs.root / "exp-20261129-120100-half.json"
    truncated.write_text(whole[: len(whole) // 2])  # a disk that filled up, a copy cut short
    wrong_shape = jobs.root / "exp-20261129-120200-list.json"
    wrong_shape.write_text("[1, 2]\n")
    text = forge("jobs", "list")
    assert text.returncode == 0
    rows = {line.split()[0]: line.split() for line in text.stdout.splitlines()[1:]}
    assert set(rows) == {"exp-20261129-120000-good", "exp-20261129-120100-half", "exp-20261129-120200-list"}
    assert rows["exp-20261129-120100-half"][1] == "unreadable" and rows["exp-20261129-120100-half"][-1] == str(truncated)
    assert f"warning: job record {truncated} is unreadable" in text.stderr
    assert "forge jobs rm exp-20261129-120100-half removes it" in text.stderr
    assert f"warning: job record {wrong_shape} is unreadable (not a job record" in text.stderr
    quiet = run_forge("-q", "jobs", "list", "--json", env=os.environ.copy())  # damage is said even with -q
    listed = {row["id"]: row for row in json.loads(quiet.stdout)}
    assert listed["exp-20261129-120100-half"]["status"] == "unreadable"
    assert listed["exp-20261129-120100-half"]["record"] == str(truncated)
    assert set(listed["exp-20261129-120100-half"]) >= set(listed["exp-20261129-120000-good"])
    assert str(truncated) in quiet.stderr
    shown = forge("jobs", "show", "exp-20261129-120100-half")
    assert shown.returncode == 16 and "forge jobs rm exp-20261129-120100-half" in shown.stderr
    removed = forge("jobs", "rm", "exp-20261129-120100", "exp-20261129-120200-list", "--json")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout) == ["exp-20261129-120100-half", "exp-20261129-120200-list"]
    assert not truncated.exists() and not wrong_shape.exists()
    after = forge("jobs", "list")
    assert after.stderr == "" and [line.split()[0] for line in after.stdout.splitlines()[1:]] == ["exp-20261129-120000-good"]
