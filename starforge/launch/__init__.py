"""forge-launch: verify, check, import and install a job's plugins, then run its entrypoint.

Public helpers for backends:

- :func:`bootstrap_env` — the environment variables every process of a job needs;
- :data:`RAY_SETUP_HOOK` — the dotted name for Ray's ``runtime_env.worker_process_setup_hook``.

The launcher itself lives on the cluster side, in :mod:`starforge.cluster`; this module
and ``python -m starforge.launch`` are its public names (SPEC §1).
"""

from __future__ import annotations

import os

RAY_SETUP_HOOK = "starforge.cluster.ray_hook.setup"

__all__ = ["RAY_SETUP_HOOK", "bootstrap_env", "main"]


def bootstrap_env(job_dir: str | os.PathLike, *, relative: bool = False) -> dict:
    """Environment variables a backend sets for processes it starts outside the launcher.

    Writes the job's bootstrap runtime (``.forge-runtime/``) when missing or stale and
    returns ``FORGE_JOBSPEC``, ``FORGE_JOB_DIR``, ``FORGE_JOB_ID``, ``FORGE_HYPERPARAMS``,
    ``FORGE_RUNTIME`` and ``PYTHONPATH`` (the bootstrap directory and the job's ``recipe/``;
    prepend them to any PYTHONPATH of your own). With ``relative=True`` the paths are relative to the job
    directory, for backends that unpack it elsewhere and start workers inside it (Ray's
    working_dir).

    >>> env = bootstrap_env("/jobs/j1")          # doctest: +SKIP
    >>> env["PYTHONPATH"]                        # doctest: +SKIP
    '/jobs/j1/.forge-runtime/bootstrap'
    """
    from ..cluster.environment import job_environment, prepare_runtime
    from ..cluster.jobdir_layout import RECIPE_DIR, SPEC_FILE
    from ..cluster.jobspec import read_spec

    job_dir = os.path.abspath(os.fspath(job_dir))
    spec_path = os.path.join(job_dir, SPEC_FILE)
    spec = read_spec(spec_path)
    prepare_runtime(job_dir, spec.hyperparams)
    env = job_environment(job_dir, spec_path, spec.id)
    # Processes a backend starts itself (Ray workers) run whatever interpreter the node
    # gives them. The job's Python is known here only when the job names it by an absolute
    # path (forge.yaml python, or the entrypoint's interpreter); then the bootstrap leaves
    # other interpreters alone, as the launcher's children do. Otherwise it acts in all.
    from ..cluster.interpreter import resolve_job_python

    declared, how = resolve_job_python(spec.python, spec.entrypoint, os.path.join(job_dir, RECIPE_DIR), "")
    if how != "default" and os.path.isabs(declared) and "$" not in (spec.python or ""):
        env["FORGE_PYTHON"] = declared
    else:
        env.pop("FORGE_PYTHON", None)
    if relative:
        for key in ("FORGE_JOBSPEC", "FORGE_HYPERPARAMS", "FORGE_RUNTIME"):
            env[key] = os.path.relpath(env[key], job_dir)
        env["PYTHONPATH"] = os.pathsep.join(os.path.relpath(p, job_dir) for p in env["PYTHONPATH"].split(os.pathsep))
        env["FORGE_JOB_DIR"] = "."
    return env


def main(argv: list[str] | None = None) -> int:
    from ..cluster.launcher import main as _main

    return _main(argv)
