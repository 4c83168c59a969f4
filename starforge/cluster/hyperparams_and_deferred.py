"""This process's registry: the job's hyperparams and its deferred plugins.

One registry per process, filled by the launcher or the bootstrap (:mod:`.job`) and read
by the runtime API for training code (:mod:`starforge.plugins`). Standard library only.
"""

from __future__ import annotations

import json
import threading
import types

from .errors import UsageError

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Any, Callable, Mapping


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
        # What load_environment returned, by environment plugin name (once per process).
        self.environments: dict[str, Any] = {}


registry = _Registry()


def set_hyperparams(values: Mapping[str, Any]) -> Mapping[str, Any]:
    with registry.lock:
        registry.hyperparams = freeze(values)
        return registry.hyperparams


def register(name: str, ref: str, install: Callable[..., Any]) -> None:
    with registry.lock:
        if name not in registry.deferred:
            registry.deferred[name] = _Deferred(name=name, ref=ref, install=install)


def deferred_status() -> list[dict]:
    """``[{name, ref, installed, ctx_keys, installed_at}]`` for provenance and the end report."""
    with registry.lock:
        return [
            {
                "name": d.name,
                "ref": d.ref,
                "installed": d.installed,
                "ctx_keys": sorted(d.ctx),
                "installed_at": d.installed_at,
            }
            for d in registry.deferred.values()
        ]


def hyperparams_from_env(env: Mapping[str, str]) -> dict:
    path = env.get("FORGE_HYPERPARAMS")
    if path:
        with open(path, encoding="utf-8") as f:
            data = json.loads(f.read())
        if not isinstance(data, dict):
            raise UsageError(f"{path}: hyperparams file must hold a JSON object")
        return data
    spec = env.get("FORGE_JOBSPEC")
    if spec:
        with open(spec, encoding="utf-8") as f:
            data = json.loads(f.read())
        values = data.get("hyperparams", {}) if isinstance(data, dict) else {}
        return values if isinstance(values, dict) else {}
    return {}


_READ_ONLY = "the job's hyperparams are read-only (shared by every plugin and the trainer); copy the value to change it"
_read_only_types: tuple | None = None


def read_only_types() -> tuple:
    """``(ReadOnlyDict, ReadOnlyList)``: a JSON object or array inside the hyperparams.

    A ``dict`` / ``list`` (equality with plain ones, ``json.dumps``, ``isinstance``) whose
    mutating methods raise :class:`TypeError`; a pickle or copy of one (as Ray sends it to
    a task) is a plain, mutable ``dict`` / ``list``, so it unpickles anywhere. Made on
    first use: creating the two classes costs a process about 0.2 ms, which jobs whose
    hyperparams are all flat values (the usual dotted keys) never pay.
    """
    global _read_only_types
    if _read_only_types is None:

        def refuse(self, *args, **kwargs):
            raise TypeError(_READ_ONLY)

        def plain(self, protocol=2):
            base = type(self).__mro__[1]
            return (base, (base(self),))

        class ReadOnlyDict(dict):
            __slots__ = ()
            __setitem__ = __delitem__ = __ior__ = refuse
            clear = pop = popitem = setdefault = update = refuse
            __reduce_ex__ = plain

        class ReadOnlyList(list):
            __slots__ = ()
            __setitem__ = __delitem__ = __iadd__ = __imul__ = refuse
            append = extend = insert = pop = remove = clear = sort = reverse = refuse
            __reduce_ex__ = plain

        _read_only_types = (ReadOnlyDict, ReadOnlyList)
    return _read_only_types


def _read_only(value, types_: tuple):
    if type(value) is dict:
        return types_[0]({k: _read_only(v, types_) for k, v in value.items()})
    if type(value) is list:
        return types_[1]([_read_only(v, types_) for v in value])
    return value


def freeze(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """A private deep copy behind a read-only view: what a JSON round trip gives (key order kept),
    every nested object and array read-only too (:func:`read_only_types`).

    Plugins and the trainer see the same values and none of them can change what another
    one reads.
    """
    data = json.loads(json.dumps(dict(values)))
    nested = [k for k, v in data.items() if type(v) is dict or type(v) is list]
    if nested:
        types_ = read_only_types()
        for key in nested:
            data[key] = _read_only(data[key], types_)
    return types.MappingProxyType(data)
