"""The suite's own TMPDIR: every job a test starts gets it, and the run fails when a job's
code directory (forge-code-*) is left there at the end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LEAKS = '''
import json
import os

def test_a_job_that_leaves_its_code_directory():
    path = os.path.join(os.environ["TMPDIR"], "forge-code-leftover")
    os.mkdir(path)
    with open(os.path.join(path, "forge-code.json"), "w") as f:
        json.dump({"pid": 2 ** 22 + 7, "job_dir": "/jobs/killed"}, f)  # no such process: killed, never cleaned


def test_a_job_still_running_at_the_end():
    path = os.path.join(os.environ["TMPDIR"], "forge-code-running")
    os.mkdir(path)
    with open(os.path.join(path, "forge-code.json"), "w") as f:
        json.dump({"pid": os.getppid(), "job_dir": "/jobs/running"}, f)  # a live process

def test_pytests_own_temp_folder_is_the_machines(tmp_path):
    assert not str(tmp_path).startswith(os.environ["TMPDIR"])
'''


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_job.py").write_text(body)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "FORGE_", "STARFORGE_"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-n", "0", "--rootdir", str(suite), str(suite)],
                          cwd=suite, env=env, capture_output=True, text=True, timeout=300)


def test_a_left_code_directory_fails_the_run(tmp_path):
    proc = _run(tmp_path, LEAKS)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "3 passed" in proc.stdout
    assert "error: the run left 1 job code directories in its TMPDIR" in proc.stdout
    assert "forge-code-leftover (/jobs/killed)" in proc.stdout
    assert "warning: 1 jobs still run at the end of the run" in proc.stdout and "forge-code-running (/jobs/running)" in proc.stdout


def test_a_clean_run_passes(tmp_path):
    proc = _run(tmp_path, LEAKS.replace('"pid": 2 ** 22 + 7', '"pid": os.getppid()'))
    assert proc.returncode == 0, proc.stdout[-3000:]
