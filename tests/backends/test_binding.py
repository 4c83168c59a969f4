"""Binding what was staged to what runs (SPEC §9 "Binding"), on every backend.

At staging the laptop computes the sha256 of the runtime zip and of jobspec.json; each
backend hands them to the job over its own channel (local: the launcher's arguments;
Slurm: the batch script slurmctld stores; Ray: the entrypoint and runtime_env fixed at
submission). A zip changed after staging never runs; a JobSpec changed after staging is
refused by the launcher, and by any process of the job that reads it later (exit 10).
Real local supervisor, real one-node Slurm, real loopback Ray.
"""

from __future__ import annotations

import io
import os
import sys
import zipfile
from pathlib import Path

import pytest

from starforge.backends.base import wait
from starforge.backends.local import LocalBackend
from starforge.backends.ray import RayBackend
from starforge.backends.slurm import SlurmBackend
from starforge.experiment.lock import open_experiment_registry
from starforge.experiment.stage import resolve_job_in, stage_job
from starforge.jobs.store import JobStore

BIN = Path(sys.executable).parent
BACKENDS = {"local": LocalBackend, "slurm": SlurmBackend, "ray": RayBackend}

# What a running trainer does to the job's jobspec.json (as anything that can write the
# staged directory could): the processes of the job started after it must refuse the changed spec.
TAMPER = '''\
spec = os.environ["FORGE_JOBSPEC"]
os.chmod(spec, 0o644)
with open(spec) as f:
    text = f.read()
with open(spec, "w") as f:
    f.write(text.replace('"patched"', '"evil"'))
'''

# A trainer that changes the spec, then starts a Python process of the job: that process
# must refuse the changed spec before trusting its per-file map.
TAMPER_THEN_SPAWN = '''\
import os
import subprocess
import sys

''' + TAMPER + '''\
child = subprocess.run([sys.executable, "-c", "from workload import algo; print(algo.tag())"], capture_output=True, text=True)
print("CHILD %d %s" % (child.returncode, " ".join((child.stdout + child.stderr).split())), flush=True)
'''

# The same inside a Ray job: the task's worker process is started after the change. A worker
# that refuses the job dies at start-up and Ray neither fails the task nor runs it anywhere
# else, so the task never ends: the driver stops waiting once a worker said it stops the job
# (Ray's raylet forwards that line to the driver's stderr, which the driver reads as it
# passes), or after 30 seconds.
RAY_TAMPER_THEN_TASK = '''\
import os
import re
import sys
import threading
import time

import ray

''' + TAMPER + '''\


@ray.remote(max_retries=0)
def task():
    from workload import algo

    return algo.tag()


class Refusals:
    """This process's stderr, noting the processes that said they stop the job."""

    def __init__(self, stream):
        self.stream, self.pids, self.seen = stream, set(), threading.Event()

    def write(self, text):
        self.pids.update(re.findall(r"process (\\d+) stops the job: the JobSpec", text))
        if self.pids:
            self.seen.set()
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


sys.stderr = refusals = Refusals(sys.stderr)
ray.init()
ref, deadline = task.remote(), time.monotonic() + 30
while not refusals.seen.is_set() and time.monotonic() < deadline and not ray.wait([ref], timeout=0.2)[0]:
    pass
try:
    print("TASK ok " + ray.get(ref, timeout=0), flush=True)
except Exception as exc:
    print("TASK failed " + type(exc).__name__ + " (refused by process %s)" % ", ".join(sorted(refusals.pids)), flush=True)
'''


@pytest.fixture
def on_backend(request, monkeypatch, tmp_path):
    """``(name, fixtures)`` for the backend under test, its engine started and configured."""
    name = request.param
    if name == "slurm":
        request.getfixturevalue("slurm_env")
        monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        monkeypatch.delenv("FORGE_SLURM_STAGING", raising=False)
    elif name == "ray":
        request.getfixturevalue("ray_client")
    return name


def _stage(make_experiment, backend_name: str, tmp_path: Path, entrypoint: str, files: dict | None = None):
    settings = {"staging": str(tmp_path / "shared")} if backend_name == "slurm" else None
    exp = make_experiment(entrypoint, backend_name, settings)
    for rel, text in (files or {}).items():
        (exp / rel).write_text(text)
    plan = resolve_job_in(exp, backend=backend_name)
    backend = BACKENDS[backend_name](plan.experiment.backend_settings(backend_name), JobStore(tmp_path / "jobs"))
    job_dir = backend.staging_dir(exp, plan.spec.id)
    staged = stage_job(plan, job_dir, open_experiment_registry(plan.experiment))
    return backend, staged, Path(job_dir)


def _after_staging(monkeypatch, backend_name: str, change) -> None:
    """Apply *change* to the staged job before the job reads it.

    Local and Slurm read the staged directory itself: change it now. Ray reads the package
    the laptop uploads at submit (after rewriting the job's runtime from its own install):
    change the directory just before it is packed, so the package differs from staging.
    """
    if backend_name != "ray":
        change()
        return
    from starforge.backends import ray

    original = ray.build_package

    def build_changed(job_dir):
        change()
        return original(job_dir)

    monkeypatch.setattr(ray, "build_package", build_changed)


def _run(backend, staged, job_dir: Path):
    chunks: list[str] = []
    record = wait(backend, backend.submit(staged, detach=False), chunks.append)
    return record, "".join(chunks)


# A job refused at start ends long before this; a job Ray cannot start (its own job
# supervisor dying at start-up) stays pending for minutes before Ray gives up on it.
RAY_BOUND = 180.0


