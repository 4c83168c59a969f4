"""Option choices read from a table when asked, not copied when the command is defined.

Laptop side; click only, plus the backends table.
"""

from __future__ import annotations

import click

from ..backends import backend_names


class BackendChoice(click.Choice):
    """``--backend NAME``: one of :data:`starforge.backends.BACKENDS`, as the table is now
    (so a backend registered after the command was imported is offered too)."""

    def __init__(self) -> None:
        super().__init__(backend_names())

    @property
    def choices(self) -> tuple[str, ...]:
        return backend_names()

    @choices.setter
    def choices(self, value) -> None:  # click.Choice.__init__ assigns it; the table is the truth
        pass
