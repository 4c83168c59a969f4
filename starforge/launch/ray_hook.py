"""Ray's ``worker_process_setup_hook`` for forge jobs.

Name it in dotted form (Ray refuses ``module:function``)::

    runtime_env = {"worker_process_setup_hook": starforge.launch.RAY_SETUP_HOOK,
                   "env_vars": starforge.launch.bootstrap_env(job_dir, relative=True)}

In each Ray worker process :func:`setup` bootstraps the job's plugins (the same work the
``sitecustomize`` bootstrap does; idempotent, so a worker that already ran it pays nothing)
and then calls the hook the training entrypoint passed to ``ray.init`` itself, named by
``FORGE_RAY_CHAINED_HOOK`` (dotted ``module.function``).

Cluster side: standard library only; importable from the job's runtime zip.
"""

from __future__ import annotations

import importlib
import os

CHAINED_HOOK_ENV = "FORGE_RAY_CHAINED_HOOK"


def setup() -> None:
    """Bootstrap the forge plugins in this Ray worker, then run the chained hook."""
    _locate_job()
    from . import runtime

    runtime.boot_process("ray-setup-hook")
    chained = os.environ.get(CHAINED_HOOK_ENV, "")
    if chained and chained != f"{__name__}.setup":
        module_name, _, func_name = chained.rpartition(".")
        func = getattr(importlib.import_module(module_name), func_name)
        func()


def _locate_job() -> None:
    # Ray unpacks the job directory (working_dir) at another path on every node: relative
    # FORGE_* paths are resolved against the worker's working directory.
    spec = os.environ.get("FORGE_JOBSPEC")
    if spec and not os.path.isabs(spec):
        job_dir = os.path.abspath(os.environ.get("FORGE_JOB_DIR") or ".")
        os.environ["FORGE_JOB_DIR"] = job_dir
        os.environ["FORGE_JOBSPEC"] = os.path.join(job_dir, spec) if not os.path.isabs(spec) else spec
        for key in ("FORGE_HYPERPARAMS", "FORGE_RUNTIME"):
            value = os.environ.get(key)
            if value and not os.path.isabs(value):
                os.environ[key] = os.path.join(job_dir, value)
    elif not spec and os.path.exists("jobspec.json"):
        os.environ["FORGE_JOBSPEC"] = os.path.abspath("jobspec.json")
        os.environ.setdefault("FORGE_JOB_DIR", os.path.abspath("."))
