"""The Ray entrypoint command, run as Ray's job supervisor runs it: in the unpacked package,
under the node's ``python3`` (here one with nothing installed), with no Ray around.

The two-host and single-head Ray tests run it for real; these show what it does with the
runtime zip it was bound to, in one interpreter.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from launch_jobs import demo_plugin

from starforge.backends.ray import launcher_command
from starforge.cluster import runtime_zip
from starforge.jobs.binding import compute

ZIP = Path(".forge-runtime") / "starforge-runtime.zip"

TRAINER = """
import sys
from app import algo
print("compute(1) =", algo.compute(1))
print("argv:", sys.orig_argv[1])
sys.exit(3)
"""


def bound_command(job) -> str:
    """The job's runtime zip written, and the entrypoint bound to it and the JobSpec."""
    zip_path = job.dir / ZIP
    zip_path.parent.mkdir(parents=True)
    runtime_zip.write_runtime_zip(str(zip_path))
    return launcher_command(compute(job.dir))


def run(job, command: str, bare_python: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.path.dirname(bare_python) + ":/usr/bin:/bin", "FORGE_HOME": str(job.dir.parent / "forge-home")}
    return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env, cwd=str(job.dir), timeout=60)


def test_the_entrypoint_runs_the_bound_zip_and_the_job_in_the_interpreter_ray_started(builder, bare_python):
    job = builder.job(plugins=[demo_plugin()], trainer=TRAINER)
    result = run(job, bound_command(job), bare_python)
    assert result.returncode == 3, result.stderr  # the trainer's own exit code
    assert job.plugin_lines(result) == ["plugin  : alice/demo-patch@1.0.0 loaded"]
    assert "compute(1) = 20" in result.stdout
    # The interpreter Ray started ran the check, the launcher and the trainer: never
    # started again (an exec would have made `python3 ZIP …` its command line).
    assert "argv: -c" in result.stdout
    assert (job.status()["phase"], job.status()["code"]) == ("entrypoint", 3)


def test_a_zip_changed_after_it_was_bound_never_runs(builder, bare_python):
    job = builder.job(plugins=[demo_plugin()], trainer=TRAINER)
    command = bound_command(job)
    with open(job.dir / ZIP, "ab") as f:
        f.write(b"\0")  # still a zip that would run: its entry is found from the end
    result = run(job, command, bare_python)
    assert result.returncode == 10
    assert f"error: the job's runtime zip {ZIP} changed after staging: its sha256 is " in result.stderr
    assert "compute(1)" not in result.stdout and not job.plugin_lines(result)


def test_a_module_in_the_packages_root_is_not_imported_by_the_check(builder, bare_python):
    job = builder.job(plugins=[demo_plugin()], trainer=TRAINER)
    command = bound_command(job)
    # what `python3 -c` would import from its working directory first: the check's own imports
    (job.dir / "hashlib.py").write_text("print('PLANTED hashlib')\n")
    result = run(job, command, bare_python)
    assert result.returncode == 3, result.stderr
    assert "PLANTED" not in result.stdout + result.stderr
    assert "compute(1) = 20" in result.stdout
