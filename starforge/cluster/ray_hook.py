"""Ray's ``worker_process_setup_hook`` for forge jobs.

A backend names the hook in dotted form (Ray refuses ``module:function``)::

    from starforge.launch import RAY_SETUP_HOOK, bootstrap_env
    runtime_env = {"working_dir": job_dir,
                   "worker_process_setup_hook": RAY_SETUP_HOOK,
                   "env_vars": bootstrap_env(job_dir, relative=True)}

In each Ray worker process :func:`setup` bootstraps the job's plugins (the work the
``sitecustomize`` bootstrap does; idempotent, so a worker that already ran it pays nothing)
and then calls the hook the training entrypoint gave ``ray.init`` itself (chained by
:mod:`.ray_init`).

Standard library only (``ray`` only inside Ray processes); importable from the job's
runtime zip.
"""

from __future__ import annotations

import importlib
import os
import sys

from .environment import runtime_paths
from .jobdir_layout import SPEC_FILE
from .process_job import boot_process
from .ray_init import CHAINED_HOOK_ENV, CHAINED_PICKLED_ENV, SETUP_HOOK


def setup() -> None:
    """Bootstrap the forge plugins in this Ray worker, then run the chained hook."""
    _locate_job()
    job = boot_process("ray-setup-hook")
    if job is not None:
        job.write_provenance()  # again now that this process is a Ray worker: its Ray ids
    chained = os.environ.get(CHAINED_HOOK_ENV, "")
    pickled = os.environ.get(CHAINED_PICKLED_ENV, "")
    if chained and chained != SETUP_HOOK:
        module_name, _, func_name = chained.rpartition(".")
        getattr(importlib.import_module(module_name), func_name)()
    elif pickled:
        import base64

        from ray import cloudpickle  # only reached inside a Ray worker

        cloudpickle.loads(base64.b64decode(pickled))()


def _locate_job() -> None:
    # Ray unpacks the job directory (working_dir) at another path on every node and starts
    # workers inside it: relative FORGE_* paths, or absolute ones that do not exist here,
    # are resolved against the worker's working directory.
    spec = os.environ.get("FORGE_JOBSPEC", "")
    if spec and os.path.isabs(spec) and os.path.exists(spec):
        return
    if not spec and not os.path.exists(SPEC_FILE):
        return
    job_dir = os.environ.get("FORGE_JOB_DIR", "")
    if not job_dir or not os.path.isabs(job_dir) or not os.path.isdir(job_dir):
        job_dir = os.getcwd()
    os.environ["FORGE_JOB_DIR"] = job_dir
    os.environ["FORGE_JOBSPEC"] = os.path.join(job_dir, SPEC_FILE)
    paths = runtime_paths(job_dir)
    os.environ["FORGE_HYPERPARAMS"] = paths["hyperparams"]
    os.environ["FORGE_RUNTIME"] = paths["zip"]
    if paths["zip"] not in sys.path:
        sys.path.append(paths["zip"])
