"""Record: the base of the small immutable value classes the cluster side passes around.

What ``@dataclass(frozen=True)`` gives, without importing ``dataclasses`` (and, through it,
``inspect``): that import costs several milliseconds in every process of a job.

A subclass lists its fields in ``__slots__`` (``_fields`` is set to the same tuple) and
writes an ``__init__`` that takes them positionally in that order, with its own defaults,
and stores them with ``self._set(...)``. It then has:

- no assignment or deletion of fields (``AttributeError``);
- equality with an instance of exactly the same class, field by field (anything else:
  ``NotImplemented``);
- a hash of the field values (so a record holding a list or dict is unhashable, as a
  frozen dataclass holding one is);
- ``Name(field=value, ...)`` as repr;
- pickling and copying through ``__init__`` with the field values.

Shared: standard library only.
"""

from __future__ import annotations


class Record:
    """Immutable value object: fields set once by ``__init__``, compared and hashed by value."""

    __slots__ = ()
    _fields: tuple = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._fields = tuple(cls.__slots__)

    def _set(self, *values) -> None:
        """Store *values* in the fields, in ``_fields`` order (for ``__init__`` only)."""
        if len(values) != len(self._fields):
            raise TypeError(f"{type(self).__qualname__} has {len(self._fields)} fields, got {len(values)} values")
        for name, value in zip(self._fields, values):
            object.__setattr__(self, name, value)

    def _values(self) -> tuple:
        return tuple(getattr(self, f) for f in self._fields)

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"cannot delete field {name!r}")

    def __eq__(self, other):
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self):
        return hash(self._values())

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields) + ")"

    def __reduce__(self):
        return (self.__class__, self._values())

    def replace(self, **changes):
        """A copy with the named fields changed (``spec.replace(backend="ray")``); an unknown name raises."""
        unknown = set(changes) - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__qualname__} has no field {sorted(unknown)[0]!r}")
        return self.__class__(*(changes[f] if f in changes else getattr(self, f) for f in self._fields))
