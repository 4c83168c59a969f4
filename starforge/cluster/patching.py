"""The supported way for a plugin to patch a training framework: idempotent, stacked, recorded.

A target names what to patch (:mod:`.patch_targets`): ``"module:attr"``,
``"module:Class.method"`` or ``"module:REGISTRY[key]"``.

A wrapper receives the current callable first and decides whether to call it::

    from starforge import patching

    def install(params):
        scale = params["opsd.scale"]

        def scaled(original, rewards, group_size, eps=1e-6):
            return [a * scale for a in original(rewards, group_size, eps)]

        patching.wrap("toy_grpo.algorithms:compute_advantages", scaled)
        patching.wrap("toy_grpo.algorithms:ADVANTAGE_ESTIMATORS[grpo]", scaled)

Patching is idempotent (the same plugin patching the same target with the same function,
by qualified name, does not wrap twice), fails loudly when the target is missing, stacks
in load order, rebinds ``from m import f`` copies held by other imported modules, can wait
for the target module to be imported, can be undone, and records every patch for
provenance (:func:`records`). Here: the patch stacks on each patched place, this process's
patches, the API, and waiting for a module's import.

Cluster side: standard library only.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import sys
import threading
import time
import types

from .errors import PatchError, PatchTargetError
from .import_hooks import ModuleWatcher
from .patch_targets import Target, module_not_found, no_attribute, parse_target, resolve
from .utctime import utc_millis

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator

__all__ = [
    "Patch",
    "PatchError",
    "PatchTargetError",
    "Target",
    "acting_for",
    "current_plugin",
    "parse_target",
    "patch",
    "patches",
    "records",
    "replace",
    "undo_all",
    "wrap",
]

class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


_ABSENT: Any = _Absent()


# -- patches ------------------------------------------------------------------------------


def _identity(obj: Any) -> str:
    """The qualified name of a function or class; type and repr of any other value."""
    qualname = getattr(obj, "__qualname__", None)
    if isinstance(qualname, str):
        return f"{getattr(obj, '__module__', None)}.{qualname}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}:{obj!r}"


def _same_definition(obj: Any) -> str:
    """What makes two functions "the same" across re-runs of an install: where they are defined.

    A re-run ``install`` makes new closures (or ``functools.partial`` objects) from the
    same source lines; two lambdas in one function differ by line.
    """
    if isinstance(obj, functools.partial):
        return "partial:" + _same_definition(obj.func)
    code = getattr(obj, "__code__", None)
    line = getattr(code, "co_firstlineno", None)
    return _identity(obj) + (f"@{line}" if line is not None else "")


class Patch:
    """One patch of one target by one plugin. Made by :func:`patch`; undone by :meth:`undo`.

    ``status`` is ``pending`` (waiting for the target module's import), ``applied``,
    ``undone`` or ``failed``. ``aliases`` lists the ``module.name`` bindings rebound.
    ``hides`` (a replace only): the other plugins' patches of the same target it hides,
    each ``{"plugin", "mode", "function"}`` (see :func:`_hidden_by`).
    """

    def __init__(self, target: Target, fn: Any, mode: str, plugin: str | None, *,
                 rebind_aliases: bool, when_imported: bool, create: bool) -> None:
        self.target = str(target)
        self.plugin = plugin
        self.mode = mode
        self.fn = fn
        self.rebind_aliases = rebind_aliases
        self.when_imported = when_imported
        self.create = create
        self.status = "pending"
        self.aliases: list[str] = []
        self.layer: int | None = None
        self.reinstalled = 0
        self.error: str | None = None
        self.registered_at = time.time()
        self.applied_at: float | None = None
        self.undone_at: float | None = None
        self.hides: list[dict] = []
        self.created = False  # applied where there was no attribute or key (create=True)
        self._target = target
        self._key = (self.target, plugin, mode, _same_definition(fn))
        self._slot: _Slot | None = None

    @property
    def applied(self) -> bool:
        return self.status == "applied"

    def undo(self) -> None:
        """Take this patch out of its target's stack (patches above it stay); no-op once undone."""
        with _lock:
            _undo(self)

    def record(self) -> dict:
        """This patch as JSON-able data (the shape :func:`records` returns)."""
        return {
            "target": self.target,
            "plugin": self.plugin,
            "mode": self.mode,
            "function": _identity(self.fn),
            "status": self.status,
            "layer": self.layer,
            "when_imported": self.when_imported,
            "aliases": list(self.aliases),
            "reinstalled": self.reinstalled,
            "registered_at": utc_millis(self.registered_at),
            "applied_at": utc_millis(self.applied_at),
            "undone_at": utc_millis(self.undone_at),
            "error": self.error,
            "hides": [dict(h) for h in self.hides],
            "created": self.created,
        }

    def __repr__(self) -> str:
        return f"<Patch {self.mode} {self.target} by {self.plugin or 'unattributed'}: {self.status}>"


class _Slot:
    """One patched place: what was there before, and the stack of patches on it."""

    def __init__(self, target: Target, module: types.ModuleType, owner: Any, name: Any, is_item: bool) -> None:
        self.target = target
        self.module = module
        self.owner = owner
        self.name = name  # attribute name, or the registry's own key object
        self.is_item = is_item
        self.layers: list[Patch] = []
        self.original: Any = _ABSENT  # raw value held by the owner itself, restored on undo
        self.base: Any = _ABSENT  # what the first layer wraps (inherited values included)
        self.installed: Any = _ABSENT
        self.alias_sites: set = set()

    @property
    def module_attribute(self) -> bool:
        return not self.is_item and isinstance(self.owner, types.ModuleType)

    def read(self) -> Any:
        if self.is_item:
            return self.owner[self.name] if self.name in self.owner else _ABSENT
        own = getattr(self.owner, "__dict__", None)
        if isinstance(own, (dict, types.MappingProxyType)):
            return own.get(self.name, _ABSENT)
        return getattr(self.owner, self.name, _ABSENT)

    def capture(self) -> None:
        """Read the unpatched value (called whenever the stack is empty)."""
        self.original = self.read()
        self.base = self.original
        if self.base is _ABSENT and not self.is_item:
            if isinstance(self.owner, type):
                # Keep descriptors (staticmethod, classmethod) as they are in the class body.
                for klass in self.owner.__mro__:
                    if self.name in vars(klass):
                        self.base = vars(klass)[self.name]
                        break
            else:
                self.base = getattr(self.owner, self.name, _ABSENT)
        self.alias_sites = set()

    def write(self, value: Any) -> None:
        if self.is_item:
            self.owner[self.name] = value
        else:
            setattr(self.owner, self.name, value)

    def restore(self) -> None:
        if self.original is not _ABSENT:
            self.write(self.original)
        elif self.is_item:
            self.owner.pop(self.name, None)
        elif self.read() is not _ABSENT:
            delattr(self.owner, self.name)

    def compose(self, layers: list[Patch]) -> Any:
        value = self.base
        for p in layers:
            value = p.fn if p.mode == "replace" else _wrapped(p, value)
        return value

    def check_untouched(self) -> None:
        if self.layers and self.read() is not self.installed:
            top = self.layers[-1]
            raise PatchError(
                f"'{self.target}' was reassigned outside starforge.patching after "
                f"{top.plugin or 'an unattributed patch'} patched it",
                hint="patch it with starforge.patching.wrap/replace so patches stack and undo in order",
            )


def _wrapped(p: Patch, inner: Any) -> Any:
    wrapper = p.fn
    if isinstance(inner, staticmethod):
        return staticmethod(_wrapped(p, inner.__func__))
    if isinstance(inner, classmethod):
        return classmethod(_wrapped(p, inner.__func__))
    if inner is _ABSENT or not callable(inner):
        raise PatchTargetError(
            f"cannot wrap '{p.target}': it holds {type(inner).__name__} {inner!r}, not a callable",
            target=p.target,
            hint="use starforge.patching.replace to put another value there",
        )

    @functools.wraps(inner)
    def patched(*args: Any, **kwargs: Any) -> Any:
        return wrapper(inner, *args, **kwargs)

    patched.__starforge_patch__ = p.record  # type: ignore[attr-defined]
    return patched


# -- state ----------------------------------------------------------------------------------

_lock = threading.RLock()
_history: list[Patch] = []  # every patch made in this process, in order
_live: dict[tuple, Patch] = {}  # idempotency key -> pending or applied patch
_slots: dict[tuple, _Slot] = {}
_pending: dict[str, list[Patch]] = {}  # module name -> patches waiting for its import
_acting: contextvars.ContextVar = contextvars.ContextVar("starforge_patching_plugin", default=None)


@contextlib.contextmanager
def acting_for(ref: str) -> Iterator[str]:
    """Attribute the patches made inside the block to plugin *ref* (``owner/name@version``).

    The launcher wraps every ``install`` call in it, so plugins need not name themselves.
    """
    token = _acting.set(ref)
    try:
        yield ref
    finally:
        _acting.reset(token)


def current_plugin() -> str | None:
    """The plugin ref set by the innermost :func:`acting_for`, or None."""
    return _acting.get()


# -- the API --------------------------------------------------------------------------------


def patch(target: str | Target, fn: Any, *, wrap: bool = True, rebind_aliases: bool = True,
          when_imported: bool = False, create: bool = False, plugin: str | None = None) -> Patch:
    """Patch *target* with *fn* and return the :class:`Patch`.

    ``wrap=True``: *fn* is called as ``fn(original, *args, **kwargs)`` in place of the
    current callable (which may itself be an earlier plugin's patch). ``wrap=False``:
    *fn* replaces the current value. ``rebind_aliases``: module globals elsewhere bound to
    the replaced callable (``from m import f``) are rebound. ``when_imported``: when the
    target module is not imported yet, wait for its import instead of importing it.
    ``create`` (replace only): allow a missing attribute or key. ``plugin`` overrides the
    ref set by :func:`acting_for`.

    Patching again with the same target, plugin, mode and function (same qualified name)
    returns the existing patch; a new function object of that name takes its place in the
    stack (a re-run ``install`` with new params) instead of wrapping twice.
    """
    t = target if isinstance(target, Target) else parse_target(target)
    mode = "wrap" if wrap else "replace"
    if wrap and not callable(fn):
        raise TypeError(f"wrapper for '{t}' must be callable, got {type(fn).__name__}")
    if wrap and create:
        raise PatchError(f"'{t}': create=True needs wrap=False (there is nothing to wrap)")
    ref = plugin if plugin is not None else _acting.get()
    p = Patch(t, fn, mode, ref, rebind_aliases=rebind_aliases, when_imported=when_imported, create=create)
    with _lock:
        existing = _take_over(p._key, fn)
        if existing is not None:
            return existing
        p.hides = _hidden_by(p)
        if when_imported and not _imported(t.module):
            p.status = "pending"
            _history.append(p)
            _live[p._key] = p
            _pending.setdefault(t.module, []).append(p)
            _hook.install()
            return p
    # Import outside the lock: the import hook of another thread may need it.
    module = sys.modules[t.module] if _imported(t.module) else _import(t, p)
    with _lock:
        existing = _take_over(p._key, fn)  # another thread may have applied it meanwhile
        if existing is not None:
            return existing
        p.hides = _hidden_by(p)
        _history.append(p)
        _apply(p, module)
        _live[p._key] = p
        return p


def _take_over(key: tuple, fn: Callable[..., Any]) -> "Patch | None":
    """The live patch under *key*, now running *fn* (a re-run install), or None. Call under ``_lock``."""
    existing = _live.get(key)
    if existing is not None and existing.fn is not fn:
        _reinstall(existing, fn)
    return existing


def wrap(target: str | Target, wrapper: Callable[..., Any], **options: Any) -> Patch:
    """``patch(target, wrapper, wrap=True, ...)``: *wrapper(original, *args, **kwargs)*."""
    return patch(target, wrapper, wrap=True, **options)


def replace(target: str | Target, value: Any, **options: Any) -> Patch:
    """``patch(target, value, wrap=False, ...)``: put *value* there (earlier layers are shadowed)."""
    return patch(target, value, wrap=False, **options)


def _hidden_by(p: Patch) -> list[dict]:
    """The other plugins' live patches of *p*'s target that *p* hides, oldest first.

    Only a replace hides: it puts its value above every earlier layer, so the wrappers and
    values below it never run again (and whatever settings they read have no effect). A
    layer already hidden by an earlier replace is not counted again, and a plugin's own
    earlier patches are its own business. Patches waiting for their module's import count
    in the order they were made, the order they will be applied in. Each entry is
    ``{"plugin", "mode", "function"}``.
    """
    if p.mode != "replace":
        return []
    with _lock:
        below = [q for q in _history if q is not p and q.target == p.target and q.status in ("pending", "applied")]
    for i in range(len(below) - 1, -1, -1):
        if below[i].mode == "replace":
            below = below[i:]
            break
    return [
        {"plugin": q.plugin, "mode": q.mode, "function": _identity(q.fn)}
        for q in below
        if q.plugin != p.plugin
    ]


def hiding_message(record: dict) -> str | None:
    """What a patch record's ``hides`` means, in one line; None when it hides nothing.

    >>> hiding_message({"plugin": "b/dr-grpo@2.0.0", "target": "m:f", "hides": [{"plugin": "a/opsd@1.2.0", "mode": "wrap"}]})
    "b/dr-grpo@2.0.0 replaces m:f, hiding a/opsd@1.2.0's wrap of it (it never runs, so its settings have no effect there)"
    """
    hides = [h for h in record.get("hides") or () if isinstance(h, dict)]
    if not hides:
        return None
    hidden = " and ".join(f"{h.get('plugin') or 'an unattributed patch'}'s {h.get('mode')}" for h in hides)
    them = "it never runs, so its" if len(hides) == 1 else "they never run, so their"
    who = record.get("plugin") or "an unattributed patch"
    return f"{who} replaces {record.get('target')}, hiding {hidden} of it ({them} settings have no effect there)"


def patches() -> tuple:
    """Every :class:`Patch` made in this process, in the order they were made."""
    with _lock:
        return tuple(_history)


def records() -> list:
    """Every patch made in this process as JSON-able dicts, in order (for provenance).

    Keys: target, plugin, mode, function, status (pending|applied|undone|failed), layer,
    when_imported, aliases, reinstalled, registered_at, applied_at, undone_at, error, hides, created.
    """
    with _lock:
        return [p.record() for p in _history]


def undo_all() -> None:
    """Undo every pending and applied patch, newest first (restores the unpatched state)."""
    with _lock:
        for p in reversed(_history):
            _undo(p)


# -- internals ------------------------------------------------------------------------------


def _imported(name: str) -> bool:
    # A module still initializing counts as imported: a post-import hook (the launcher's
    # target watcher) runs inside the import, after the body has run, and waiting would miss
    # it. Patching from inside the module's own body finds only what is defined so far and
    # fails loudly if the target is not.
    return name in sys.modules


def _import(t: Target, p: Patch) -> types.ModuleType:
    try:
        return importlib.import_module(t.module)
    except ModuleNotFoundError as exc:
        err = module_not_found(t, exc)
        if err is None:
            raise
        _fail(p, err)
        raise err from None


def _fail(p: Patch, err: Exception) -> None:
    p.status = "failed"
    p.error = str(err)
    if p not in _history:
        _history.append(p)


def _slot_for(p: Patch, module: types.ModuleType) -> _Slot:
    t = p._target
    skey = (t.module, t.path, t.key)
    slot = _slots.get(skey)
    if slot is not None and slot.module is module and slot.layers:
        return slot
    owner, name, is_item, walked = resolve(t, module, create=p.create)
    slot = _Slot(t, module, owner, name, is_item=is_item)
    slot.capture()
    if slot.base is _ABSENT and not slot.is_item and not p.create:
        raise no_attribute(t, owner, walked, name)
    _slots[skey] = slot
    return slot


def _apply(p: Patch, module: types.ModuleType) -> None:
    try:
        slot = _slot_for(p, module)
        slot.check_untouched()
        if not slot.layers:
            slot.capture()
        created = not slot.layers and slot.base is _ABSENT
        layers = slot.layers + [p]
        value = slot.compose(layers)
        old = slot.installed if slot.layers else slot.base
        slot.write(value)
    except PatchError as err:
        _fail(p, err)
        raise
    except (AttributeError, TypeError) as exc:  # e.g. a read-only attribute of a builtin type
        refused = PatchTargetError(f"cannot patch '{p.target}': {exc}", target=p.target)
        _fail(p, refused)
        raise refused from exc
    slot.layers = layers
    slot.installed = value
    p._slot = slot
    p.layer = len(layers) - 1
    p.created = created
    p.status = "applied"
    p.applied_at = time.time()
    p.error = None
    p.aliases = _rebind(slot, old, value, scan=p.rebind_aliases, skip={getattr(p.fn, "__module__", None)})


def _reinstall(p: Patch, fn: Any) -> None:
    """A re-run install made a new function of the same name: swap it into the same layer."""
    if p.status == "applied" and p._slot is not None:
        p._slot.check_untouched()
        p.fn = fn
        _restack(p._slot, p.rebind_aliases, skip={getattr(fn, "__module__", None)})
    else:
        p.fn = fn
    p.reinstalled += 1


def _undo(p: Patch) -> None:
    if p.status == "pending":
        waiting = _pending.get(p._target.module, [])
        if p in waiting:
            waiting.remove(p)
        if not waiting:
            _pending.pop(p._target.module, None)
            if not _pending:
                _hook.remove()
    elif p.status == "applied" and p._slot is not None:
        slot = p._slot
        slot.check_untouched()
        slot.layers.remove(p)
        _restack(slot, rescan=False, skip=set())
        p._slot = None
    else:
        return
    p.status = "undone"
    p.undone_at = time.time()
    if _live.get(p._key) is p:
        del _live[p._key]


def _restack(slot: _Slot, rescan: bool, skip: set) -> None:
    slot.check_untouched()
    old = slot.installed
    if slot.layers:
        value = slot.compose(slot.layers)
        slot.write(value)
        for i, layer in enumerate(slot.layers):
            layer.layer = i
    else:
        slot.restore()
        value = slot.base
    slot.installed = value if slot.layers else _ABSENT
    if value is not _ABSENT:
        _rebind(slot, old, value, scan=rescan, skip=skip)
    if not slot.layers:
        slot.alias_sites = set()


def _rebind(slot: _Slot, old: Any, new: Any, *, scan: bool, skip: set) -> list:
    """Rebind module globals holding *old* (``from m import f`` copies) to *new*."""
    if not slot.module_attribute or old is _ABSENT or old is new:
        return []
    # Only callables: an int or a str may be the same object in unrelated modules.
    if not callable(old) or isinstance(old, (staticmethod, classmethod)):
        return []
    for modname, name in list(slot.alias_sites):
        mod = sys.modules.get(modname)
        if mod is not None and vars(mod).get(name) is old:
            setattr(mod, name, new)
    if not scan:
        return []
    found = []
    skip = skip | {__name__}
    for modname, mod in list(sys.modules.items()):
        if modname in skip or not isinstance(mod, types.ModuleType):
            continue
        namespace = getattr(mod, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if value is old and not (mod is slot.owner and name == slot.name):
                namespace[name] = new
                slot.alias_sites.add((modname, name))
                found.append(f"{modname}.{name}")
    return sorted(found)


# -- waiting for an import ------------------------------------------------------------------


def _module_imported(module: types.ModuleType) -> None:
    with _lock:
        waiting = _pending.pop(module.__name__, [])
        if not _pending:
            _hook.remove()
        first_error: Exception | None = None
        for p in waiting:
            try:
                _apply(p, module)
            except PatchError as err:
                _live.pop(p._key, None)
                err.plugin = p.plugin  # a patch that waited for this import: whose it is (exit 13, as in install)
                first_error = first_error or err
        if first_error is not None:
            # Raised from the import statement: the module is not left half-patched in use.
            raise first_error


_hook = ModuleWatcher(lambda name: name in _pending, _module_imported)
