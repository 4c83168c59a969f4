"""Backends run a staged job directory somewhere: ``local`` (a subprocess), ``ray``, ``slurm``.

The interface and the job record are in :mod:`starforge.backends.base`; where records live
is :mod:`starforge.jobs.store`.

Adding a backend is one module and one line: the module (``backends/<name>.py``) holds a
:class:`~starforge.backends.base.Backend` subclass, which owns its ``forge.yaml`` section
(``settings_keys``, ``check_settings``: the keys, their defaults and their checks); the line
goes in :data:`BACKENDS`. Everything that lists or opens backends reads that table when
asked: ``forge submit --backend`` / ``forge plan --backend`` choices, forge.yaml's
``backend:`` check and its top-level keys, :func:`~starforge.backends.base.get_backend`.
"""

from __future__ import annotations

from typing import NamedTuple


class Registration(NamedTuple):
    """One backend of the table: where its class is, and whether it has a forge.yaml section."""

    target: str  # "module:class"; the module is imported only when the backend is used
    section: bool = True  # forge.yaml's top-level `<name>:` mapping holds this backend's settings


# The one table of backends: name -> Registration, in the order they are listed. A backend
# registered at run time (a test's: BACKENDS["name"] = Registration(...)) is listed too.
BACKENDS: dict[str, Registration] = {
    "local": Registration("starforge.backends.local:LocalBackend", section=False),
    "ray": Registration("starforge.backends.ray:RayBackend"),
    "slurm": Registration("starforge.backends.slurm:SlurmBackend"),
}


def backend_names() -> tuple[str, ...]:
    """Every backend's name, in table order."""
    return tuple(BACKENDS)


def settings_sections() -> tuple[str, ...]:
    """The backends with a ``forge.yaml`` section of their settings (its key is the name)."""
    return tuple(name for name, entry in BACKENDS.items() if entry.section)
