"""A backend that exists only in the tests: one module, registered by one line.

``tiny`` runs a job as the local backend does; it owns the ``tiny:`` section of
``forge.yaml`` (a ``greeting``, default ``hello``, and the job's ``python``). It is the
proof that a new backend needs no edit under ``starforge/``: the tests register it with
:data:`REGISTRATION`, the same one line a built-in backend has in ``BACKENDS``.

``python -c 'import tiny_backend; tiny_backend.main()' ARGS`` is ``forge ARGS`` with
``tiny`` registered (``tests/backends`` on ``PYTHONPATH``).
"""

from __future__ import annotations

from starforge.backends import BACKENDS, Registration
from starforge.backends.local import LocalBackend
from starforge.errors import ManifestError

# the one line (docs/architecture.md, "Where to add"): name -> where the class is
REGISTRATION = ("tiny", Registration("tiny_backend:TinyBackend"))


class TinyBackend(LocalBackend):
    """The local backend under another name, with a forge.yaml section of its own."""

    name = "tiny"
    settings_keys = ("greeting", "python")

    @classmethod
    def check_settings(cls, settings):
        out = super().check_settings(settings)  # unknown keys refused, as for ray: and slurm:
        greeting = out.setdefault("greeting", "hello")
        if not isinstance(greeting, str) or not greeting:
            raise ManifestError(f"forge.yaml: tiny.greeting: expected a non-empty string, got {greeting!r}")
        return out


def main() -> None:
    """``forge`` with ``tiny`` registered in this process."""
    from starforge.cli.main import main as forge

    name, entry = REGISTRATION
    BACKENDS[name] = entry
    forge()
