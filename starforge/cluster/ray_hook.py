"""Ray's ``worker_process_setup_hook`` for forge jobs, and chaining to the entrypoint's own.

A backend names the hook in dotted form (Ray refuses ``module:function``)::

    from starforge.launch import RAY_SETUP_HOOK, bootstrap_env
    runtime_env = {"working_dir": job_dir,
                   "worker_process_setup_hook": RAY_SETUP_HOOK,
                   "env_vars": bootstrap_env(job_dir, relative=True)}

In each Ray worker process :func:`setup` bootstraps the job's plugins (the work the
``sitecustomize`` bootstrap does; idempotent, so a worker that already ran it pays nothing)
and then calls the hook the training entrypoint gave ``ray.init`` itself.

Ray refuses a driver ``runtime_env`` that repeats a field of the job's (two setup hooks
conflict), so the launcher wraps ``ray.init`` when the entrypoint imports ``ray``
(:func:`watch_ray_init`): the entrypoint's hook is moved into the env var
``FORGE_RAY_CHAINED_HOOK`` (a dotted name) or ``FORGE_RAY_CHAINED_HOOK_PICKLED`` (a
callable, pickled with ``ray.cloudpickle``), and ours takes its place when the job does
not already carry it (:func:`job_setup_hook`: the job's runtime_env that Ray passes to the
driver in ``RAY_JOB_CONFIG_JSON_ENV_VAR``).

Cluster side: standard library only (``ray`` only inside Ray processes); importable from
the job's runtime zip.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading

from .import_hooks import PostImportLoader, spec_from_other_finders

CHAINED_HOOK_ENV = "FORGE_RAY_CHAINED_HOOK"
CHAINED_PICKLED_ENV = "FORGE_RAY_CHAINED_HOOK_PICKLED"
# Where Ray keeps the job's setup hook in a *worker* process (never set in the driver).
RAY_HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
# The job's config (runtime_env, metadata) as JSON, set by Ray's job supervisor for the
# entrypoint (driver) process of a submitted job; ``ray.init`` merges it with its own.
RAY_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
SETUP_HOOK = f"{__name__}.setup"
FORWARDED = ("FORGE_JOBSPEC", "FORGE_JOB_DIR", "FORGE_JOB_ID", "FORGE_HYPERPARAMS", "FORGE_RUNTIME", "FORGE_ATTEMPT", "PYTHONPATH")


def watch_ray_init() -> None:
    """Wrap ``ray.init`` (now, or when ``ray`` is first imported) to chain setup hooks."""
    module = sys.modules.get("ray")
    if module is not None:
        _wrap_init(module)
        return
    if not any(isinstance(f, _RayWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _RayWatcher())


def _wrap_init(ray) -> None:
    import functools

    original = getattr(ray, "init", None)
    if original is None or getattr(original, "_forge_chained", False):
        return

    @functools.wraps(original)
    def init(*args, **kwargs):
        kwargs["runtime_env"] = chain_runtime_env(kwargs.get("runtime_env"))
        return original(*args, **kwargs)

    init._forge_chained = True  # type: ignore[attr-defined]
    ray.init = init


class _RayWatcher:
    """A meta-path finder that wraps ``ray.init`` once ``ray`` has been imported."""

    def __init__(self) -> None:
        self.local = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "ray" or getattr(self.local, "busy", False):
            return None
        spec = spec_from_other_finders(self, fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec.loader = PostImportLoader(spec.loader, lambda name: _wrap_init(sys.modules[name]))
        return spec


def setup() -> None:
    """Bootstrap the forge plugins in this Ray worker, then run the chained hook."""
    _locate_job()
    from .process import boot_process

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


def chain_runtime_env(runtime_env, environ=None) -> dict:
    """The ``runtime_env`` the entrypoint gave ``ray.init``, with our hook chained in front.

    >>> chain_runtime_env({"worker_process_setup_hook": "mylib.setup"}, {})["env_vars"]
    {'FORGE_RAY_CHAINED_HOOK': 'mylib.setup'}
    """
    environ = os.environ if environ is None else environ
    env = dict(runtime_env or {})
    env_vars = dict(env.get("env_vars") or {})
    user = env.pop("worker_process_setup_hook", None)
    if user is not None and user != SETUP_HOOK:
        if isinstance(user, str):
            env_vars[CHAINED_HOOK_ENV] = user
        elif callable(user):
            import base64

            from ray import cloudpickle

            env_vars[CHAINED_PICKLED_ENV] = base64.b64encode(cloudpickle.dumps(user)).decode("ascii")
        else:
            raise TypeError(f"worker_process_setup_hook must be a function or a dotted name, got {type(user).__name__}")
    if job_setup_hook(environ) != SETUP_HOOK:
        # The job was not submitted with our hook (a driver starting its own Ray, say):
        # the driver's runtime_env carries it, with the job environment.
        env["worker_process_setup_hook"] = SETUP_HOOK
        for key in FORWARDED:
            if key in environ and key not in env_vars:
                env_vars[key] = environ[key]
    if env_vars:
        env["env_vars"] = env_vars
    return env


def job_setup_hook(environ=None):
    """The ``worker_process_setup_hook`` the Ray job itself carries, as this process sees it.

    In the driver of a submitted job, Ray's job supervisor passes the job's runtime_env as
    JSON in ``RAY_JOB_CONFIG_JSON_ENV_VAR`` (its ``worker_process_setup_hook`` field, or the
    hook variable among its ``env_vars``); in a worker process Ray sets
    ``__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR``. None when the job carries no hook (a driver
    that starts or joins Ray without a job submission).
    """
    environ = os.environ if environ is None else environ
    raw = environ.get(RAY_JOB_CONFIG_ENV)
    if raw:
        import json

        try:
            config = json.loads(raw)
        except ValueError:
            config = None
        runtime_env = config.get("runtime_env") if isinstance(config, dict) else None
        if isinstance(runtime_env, dict):
            hook = runtime_env.get("worker_process_setup_hook")
            env_vars = runtime_env.get("env_vars")
            if hook is None and isinstance(env_vars, dict):
                hook = env_vars.get(RAY_HOOK_ENV)
            if hook is not None:
                return hook
    return environ.get(RAY_HOOK_ENV)


def _locate_job() -> None:
    # Ray unpacks the job directory (working_dir) at another path on every node and starts
    # workers inside it: relative FORGE_* paths, or absolute ones that do not exist here,
    # are resolved against the worker's working directory.
    spec = os.environ.get("FORGE_JOBSPEC", "")
    if spec and os.path.isabs(spec) and os.path.exists(spec):
        return
    if not spec and not os.path.exists("jobspec.json"):
        return
    job_dir = os.environ.get("FORGE_JOB_DIR", "")
    if not job_dir or not os.path.isabs(job_dir) or not os.path.isdir(job_dir):
        job_dir = os.getcwd()
    os.environ["FORGE_JOB_DIR"] = job_dir
    os.environ["FORGE_JOBSPEC"] = os.path.join(job_dir, "jobspec.json")
    from .environment import runtime_paths

    paths = runtime_paths(job_dir)
    os.environ["FORGE_HYPERPARAMS"] = paths["hyperparams"]
    os.environ["FORGE_RUNTIME"] = paths["zip"]
    if paths["zip"] not in sys.path:
        sys.path.append(paths["zip"])
