"""``run_or_exit`` / ``die``: a plugin failure in a job process ends it with the phase's code, said and recorded."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent(
    """
    import json, sys
    from starforge.cluster.errors import ForgeError, InstallError, LaunchFailure, RequirementError
    from starforge.cluster.exits import die, run_or_exit

    class Job:
        failure = None
        def __init__(self, path):
            self.path = path
        def write_provenance(self):
            with open(self.path, "w") as f:
                json.dump(self.failure.to_dict(), f)
            return self.path

    job = Job(sys.argv[1])
    """
)


def run(tmp_path, body: str) -> tuple[subprocess.CompletedProcess, object]:
    record = tmp_path / "provenance.json"
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(record)],
                          capture_output=True, text=True, timeout=60)
    return proc, (json.loads(record.read_text()) if record.exists() else None)


def test_a_launch_failure_ends_the_process_with_its_code_and_is_recorded(tmp_path):
    proc, record = run(tmp_path, """
        def act():
            raise LaunchFailure(RequirementError, "alice/p@1.0.0", "alice/p@1.0.0 requires python >=9", "Traceback: here\\n")
        run_or_exit(job, act)
        print("not reached")
    """)
    assert proc.returncode == 11
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("forge: process ") and lines[0].endswith(" stops the job: alice/p@1.0.0 requires python >=9")
    assert lines[1:] == ["Traceback: here"]
    assert record == {"phase": "requires", "code": 11, "plugin": "alice/p@1.0.0", "message": "alice/p@1.0.0 requires python >=9"}


def test_a_forge_error_becomes_the_failure_of_its_class(tmp_path):
    proc, record = run(tmp_path, """
        def act():
            raise InstallError("install hook of alice/p@1.0.0 raised ValueError")
        run_or_exit(job, act)
    """)
    assert proc.returncode == 13
    assert "stops the job: install hook of alice/p@1.0.0 raised ValueError" in proc.stderr
    assert record == {"phase": "install", "code": 13, "plugin": None, "message": "install hook of alice/p@1.0.0 raised ValueError"}


def test_success_returns_and_the_process_goes_on(tmp_path):
    proc, record = run(tmp_path, """
        run_or_exit(job, lambda: print("acted"))
        print("went on")
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["acted", "went on"]
    assert record is None


@pytest.mark.parametrize("body", [
    "raise KeyError('not ours')",
    "raise SystemExit(3)",
])
def test_other_exceptions_are_not_swallowed(tmp_path, body):
    proc, record = run(tmp_path, f"""
        def act():
            {body}
        run_or_exit(job, act)
    """)
    assert proc.returncode in (1, 3)
    assert "stops the job" not in proc.stderr
    assert record is None


def test_without_a_job_the_process_still_ends_with_the_code(tmp_path):
    proc, record = run(tmp_path, """
        die(None, LaunchFailure.entrypoint(137, "the entrypoint was killed"))
    """)
    assert proc.returncode == 137
    assert proc.stderr.rstrip().endswith("stops the job: the entrypoint was killed")
    assert record is None


def test_the_code_is_kept_when_writing_the_record_fails(tmp_path):
    proc, record = run(tmp_path, """
        def broken():
            raise OSError("disk full")
        job.write_provenance = broken
        die(job, LaunchFailure(RequirementError, None, "unmet"))
    """)
    assert proc.returncode == 11
    assert "stops the job: unmet" in proc.stderr