def _run_bounded(backend, staged, job_dir: Path):
    """Submit and follow the job, as :func:`_run`, but stop waiting after :data:`RAY_BOUND` seconds."""
    import time

    record = backend.submit(staged, detach=True)
    deadline = time.monotonic() + RAY_BOUND
    while not record.final and time.monotonic() < deadline:
        time.sleep(0.25)
        record = backend.refresh(record)
    log = "".join(backend.logs(record))
    if not record.final:
        backend.cancel(record)
    return record, log


def _evil_zip(marker: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("__main__.py", f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\nprint('RESULTS evil')\n")
    return buf.getvalue()


def backends(*names):
    """Parametrize ``on_backend`` over *names*; each engine's parameter carries its marker
    (``ray``, ``slurm``), so the edit loop leaves the clusters out (tests/conftest.py)."""
    return pytest.mark.parametrize(
        "on_backend", [n if n == "local" else pytest.param(n, marks=getattr(pytest.mark, n)) for n in names], indirect=True
    )


ALL = backends("local", "slurm", "ray")


@ALL
def test_a_runtime_zip_changed_after_staging_never_runs(on_backend, make_experiment, tmp_path, monkeypatch):
    backend, staged, job_dir = _stage(make_experiment, on_backend, tmp_path, "python -m workload.train")
    marker = tmp_path / "evil-zip-ran"
    _after_staging(monkeypatch, on_backend, lambda: (job_dir / ".forge-runtime" / "starforge-runtime.zip").write_bytes(_evil_zip(marker)))

    record, log = _run(backend, staged, job_dir)
    assert (record.status, record.exit_code) == ("failed", 10), log
    assert "the job's runtime zip" in log and "changed after staging" in log, log
    assert not marker.exists() and "RESULTS" not in log


# On Ray the package's JobSpec is refused by the entrypoint, as elsewhere: Ray starts its
# own job supervisor actor with the job's runtime_env, and nothing of StarForge acts there
# (it used to: the supervisor refused the JobSpec and died at start-up, and Ray reported it
# unschedulable some seven minutes later, without exit 10). Bounded, so that comes back as
# a failure rather than a long wait.
@ALL
def test_a_jobspec_changed_after_staging_is_refused_by_the_launcher(on_backend, make_experiment, tmp_path, monkeypatch):
    entrypoint = "python -m workload.ray_train" if on_backend == "ray" else "python -m workload.train"
    backend, staged, job_dir = _stage(make_experiment, on_backend, tmp_path, entrypoint)
    spec = job_dir / "jobspec.json"

    def inject() -> None:  # an injected hyperparameter, per-file map untouched: no digest sees it
        spec.chmod(0o644)
        spec.write_text(spec.read_text().replace('"patched"', '"evil"'))

    _after_staging(monkeypatch, on_backend, inject)

    record, log = (_run_bounded if on_backend == "ray" else _run)(backend, staged, job_dir)
    assert (record.status, record.exit_code) == ("failed", 10), (record, log)
    assert "error: the JobSpec" in log and "changed after staging" in log, log
    assert "RESULTS" not in log and "evil:" not in log
    if on_backend == "ray":
        assert "supervisor" not in record.message, record.message
        shown = backend.refresh(backend.store.get(record.id))  # what `forge jobs show` reads
        assert (shown.status, shown.exit_code) == ("failed", 10)


@backends("ray")
def test_a_file_planted_in_the_package_is_refused_by_the_entrypoint(on_backend, make_experiment, tmp_path, monkeypatch):
    # A changed listing stopped Ray's job supervisor at start-up the same way.
    backend, staged, job_dir = _stage(make_experiment, on_backend, tmp_path, "python -m workload.ray_train")
    folder = job_dir / "forge_plugins" / "mark-worker"

    def plant() -> None:
        folder.chmod(0o755)
        (folder / "planted.py").write_text("print('planted')\n")

    _after_staging(monkeypatch, on_backend, plant)

    record, log = _run_bounded(backend, staged, job_dir)
    assert (record.status, record.exit_code) == ("failed", 10), (record, log)
    assert "planted.py" in log and "RESULTS" not in log, log


@backends("local", "slurm")
def test_a_jobspec_changed_after_launch_is_refused_by_a_new_process(on_backend, make_experiment, tmp_path):
    backend, staged, job_dir = _stage(
        make_experiment, on_backend, tmp_path, "python -m workload.tamper", {"workload/tamper.py": TAMPER_THEN_SPAWN}
    )
    record, log = _run(backend, staged, job_dir)
    assert (record.status, record.exit_code) == ("succeeded", 0), log  # the trainer itself carried on
    [child] = [line for line in log.splitlines() if line.startswith("CHILD ")]
    assert child.startswith("CHILD 10 ") and "the JobSpec" in child and "changed after staging" in child, child
    assert "evil:" not in child


@backends("ray")
def test_a_jobspec_changed_after_launch_is_refused_by_a_ray_worker(on_backend, make_experiment, tmp_path):
    backend, staged, job_dir = _stage(
        make_experiment, on_backend, tmp_path, "python -m workload.ray_tamper", {"workload/ray_tamper.py": RAY_TAMPER_THEN_TASK}
    )
    record, log = _run(backend, staged, job_dir)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    [task] = [line for line in log.splitlines() if line.startswith("TASK ")]
    # Without the binding the task ran, patched with the injected label ("TASK ok evil:…").
    assert task.startswith("TASK failed"), task  # no worker ran it for the changed JobSpec
    # ... because a worker refused it (Ray forwards the worker's line to the driver's log), not
    # because the wait ended before any worker started.
    assert any("stops the job: the JobSpec jobspec.json changed after staging" in line for line in log.splitlines()), log


def test_the_launcher_refuses_a_malformed_binding(tmp_path):
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "starforge.launch", "--spec", str(tmp_path / "jobspec.json"), "--spec-sha256", "abc"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2 and "--spec-sha256 needs a sha256" in proc.stderr
