"""This process's job: at most one per process, made by the launcher or the bootstrap.

:func:`boot_process` is what the ``sitecustomize`` bootstrap and the Ray setup hook call
in every process of the job; :func:`load_job` is the launcher's. Standard library only.
"""

from __future__ import annotations

import os
import sys
import threading

from . import hyperparams_and_deferred
from .errors import LaunchFailure, SpecError, VerificationError
from .exits import die, run_or_exit
from .interpreter import same_interpreter
from .job import Job
from .jobdir_layout import RECIPE_DIR
from .jobspec import SPEC_SHA256_ENV, read_spec
from .ray_init import watch_ray_init
from .recipe_imports import install_recipe_finder

_job: Job | None = None
_boot_lock = threading.RLock()


def current_job() -> Job | None:
    return _job


def load_job(job_dir: str, spec_path: str, role: str) -> Job:
    """Read the spec and make *this process's* Job (replacing none: one job per process)."""
    global _job
    with _boot_lock:
        if _job is not None:
            return _job
        # Before its per-file map is trusted, the JobSpec must be the one the job was
        # submitted with (SPEC §9 "Binding"): the hash came over the backend's channel.
        try:
            spec = read_spec(spec_path, os.environ.get(SPEC_SHA256_ENV))
        except VerificationError as exc:
            raise LaunchFailure(VerificationError, None, str(exc)) from None
        _job = Job(os.path.abspath(job_dir), os.path.abspath(spec_path), spec, role)
        return _job


def boot_process(reason: str = "start-up") -> Job | None:
    """Bootstrap this process from the job environment (``FORGE_JOBSPEC``); idempotent.

    A process of another interpreter than the job's Python (``FORGE_PYTHON``, when
    known) is left alone unless it imports a declared target (:meth:`Job.boot`).

    Returns the Job, or None when the process is not part of a job. Never returns after a
    failure: the process ends with the exit code of the failed phase.
    """
    global _job
    with _boot_lock:
        if _job is not None:
            return _job
        spec_path = os.environ.get("FORGE_JOBSPEC")
        if not spec_path:
            return None
        job_dir = os.environ.get("FORGE_JOB_DIR") or os.path.dirname(os.path.abspath(spec_path))
        _absolute_job_env(os.environ)
        job: Job | None = None
        try:
            job = load_job(job_dir, spec_path, "worker")
        except LaunchFailure as failure:
            die(None, failure)
        except SpecError as exc:
            die(None, LaunchFailure(SpecError, None, f"{spec_path}: {exc}"))
        assert job is not None
        # the recipe's own modules come from the staged recipe, never from the working directory
        install_recipe_finder(os.path.join(job_dir, RECIPE_DIR))
        hyperparams_and_deferred.registry.booted = True
        if os.environ.get("FORGE_DISABLE") == "1":
            job.disabled = True
            hyperparams_and_deferred.registry.disabled = True
            for item in job.items:
                if item.status == "planned":
                    item.status = "disabled"
        else:
            job_python = os.environ.get("FORGE_PYTHON")
            other = bool(job_python) and not same_interpreter(sys.executable, job_python)
            run_or_exit(job, lambda: job.boot(reason, other))
        # Ray workers this process starts carry the job's plugins (its own opt-out is its own)
        watch_ray_init()
        # Written now (a worker may be killed, skipping atexit) and again at exit.
        job.write_provenance()
        import atexit

        atexit.register(job.write_provenance)
        return job


def _absolute_job_env(env) -> None:
    """Make relative job paths (Ray's working_dir form) absolute for this process's children.

    They were relative to the working directory this process started in; a child started
    from another directory must still find the job.
    """
    for key in ("FORGE_JOBSPEC", "FORGE_JOB_DIR", "FORGE_HYPERPARAMS", "FORGE_RUNTIME"):
        value = env.get(key)
        if value and not os.path.isabs(value):
            env[key] = os.path.abspath(value)
    job_dir = env.get("FORGE_JOB_DIR")
    if job_dir and env.get("PYTHONPATH"):
        parts = env["PYTHONPATH"].split(os.pathsep)
        fixed = [
            os.path.abspath(p) if p and not os.path.isabs(p) and os.path.abspath(p).startswith(job_dir + os.sep) else p
            for p in parts
        ]
        if fixed != parts:
            env["PYTHONPATH"] = os.pathsep.join(fixed)
