"""What a patch target names: the target language, and the place it resolves to in a module.

A target is written as:

- ``"module:attr"``               a module attribute (a function, a class, a constant)
- ``"module:Class.method"``       an attribute reached through attributes (methods, nested)
- ``"module:REGISTRY[key]"``      an entry of a dict the framework dispatches through
                                  (key quoted or bare: ``REG['grpo']``, ``REG[grpo]``)

:func:`parse_target` reads it into a :class:`Target`; :func:`resolve` finds, in the
imported module, the object holding that attribute or entry, and says clearly what is
missing when it is not there (with the closest name). How patches stack on the place is
:mod:`.patching`'s.

Cluster side: standard library only.
"""

from __future__ import annotations

import re
import types

from .errors import PatchTargetError
from .record import Record

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Any

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_TARGET_RE = re.compile(
    rf"^(?P<module>{_IDENT}(?:\.{_IDENT})*):(?P<path>{_IDENT}(?:\.{_IDENT})*)(?:\[(?P<key>[^\[\]]*)\])?$"
)
_BARE_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
_TARGET_FORMS = "'module:attr', 'module:Class.method' or 'module:REGISTRY[key]'"
NOT_FOUND_HINT = "check the target against the framework version installed in the job"
_NO_KEY = object()


class Target(Record):
    """A parsed patch target. ``str(target)`` is its canonical form (a key quoted only when it must be).

    Fields ``module``, ``path`` (tuple of attribute names) and ``key`` (None unless a
    registry entry); immutable, compared and hashed by value.
    """

    module: str
    path: tuple[str, ...]
    key: str | None
    __slots__ = ("module", "path", "key")

    def __init__(self, module: str, path: tuple, key: str | None = None) -> None:
        self._set(module, path, key)

    def __str__(self) -> str:
        text = f"{self.module}:{'.'.join(self.path)}"
        if self.key is not None:
            text += f"[{self.key}]" if _BARE_KEY_RE.match(self.key) else f"[{self.key!r}]"
        return text


def parse_target(text: str) -> Target:
    """Parse a target string.

    >>> parse_target("verl.trainer.ppo.core_algos:ADV_ESTIMATOR_REGISTRY[grpo]")
    Target(module='verl.trainer.ppo.core_algos', path=('ADV_ESTIMATOR_REGISTRY',), key='grpo')
    """
    if not isinstance(text, str):
        raise PatchTargetError(f"a patch target is a string, got {type(text).__name__} {text!r}", target=repr(text))
    match = _TARGET_RE.match(text.strip())
    if match is None:
        raise PatchTargetError(
            f"invalid patch target {text!r}: expected {_TARGET_FORMS}",
            target=text,
            hint="write the module's dotted name, a colon, then the attribute path",
        )
    key = match.group("key")
    if key is not None:
        key = key.strip()
        if len(key) >= 2 and key[0] == key[-1] and key[0] in "'\"":
            key = key[1:-1]
        elif not key:
            raise PatchTargetError(f"invalid patch target {text!r}: empty registry key", target=text)
    return Target(match.group("module"), tuple(match.group("path").split(".")), key)


def module_not_found(t: Target, exc: ModuleNotFoundError) -> PatchTargetError | None:
    """The error for importing *t*'s module when *exc* says that module (or a parent) does not
    exist; None when the missing module is one the target's module imports."""
    if exc.name and (t.module == exc.name or t.module.startswith(exc.name + ".")):
        return PatchTargetError(
            f"patch target '{t}' not found: no module named '{exc.name}'",
            target=str(t),
            missing="module",
            hint=NOT_FOUND_HINT + " (or pass when_imported=True to wait for a module imported later)",
        )
    return None


def resolve(t: Target, module: types.ModuleType, *, create: bool) -> tuple[Any, Any, bool, str]:
    """Where *t* points in its imported *module*: ``(owner, name, is_item, walked)``.

    *owner* holds the place: the object reached through the path (the registry itself for a
    ``[key]`` target); *name* is the attribute name or the registry's own key object;
    *walked* is how messages name *owner*. A missing attribute on the way, or a missing key
    (unless *create*), raises :class:`PatchTargetError`. Whether the final attribute exists
    is the caller's to check (:func:`no_attribute` makes the error).
    """
    walk = t.path if t.key is not None else t.path[:-1]
    obj: Any = module
    for i, part in enumerate(walk):
        try:
            obj_next = getattr(obj, part)
        except AttributeError:
            walked = f"{t.module}:{'.'.join(walk[:i])}" if i else t.module
            raise no_attribute(t, obj, walked, part) from None
        obj = obj_next
    walked = f"{t.module}:{'.'.join(walk)}" if walk else t.module
    if t.key is None:
        return obj, t.path[-1], False, walked
    if not all(hasattr(obj, m) for m in ("__getitem__", "__setitem__", "__contains__", "__iter__")):
        raise PatchTargetError(
            f"patch target '{t}': '{walked}' is {type(obj).__name__}, not a registry mapping",
            target=str(t),
        )
    name = _registry_key(obj, t.key)
    if name is _NO_KEY:
        if not create:
            keys = sorted(str(k) for k in obj)
            raise PatchTargetError(
                f"patch target '{t}' not found: '{walked}' has no key '{t.key}'"
                + _suggest(t.key, keys)
                + f" (keys: {', '.join(keys) if keys else 'none'})",
                target=str(t),
                missing="key",
                hint=NOT_FOUND_HINT,
            )
        name = t.key
    return obj, name, True, walked


def no_attribute(t: Target, obj: Any, walked: str, name: str) -> PatchTargetError:
    """The error for a target whose attribute *name* is missing on *obj* (reached as *walked*)."""
    return PatchTargetError(
        f"patch target '{t}' not found: {_describe(obj, walked)} has no attribute '{name}'" + _suggest(name, dir(obj)),
        target=str(t),
        missing="attribute",
        hint=NOT_FOUND_HINT,
    )


def _registry_key(owner: Any, key: str) -> Any:
    if key in owner:
        return key
    # Registries keyed by str-valued enums: match the key's value or name.
    matches = [k for k in owner if getattr(k, "value", None) == key or str(k) == key]
    return matches[0] if len(matches) == 1 else _NO_KEY


def _describe(obj: Any, walked: str) -> str:
    if isinstance(obj, types.ModuleType):
        return f"module '{obj.__name__}'"
    if isinstance(obj, type):
        return f"class '{walked}'"
    return f"'{walked}' ({type(obj).__name__})"


def _suggest(word: str, choices: Any) -> str:
    import difflib  # only when a target is missing

    names = [c for c in choices if isinstance(c, str)]
    match = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f" (did you mean '{match[0]}'?)" if match else ""
