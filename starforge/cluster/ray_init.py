"""Ray's ``ray.init`` in a forge job: our worker setup hook chained with the entrypoint's own.

Ray refuses a driver ``runtime_env`` that repeats a field of the job's (two setup hooks
conflict), so every process of the job wraps ``ray.init`` when it imports ``ray``
(:func:`watch_ray_init`): the entrypoint's hook is moved into the env var
``FORGE_RAY_CHAINED_HOOK`` (a dotted name) or ``FORGE_RAY_CHAINED_HOOK_PICKLED`` (a
callable, pickled with ``ray.cloudpickle``), and ours (:data:`SETUP_HOOK`, see
:mod:`.ray_hook`) takes its place when the job does not already carry it
(:func:`job_setup_hook`: the job's runtime_env that Ray passes to the driver in
``RAY_JOB_CONFIG_JSON_ENV_VAR``).

Standard library only (``ray`` only inside Ray processes, never imported here).
"""

from __future__ import annotations

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
SETUP_HOOK = "starforge.cluster.ray_hook.setup"  # :func:`.ray_hook.setup`
# FORGE_CODE_DIR: Ray workers on the driver's node use the job's code directory (after the
# bootstrap's checks); on other nodes it does not exist and they import from the zip.
FORWARDED = ("FORGE_JOBSPEC", "FORGE_JOB_DIR", "FORGE_JOB_ID", "FORGE_HYPERPARAMS", "FORGE_RUNTIME", "FORGE_ATTEMPT",
             "FORGE_CODE_DIR", "PYTHONPATH", "FORGE_SPEC_SHA256")
# The Ray backend's job environment for the job's workers, as JSON among the submitted
# job's env_vars. Dormant there: Ray starts its own job supervisor actor with the job's
# runtime_env, and the bootstrap must not act in that process (a refusal there kills
# the supervisor, and Ray reports it unschedulable minutes later instead of the job's own
# exit 10). The driver's ``ray.init`` (wrapped here) hands it to the job's workers.
WORKER_ENV = "FORGE_RAY_WORKER_ENV"
# The name of the package the Ray backend submitted as the job's working_dir: where Ray
# unpacked it on a node (a folder of that name), the launcher gives the folders it made
# read-only back to their owner when it ends, so Ray can delete its copy
# (:func:`.readonly.deletable_when_done`).
PACKAGE_ENV = "FORGE_RAY_PACKAGE"


# What the launcher runs in its own process just before the entrypoint's ``ray.shutdown()``
# (:func:`before_ray_shutdown`): empty in every other process of the job.
_BEFORE_SHUTDOWN: list = []


def before_ray_shutdown(callback) -> None:
    """Run *callback* (no arguments; it must not raise) in this process just before
    ``ray.shutdown()`` is called through the ``ray`` module (the launcher asks the job's
    other hosts for their outputs then: :mod:`.ray_outputs`)."""
    _BEFORE_SHUTDOWN.append(callback)


def watch_ray_init() -> None:
    """Wrap ``ray.init`` (now, or when ``ray`` is first imported) to chain setup hooks, and
    ``ray.shutdown`` to run what :func:`before_ray_shutdown` registered."""
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
    shutdown = getattr(ray, "shutdown", None)
    if shutdown is None or getattr(shutdown, "_forge_chained", False):
        return

    @functools.wraps(shutdown)
    def shutdown_after_ours(*args, **kwargs):
        for callback in list(_BEFORE_SHUTDOWN):
            callback()
        return shutdown(*args, **kwargs)

    shutdown_after_ours._forge_chained = True  # type: ignore[attr-defined]
    ray.shutdown = shutdown_after_ours


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
        spec.loader = PostImportLoader(spec.loader, _wrap_init)
        return spec


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
        # The job was not submitted with our hook: the driver's runtime_env carries it,
        # with the job environment: the one the Ray backend submitted for the workers
        # (paths relative to the working_dir Ray unpacks on every node), else this
        # process's own (a driver starting its own Ray). A variable the job already
        # carries is not repeated (Ray refuses a driver runtime_env that repeats one).
        env["worker_process_setup_hook"] = SETUP_HOOK
        job_vars = _job_env_vars(environ)
        submitted = _submitted_worker_env(job_vars)
        source = submitted if submitted is not None else {k: environ[k] for k in FORWARDED if k in environ}
        for key, value in source.items():
            if key not in env_vars and key not in job_vars:
                env_vars[key] = value
    if env_vars:
        env["env_vars"] = env_vars
    return env


def _job_runtime_env(environ) -> dict:
    """The submitted job's runtime_env, from the job config Ray gives its driver ({} elsewhere)."""
    raw = environ.get(RAY_JOB_CONFIG_ENV)
    if not raw:
        return {}
    import json

    try:
        config = json.loads(raw)
    except ValueError:
        return {}
    runtime_env = config.get("runtime_env") if isinstance(config, dict) else None
    return runtime_env if isinstance(runtime_env, dict) else {}


def _job_env_vars(environ) -> dict:
    env_vars = _job_runtime_env(environ).get("env_vars")
    return env_vars if isinstance(env_vars, dict) else {}


def _submitted_worker_env(job_vars: dict):
    """The workers' environment the Ray backend submitted (:data:`WORKER_ENV`), or None."""
    raw = job_vars.get(WORKER_ENV)
    if not isinstance(raw, str):
        return None
    import json

    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return None
    return value


def job_setup_hook(environ=None):
    """The ``worker_process_setup_hook`` the Ray job itself carries, as this process sees it.

    In the driver of a submitted job, Ray's job supervisor passes the job's runtime_env as
    JSON in ``RAY_JOB_CONFIG_JSON_ENV_VAR`` (its ``worker_process_setup_hook`` field, or the
    hook variable among its ``env_vars``); in a worker process Ray sets
    ``__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR``. None when the job carries no hook (a driver
    that starts or joins Ray without a job submission).
    """
    environ = os.environ if environ is None else environ
    runtime_env = _job_runtime_env(environ)
    hook = runtime_env.get("worker_process_setup_hook")
    env_vars = runtime_env.get("env_vars")
    if hook is None and isinstance(env_vars, dict):
        hook = env_vars.get(RAY_HOOK_ENV)
    if hook is not None:
        return hook
    return environ.get(RAY_HOOK_ENV)
