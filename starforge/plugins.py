"""Runtime API for training code: the job's hyperparams and deferred plugins.

A training entrypoint reads its hyperparams and, once it has built what a deferred plugin
needs, installs that plugin::

    from starforge.plugins import hyperparams, install_deferred

    lr = hyperparams()["grpo.lr"]
    install_deferred("opsd-patch", tokenizer=tokenizer, max_seq_len=4096)

Each process of a job keeps its own registry. The launcher fills it in the launcher
process; in any other process of the job (a Ray actor, a torchrun rank, a spawn child) the
bootstrap fills it at start-up, and ``install_deferred`` bootstraps from the job
environment first when nothing is registered yet.

Cluster side: standard library only.
"""

from __future__ import annotations

import os
import threading
import types

from .errors import InstallError, UsageError

__all__ = ["hyperparams", "install_deferred", "registered", "UnknownPluginError", "ContextMismatchError"]


class UnknownPluginError(UsageError, LookupError):
    """``install_deferred`` was given a name no deferred plugin is registered under."""


class ContextMismatchError(UsageError, ValueError):
    """``install_deferred`` was called again for a plugin with a different context."""


class _Deferred:
    """A registered deferred plugin (a plain class: dataclass creation costs every process)."""

    __slots__ = ("name", "ref", "install", "installed", "ctx", "installed_at")

    def __init__(self, name: str, ref: str, install: Callable[..., Any]) -> None:
        self.name = name
        self.ref = ref
        self.install = install
        self.installed = False
        self.ctx: dict = {}
        self.installed_at: float | None = None


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.hyperparams: Mapping[str, Any] | None = None
        self.deferred: dict[str, _Deferred] = {}
        self.booted = False  # True once the launcher or the bootstrap has filled this process
        self.disabled = False  # FORGE_DISABLE=1 in this process
        # Set by the bootstrap: activates a plugin whose start-up waits for a target import,
        # and lists the deferred plugins, registered or still waiting, in load order.
        self.activate: Callable[[str], bool] | None = None
        self.listing: Callable[[], list] | None = None
        # Set by the bootstrap of a worker: records an install in provenance right away, so
        # the launcher sees it even if this process is later killed without running atexit.
        self.installed: Callable[[], Any] | None = None


_registry = _Registry()


def hyperparams() -> Mapping[str, Any]:
    """The job's hyperparams as a read-only mapping of flat dotted keys to JSON values.

    Taken from the launched job; else from the JSON file named by ``FORGE_HYPERPARAMS``;
    else from the JobSpec named by ``FORGE_JOBSPEC``. Outside a job it is empty.

    >>> hyperparams().get("grpo.lr", 1e-6)
    1e-06
    """
    values = _registry.hyperparams
    if values is not None:  # no lock once set: an install holding it may start threads
        return values
    with _registry.lock:
        if _registry.hyperparams is None:
            _registry.hyperparams = _freeze(_hyperparams_from_env(os.environ))
        return _registry.hyperparams


def install_deferred(name: str, **ctx: Any) -> None:
    """Call the deferred plugin *name*'s ``install(params, **ctx)``.

    *name* is the manifest name (``opsd-patch``), not ``owner/name``. A second call with
    the same context does nothing; one with a different context raises
    :class:`ContextMismatchError`; an unknown name raises :class:`UnknownPluginError`
    listing the registered names. An exception in ``install`` is raised as
    :class:`~starforge.errors.InstallError` naming the plugin (exit code 13).
    """
    with _registry.lock:
        if not _registry.booted:
            _bootstrap_from_env()
        entry = _registry.deferred.get(name)
        if entry is None and _registry.activate is not None and _registry.activate(name):
            entry = _registry.deferred.get(name)
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
        if _registry.installed is not None:
            _registry.installed()


def registered() -> tuple:
    """Names of the deferred plugins registered in this process.

    Includes, in a process other than the launcher, deferred plugins that declare
    ``targets`` and are still waiting for one to be imported: ``install_deferred`` loads
    them on demand.
    """
    with _registry.lock:
        if not _registry.booted and _job_env(os.environ):
            _bootstrap_from_env()
        names = list(_registry.deferred)
        if _registry.listing is not None:
            listed = _registry.listing()  # registered or waiting, in load order
            names = listed + [n for n in names if n not in listed]
        return tuple(names)


# -- used by the launcher and the bootstrap ------------------------------------------------


def _set_hyperparams(values: Mapping[str, Any]) -> Mapping[str, Any]:
    with _registry.lock:
        _registry.hyperparams = _freeze(values)
        return _registry.hyperparams


def _register(name: str, ref: str, install: Callable[..., Any]) -> None:
    with _registry.lock:
        if name not in _registry.deferred:
            _registry.deferred[name] = _Deferred(name=name, ref=ref, install=install)


def _deferred_status() -> list[dict]:
    """``[{name, ref, installed, ctx_keys, installed_at}]`` for provenance and the end report."""
    with _registry.lock:
        return [
            {
                "name": d.name,
                "ref": d.ref,
                "installed": d.installed,
                "ctx_keys": sorted(d.ctx),
                "installed_at": d.installed_at,
            }
            for d in _registry.deferred.values()
        ]


def _job_env(env: Mapping[str, str]) -> bool:
    return bool(env.get("FORGE_JOBSPEC"))


def _bootstrap_from_env() -> None:
    """Fill this process's registry from the job environment (no-op outside a job)."""
    if _job_env(os.environ):
        from .launch import runtime

        runtime.boot_process(reason="install_deferred")
    _registry.booted = True


def _hyperparams_from_env(env: Mapping[str, str]) -> dict:
    from .jobspec import parse_json

    path = env.get("FORGE_HYPERPARAMS")
    if path:
        with open(path, encoding="utf-8") as f:
            data = parse_json(f.read())
        if not isinstance(data, dict):
            raise UsageError(f"{path}: hyperparams file must hold a JSON object")
        return data
    spec = env.get("FORGE_JOBSPEC")
    if spec:
        with open(spec, encoding="utf-8") as f:
            data = parse_json(f.read())
        values = data.get("hyperparams", {}) if isinstance(data, dict) else {}
        return values if isinstance(values, dict) else {}
    return {}


def _freeze(values: Mapping[str, Any]) -> Mapping[str, Any]:
    # A private deep copy behind a read-only view: plugins and the trainer see the same
    # values and none of them can change what another one reads. The copy is what a JSON
    # round trip gives (key order kept); plain JSON values are copied without importing
    # json, anything else goes through json itself.
    try:
        copy = _json_copy(dict(values))
    except _NotPlain:
        import json

        copy = json.loads(json.dumps(dict(values)))
    return types.MappingProxyType(copy)


class _NotPlain(Exception):
    pass


def _json_copy(value):
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is list or kind is tuple:
        return [_json_copy(v) for v in value]
    if kind is dict and all(type(k) is str for k in value):
        return {k: _json_copy(v) for k, v in value.items()}
    raise _NotPlain


def _unknown(name: str) -> UnknownPluginError:
    names = list(_registry.deferred)
    if _registry.listing is not None:
        names = _registry.listing() + [n for n in names if n not in _registry.listing()]
    if _registry.disabled:
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
