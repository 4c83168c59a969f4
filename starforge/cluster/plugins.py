"""Runtime API for training code: the job's hyperparams, deferred and environment plugins.

A training entrypoint reads its hyperparams and, once it has built what a deferred plugin
needs, installs that plugin::

    from starforge.plugins import hyperparams, install_deferred

    lr = hyperparams()["grpo.lr"]
    install_deferred("opsd-patch", tokenizer=tokenizer, max_seq_len=4096)

Each process of a job keeps its own registry. The launcher fills it in the launcher
process; in any other process of the job (a Ray actor, a torchrun rank, a spawn child) the
bootstrap fills it at start-up, and ``install_deferred`` bootstraps from the job
environment first when nothing is registered yet.

The code that builds environments (in the trainer, or in a reward or environment actor)
gets an environment plugin's factory with ``load_environment(name, **ctx)`` (SPEC §17).

Cluster side: standard library only.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .errors import InstallError, UsageError
from .hyperparams_and_deferred import freeze, hyperparams_from_env, registry

if TYPE_CHECKING:
    from typing import Any, Mapping

__all__ = ["hyperparams", "install_deferred", "registered", "load_environment", "UnknownPluginError", "ContextMismatchError"]


class UnknownPluginError(UsageError, LookupError):
    """``install_deferred`` was given a name no deferred plugin is registered under."""


class ContextMismatchError(UsageError, ValueError):
    """``install_deferred`` was called again for a plugin with a different context."""


def hyperparams() -> Mapping[str, Any]:
    """The job's hyperparams as a read-only mapping of flat dotted keys to JSON values
    (nested objects and arrays read-only too: a ``dict``/``list`` whose changes raise ``TypeError``).

    Taken from the launched job; else from the JSON file named by ``FORGE_HYPERPARAMS``;
    else from the JobSpec named by ``FORGE_JOBSPEC``. Outside a job it is empty.

    >>> hyperparams().get("grpo.lr", 1e-6)
    1e-06
    """
    values = registry.hyperparams
    if values is not None:  # no lock once set: an install holding it may start threads
        return values
    with registry.lock:
        if registry.hyperparams is None:
            registry.hyperparams = freeze(hyperparams_from_env(os.environ))
        return registry.hyperparams


def install_deferred(name: str, **ctx: Any) -> None:
    """Call the deferred plugin *name*'s ``install(params, **ctx)``.

    *name* is the manifest name (``opsd-patch``), not ``owner/name``. A second call with
    the same context does nothing; one with a different context raises
    :class:`ContextMismatchError`; an unknown name raises :class:`UnknownPluginError`
    listing the registered names. An exception in ``install`` is raised as
    :class:`~starforge.errors.InstallError` naming the plugin (exit code 13).
    """
    with registry.lock:
        if not registry.booted:
            _bootstrap_from_env()
        entry = registry.deferred.get(name)
        if entry is None and registry.activate is not None and registry.activate(name):
            entry = registry.deferred.get(name)
        if entry is None:
            raise _unknown(name)
        if entry.installed:
            if not _same_ctx(entry.ctx, ctx):
                raise ContextMismatchError(
                    f"deferred plugin '{name}' ({entry.ref}) is already installed with another context "
                    f"(keys {sorted(entry.ctx)}); a plugin is installed once per process",
                    hint="call install_deferred once, with the objects the plugin needs",
                )
            return
        params = hyperparams()
        from . import patching

        try:
            with patching.acting_for(entry.ref):
                entry.install(params, **ctx)
        except Exception as exc:
            err = InstallError(f"{entry.ref}: install raised {type(exc).__name__}: {exc}")
            err.plugin = entry.ref  # type: ignore[attr-defined]
            raise err from exc
        import time

        entry.installed = True
        entry.ctx = dict(ctx)
        entry.installed_at = time.time()
        if registry.installed is not None:
            registry.installed()


def load_environment(name: str, **ctx: Any) -> Any:
    """The environment plugin *name*'s entrypoint result: ``entrypoint(params, **ctx)``.

    Called in any process of the job (the trainer, a reward or environment actor, even
    under another interpreter than the job's Python): where the process has no job yet,
    it bootstraps from the job environment first. The plugin is imported from its
    verified bytes (the launcher's, or here the listing and each file's hash as it is
    read), its ``requires`` checked in this process, and its entrypoint called once per
    process: later calls return the same object and do not compare *ctx* (tokenizers and
    actor handles have no useful equality). What the entrypoint returns is the plugin's
    business — typically a factory, since environments are built per episode.

    *name* is the manifest name. An unknown name raises :class:`UnknownPluginError`
    listing the job's environment plugins; an exception of the entrypoint is raised as
    :class:`~starforge.errors.InstallError` naming the plugin (exit code 13). A plugin
    that fails verification, its requirements or its import ends the process with that
    phase's exit code, as in every process of the job.

    >>> make_env = load_environment("counting-env", tokenizer=tokenizer)   # doctest: +SKIP
    >>> env = make_env()                                                   # doctest: +SKIP
    """
    with registry.lock:
        if name in registry.environments:
            return registry.environments[name]
        if not registry.booted:
            _bootstrap_from_env()
        from .process_job import current_job

        job = current_job()
        item = job.environment_item(name) if job is not None and not registry.disabled else None
        if job is None or item is None:
            raise _unknown_environment(name, job)
        from .errors import LaunchFailure
        from .exits import die

        try:
            value = job.load_environment(item, ctx)
        except LaunchFailure as failure:
            die(job, failure)
        except InstallError:
            job.write_provenance()
            raise
        registry.environments[name] = value
        job.write_provenance()
        return value


def _unknown_environment(name: str, job: Any) -> UnknownPluginError:
    hint = "pass the manifest name of an environment plugin of the job (e.g. 'counting-env', not 'alice/counting-env')"
    if registry.disabled:
        listing = "none: plugins are disabled in this process (FORGE_DISABLE=1)"
    elif job is None:
        listing = "none: this process is not part of a forge job"
    else:
        names = job.environment_names()
        listing = ", ".join(names) if names else "none"
        other = next((i for i in job.items if i.entry.name == name), None)
        if other is not None:
            article = "an" if other.entry.kind == "algorithm" else "a"
            hint = f"'{name}' is {article} {other.entry.kind} plugin ({other.ref}); load_environment loads kind: environment only"
    return UnknownPluginError(
        f"no environment plugin named '{name}' in this job (environment plugins: {listing})", hint=hint
    )


def registered() -> tuple:
    """Names of the deferred plugins registered in this process.

    Includes, in a process other than the launcher, deferred plugins that declare
    ``targets`` and are still waiting for one to be imported: ``install_deferred`` loads
    them on demand.
    """
    with registry.lock:
        if not registry.booted and _job_env(os.environ):
            _bootstrap_from_env()
        names = list(registry.deferred)
        if registry.listing is not None:
            listed = registry.listing()  # registered or waiting, in load order
            names = listed + [n for n in names if n not in listed]
        return tuple(names)


def _job_env(env: Mapping[str, str]) -> bool:
    return bool(env.get("FORGE_JOBSPEC"))


def _bootstrap_from_env() -> None:
    """Fill this process's registry from the job environment (no-op outside a job)."""
    if _job_env(os.environ):
        from .process_job import boot_process

        boot_process(reason="install_deferred")
    registry.booted = True


def _unknown(name: str) -> UnknownPluginError:
    names = list(registry.deferred)
    if registry.listing is not None:
        names = registry.listing() + [n for n in names if n not in registry.listing()]
    if registry.disabled:
        listing = "none: plugins are disabled in this process (FORGE_DISABLE=1)"
    elif not _job_env(os.environ) and not names:
        listing = "none: this process is not part of a forge job"
    else:
        listing = ", ".join(names) if names else "none"
    return UnknownPluginError(
        f"no deferred plugin named '{name}' is registered (registered: {listing})",
        hint="pass the manifest name (e.g. 'opsd-patch', not 'alice/opsd-patch'); "
        "eager plugins are installed by the launcher and cannot be installed again",
    )


def _same_ctx(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    if set(old) != set(new):
        return False
    for key, value in new.items():
        before = old[key]
        if before is value:
            continue
        try:
            equal = before == value
        except Exception:
            return False
        if type(equal) is not bool or not equal:  # arrays and tensors compare element-wise
            return False
    return True
