"""The errors of the cluster side; each class carries the exit code the launcher ends with.

The launcher's contract (SPEC §9) gives each phase of a launch one code (the numbers are
:mod:`.status`'s, which the node entry shares); a
:class:`LaunchFailure` is built from the class of its phase, so no call site spells a
number. The laptop's errors (:mod:`starforge.errors`) derive from :class:`ForgeError` too:
one hierarchy, caught by meaning.

>>> LaunchFailure(RequirementError, "alice/p@1.0.0", "alice/p@1.0.0 requires python >=3.12").code
11
"""

from __future__ import annotations

from .status import DEFERRED_EXIT, IMPORT_EXIT, INSTALL_EXIT, REQUIRES_EXIT, SPEC_EXIT, VERIFY_EXIT


class ForgeError(Exception):
    """Base class. ``message`` is one line; ``hint`` tells the user what to do next."""

    exit_code = 1
    phase = "spec"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(ForgeError):
    """Bad command-line usage or a bad argument value."""

    exit_code = 2


class SpecError(ForgeError):
    """A JobSpec that is malformed, or bad launcher usage."""

    exit_code = SPEC_EXIT
    phase = "spec"


class SignatureError(ForgeError):
    """A signature that is missing, invalid, or made by an untrusted key."""

    exit_code = 9


class VerificationError(ForgeError):
    """A plugin tree whose files (or carried signature) do not match the spec."""

    exit_code = VERIFY_EXIT
    phase = "verify"


class RequirementError(ForgeError):
    """A plugin whose ``requires`` (core, python, packages) is not met here."""

    exit_code = REQUIRES_EXIT
    phase = "requires"


class PluginImportError(ForgeError):
    """A plugin entrypoint that cannot be imported or is not callable."""

    exit_code = IMPORT_EXIT
    phase = "import"


class InstallError(ForgeError):
    """A plugin's ``install`` hook raised."""

    exit_code = INSTALL_EXIT
    phase = "install"


class DeferredNotInstalledError(ForgeError):
    """A deferred plugin the training entrypoint never installed (strict mode)."""

    exit_code = DEFERRED_EXIT
    phase = "install"


class PatchError(ForgeError):
    """A patch made through ``starforge.patching`` that cannot be applied or undone.

    Raised inside a plugin's ``install``, so the launcher reports it as an install failure;
    raised by the import a ``when_imported`` patch waited for, it carries ``plugin`` (the
    patch's plugin) and the launcher reports it the same way.
    """

    exit_code = INSTALL_EXIT
    plugin: str | None = None


class PatchTargetError(PatchError):
    """A patch target whose module, attribute or registry key does not exist (or cannot be patched).

    ``target`` is the target string, ``missing`` the piece that is absent (``"module"``,
    ``"attribute"``, ``"key"``) or ``"target"`` for a target that is malformed or unsuitable.
    """

    def __init__(self, message: str, *, target: str = "", missing: str = "target", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.target = target
        self.missing = missing


class LaunchFailure(Exception):
    """A plugin (or the spec) stopped the job: phase, exit code, plugin ref, message.

    *kind* is the error class of the phase (its ``phase`` and ``exit_code``); *code*
    overrides the exit code only for the entrypoint's own (phase ``entrypoint``).
    """

    def __init__(
        self,
        kind: type[ForgeError],
        plugin: str | None,
        message: str,
        detail: str = "",
        *,
        phase: str | None = None,
        code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.phase: str = phase or kind.phase
        self.code: int = kind.exit_code if code is None else code
        self.plugin = plugin
        self.message = message
        self.detail = detail  # a traceback, when one explains the failure

    @classmethod
    def entrypoint(cls, code: int, message: str) -> LaunchFailure:
        """The training entrypoint ended with *code* (its own exit code, not one of ours)."""
        return cls(ForgeError, None, message, phase="entrypoint", code=code)

    @classmethod
    def from_error(cls, exc: ForgeError, plugin: str | None = None, message: str | None = None) -> LaunchFailure:
        return cls(type(exc), plugin, exc.message if message is None else message)

    def to_dict(self) -> dict:
        return {"phase": self.phase, "code": self.code, "plugin": self.plugin, "message": self.message}
