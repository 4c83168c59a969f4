"""One exception tree for StarForge; each class a failure a user can act on.

Every class carries the process exit code the CLI or the launcher ends with.
Cluster side: standard library only.

>>> raise ManifestError("plugin.yaml:3: unknown key 'entry_point'", hint="did you mean 'entrypoint'?")
"""

from __future__ import annotations


class ForgeError(Exception):
    """Base class. ``message`` is one line; ``hint`` tells the user what to do next."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


# -- laptop side --------------------------------------------------------------------------

class UsageError(ForgeError):
    """Bad command-line usage or a bad argument value."""

    exit_code = 2


class ManifestError(ForgeError):
    """A plugin.yaml, forge.yaml or user config.yaml that is not valid (file, line, key in the message)."""

    exit_code = 3


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


class NotFoundError(RegistryError):
    """No such plugin, version or registry."""

    exit_code = 7


class ImmutableVersionError(RegistryError):
    """A published version would be replaced by other content."""

    exit_code = 8


class SignatureError(ForgeError):
    """A signature that is missing, invalid, or made by an untrusted key."""

    exit_code = 9


class LockError(ForgeError):
    """A lock file that is missing, stale, or cannot be resolved."""

    exit_code = 15


class BackendError(ForgeError):
    """A backend that cannot stage, submit or query a job."""

    exit_code = 16


# -- cluster side (exit codes fixed by the launcher contract) ---------------------------

class SpecError(ForgeError):
    """A JobSpec that is malformed, or bad launcher usage."""

    exit_code = 2


class VerificationError(ForgeError):
    """A plugin tree whose files do not match the digest in the spec."""

    exit_code = 10


class RequirementError(ForgeError):
    """A plugin whose ``requires`` (core, python, packages) is not met here."""

    exit_code = 11


class PluginImportError(ForgeError):
    """A plugin entrypoint that cannot be imported or is not callable."""

    exit_code = 12


class InstallError(ForgeError):
    """A plugin's ``install`` hook raised."""

    exit_code = 13


class DeferredNotInstalledError(ForgeError):
    """A deferred plugin the training entrypoint never installed (strict mode)."""

    exit_code = 14


class PatchError(ForgeError):
    """A patch made through ``starforge.patching`` that cannot be applied or undone.

    Raised inside a plugin's ``install``, so the launcher reports it as an install failure.
    """

    exit_code = 13


class PatchTargetError(PatchError):
    """A patch target whose module, attribute or registry key does not exist (or cannot be patched).

    ``target`` is the target string, ``missing`` the piece that is absent (``"module"``,
    ``"attribute"``, ``"key"``) or ``"target"`` for a target that is malformed or unsuitable.
    """

    def __init__(self, message: str, *, target: str = "", missing: str = "target", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.target = target
        self.missing = missing
