"""One exception tree for StarForge; each class a failure a user can act on.

Every class carries the process exit code the CLI ends with. The base class and the
errors the cluster side raises live in :mod:`starforge.cluster.errors` (the launcher
ships them); the laptop's own are below.

>>> raise ManifestError("plugin.yaml:3: unknown key 'entry_point'", hint="did you mean 'entrypoint'?")
"""

from __future__ import annotations

from typing import Iterable

from .cluster.errors import (  # noqa: F401  (one hierarchy: the laptop raises these too)
    ForgeError,
    InstallError,
    PatchError,
    PatchTargetError,
    SignatureError,
    SpecError,
    UsageError,
    VerificationError,
)


class ManifestError(ForgeError):
    """A plugin.yaml, forge.yaml or user config.yaml that is not valid (file, line, key in the message)."""

    exit_code = 3
    also: tuple = ()  # further errors found in the same file (plugin.yaml reports them all)


class CheckError(ForgeError):
    """A plugin tree that fails the static checks of ``forge plugin check``."""

    exit_code = 4


class ArchiveError(ForgeError):
    """A package archive that cannot be written or is refused on unpacking."""

    exit_code = 5


class BundleError(ArchiveError):
    """A bundle (``forge bundle``) that is malformed, truncated or altered."""

    exit_code = 5


class RegistryError(ForgeError):
    """The registry cannot be reached or answered with an error."""

    exit_code = 6


class TamperedError(RegistryError):
    """A registry record, OCI config or annotation, bundle or lock entry that disagrees with
    what the digest-verified tree says, or answers for another plugin: someone edited it."""

    exit_code = 6


class NotFoundError(RegistryError):
    """No such plugin, version or registry."""

    exit_code = 7


class NoRegistryError(NotFoundError):
    """The registry named is not there at all (a mistyped path): not a missing version."""


class ImmutableVersionError(RegistryError):
    """A published version would be replaced by other content."""

    exit_code = 8


class LockError(ForgeError):
    """A lock file that is missing, stale, or cannot be resolved."""

    exit_code = 15


class BackendError(ForgeError):
    """A backend that cannot stage, submit or query a job."""

    exit_code = 16


class RemovalError(ForgeError):
    """``forge jobs rm`` / ``prune`` could not delete all of a job's directory: its record is kept.

    ``removed`` holds the ids of the jobs that did go (before or after the one that did not).
    """

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None, removed: Iterable[str] = ()) -> None:
        super().__init__(message, hint=hint)
        self.removed = list(removed)


class PrepError(ForgeError):
    """``forge prep`` stopped on a record (the message names the input line) or on the plugin."""

    exit_code = 17


class YankedError(ForgeError):
    """A locked plugin version its publisher yanked (``forge plugin yank``), not acknowledged
    in ``forge.yaml``: the message names the reason and the newest version not yanked."""

    exit_code = 18


# Results that are not errors (docs/errors.md "Results that are not errors"): an answer
# "yes" to a command's question, by codes no error class above uses.
DIFFERS_EXIT = 20  # forge lock diff, forge plugin diff: the two sides differ
CONFLICT_EXIT = 21  # forge plan: the patch ledger has a conflict forge.yaml does not acknowledge
AUDIT_FOUND = 22  # forge audit: a job ran a version yanked now
