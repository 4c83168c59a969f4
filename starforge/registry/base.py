"""The registry interface every backend implements, and plugin references.

A published plugin version is identified by ``owner/name@version`` and bound to its tree
digest. Versions are immutable: the same tree digest again is a no-op, another digest under
a published version is refused.

>>> parse_ref("alice/opsd-patch@~=1.2")
Ref(owner='alice', name='opsd-patch', specifier='~=1.2')
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import UsageError
from ..manifest import NAME_MAX, NAME_RE


Progress = Callable[[int, int], None]  # (bytes done, bytes total); total 0 when unknown


@dataclass(frozen=True)
class Ref:
    """A plugin request: exact (``owner/name@1.2.0``), a specifier (``@~=1.2``) or bare (newest)."""

    owner: str
    name: str
    specifier: str | None = None

    def __str__(self) -> str:
        return f"{self.owner}/{self.name}" + (f"@{self.specifier}" if self.specifier else "")


def parse_ref(text: str) -> Ref:
    """Parse ``owner/name[@VERSION|@SPECIFIER]``; raise :class:`UsageError` when malformed."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    base, _, spec = text.strip().partition("@")
    owner, slash, name = base.partition("/")
    if not slash:
        raise UsageError(f"'{text}' is not a plugin reference", hint="write owner/name, owner/name@1.2.0 or owner/name@~=1.2")
    for part, what in ((owner, "owner"), (name, "name")):
        if not NAME_RE.match(part) or len(part) > NAME_MAX:
            raise UsageError(f"'{text}': '{part}' is not a valid {what}", hint="lowercase letters, digits and single dashes")
    spec = spec.strip() or None
    if spec is not None:
        try:
            Version(spec)
            spec = f"=={spec}"
        except InvalidVersion:
            try:
                SpecifierSet(spec)
            except InvalidSpecifier:
                raise UsageError(f"'{text}': '{spec}' is neither a version nor a version specifier") from None
    return Ref(owner=owner, name=name, specifier=spec)


@dataclass(frozen=True)
class PublishedVersion:
    """What a registry knows of one published version."""

    owner: str
    name: str
    version: str  # canonical PEP 440 string, also the OCI tag
    tree_digest: str  # sf1:...
    artifact_digest: str  # sha256:<hex> of the archive bytes (a transport detail)
    manifest: dict  # the plugin.yaml content as JSON data (PluginManifest.to_dict())
    files: dict = field(default_factory=dict)  # relpath -> sha256 hex
    top_level: tuple = ()  # importable top-level module names of the package root
    size: int = 0  # archive size in bytes
    signed: bool = False  # a signature envelope is stored beside it

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.name}@{self.version}"


@dataclass(frozen=True)
class PublishResult:
    version: PublishedVersion
    created: bool  # False: the same tree digest was already published (no-op success)
    signature_attached: bool = False  # True: the signature passed to publish() was stored by this call


class Registry(abc.ABC):
    """One store of plugin versions. Implementations: directory, OCI."""

    url: str

    @abc.abstractmethod
    def versions(self, owner: str, name: str) -> list:
        """Published versions (canonical strings) of owner/name; [] when none."""

    @abc.abstractmethod
    def get(self, owner: str, name: str, version: str) -> PublishedVersion:
        """Metadata of one version; :class:`NotFoundError` when absent."""

    @abc.abstractmethod
    def plugins(self, owner: str | None = None) -> list:
        """``(owner, name)`` pairs, sorted, optionally for one owner."""

    @abc.abstractmethod
    def publish(
        self, archive: Path, info: PublishedVersion, signature: bytes | None = None, progress: Progress | None = None
    ) -> PublishResult:
        """Store *archive* under ``info.owner/info.name@info.version``, immutably.

        A version equal by PEP 440 to a published one (``1.2`` vs ``1.2.0``) is the same
        version. When *progress* is given, call it as ``progress(bytes_sent, total)``.
        """

    @abc.abstractmethod
    def download(self, info: PublishedVersion, dest: Path, progress: Progress | None = None) -> None:
        """Write the archive bytes of *info* to *dest*, checked against ``info.artifact_digest``.

        When *progress* is given, call it as ``progress(bytes_received, total)`` while writing.
        """

    @abc.abstractmethod
    def signature(self, info: PublishedVersion) -> bytes | None:
        """The DSSE envelope bytes stored for *info*, or None."""
