"""The registry interface every registry kind implements, and plugin references.

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

from ..cluster.names import is_plugin_name
from ..errors import UsageError

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
    from packaging.version import InvalidVersion, Version

    base, _, written = text.strip().partition("@")
    owner, slash, name = base.partition("/")
    if not slash:
        raise UsageError(f"'{text}' is not a plugin reference", hint="write owner/name, owner/name@1.2.0 or owner/name@~=1.2")
    for part, what in ((owner, "owner"), (name, "name")):
        if not is_plugin_name(part):
            raise UsageError(f"'{text}': '{part}' is not a valid {what}", hint="lowercase letters, digits and single dashes")
    spec = written.strip() or None
    if spec is not None:
        try:
            Version(spec)
            spec = f"=={spec}"
        except InvalidVersion:
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

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

    def recorded_entry(self):
        """The JobSpec's entry for this version as its record states it (the registry's word,
        which ``forge plugin diff`` shows; what a lock or a job acts on is read from the
        verified tree instead: :meth:`~starforge.registry.verified.VerifiedTree.plugin_entry`)."""
        from ..package_format.manifest import PluginManifest

        manifest = PluginManifest.from_mapping(self.manifest, source=f"{self.ref}: the registry record")
        return manifest.plugin_entry(self.tree_digest, self.top_level, self.files, owner=self.owner, version=self.version)


@dataclass(frozen=True)
class PublishResult:
    version: PublishedVersion
    created: bool  # False: the same tree digest was already published (no-op success)
    signature_attached: bool = False  # True: the signature passed to publish() was stored by this call
    signature_kept: bool = False  # True: a valid signature by the same key was already stored (nothing added)


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
        """The DSSE envelope bytes stored for *info* (the newest, where there are several), or None."""

    def attach_signature(self, info: PublishedVersion, envelope: bytes) -> bool:
        """Store *envelope* beside the published *info*; True when the registry now serves it
        (it was there already, or was added), False when it keeps one envelope per version and
        holds another one."""
        return envelope in self.signatures(info)

    def signatures(self, info: PublishedVersion) -> list:
        """Every DSSE envelope stored for *info* (a re-sign or a rotated key adds one), newest last."""
        envelope = self.signature(info)
        return [] if envelope is None else [envelope]

    def sigstore_bundles(self, info: PublishedVersion) -> list:
        """The Sigstore bundles (JSON bytes) stored beside *info*'s envelopes; [] for a registry that keeps none."""
        return []

    def yank_statements(self, owner: str, name: str, version: str, tree_digest: str) -> list:
        """The yank and unyank statements (DSSE envelope bytes, :mod:`starforge.registry.yank`)
        stored beside ``owner/name@version``; :class:`NotFoundError` when that version with
        *tree_digest* is not here."""
        from ..errors import RegistryError

        raise RegistryError(f"registry {self.url} cannot hold yank statements")

    def attach_yank_statement(self, owner: str, name: str, version: str, tree_digest: str, envelope: bytes) -> None:
        """Store a yank or unyank statement beside the published version (which must hold *tree_digest*)."""
        from ..errors import RegistryError

        raise RegistryError(f"registry {self.url} cannot hold yank statements")


def check_identity(registry_url: str, where: str, asked: tuple, record: dict) -> None:
    """Refuse a record whose owner, name or version is not the ``(owner, name, version)`` asked for.

    *record* maps ``owner``, ``name``, ``version`` (and optionally ``manifest``, the
    plugin.yaml content with its own ``name`` and ``version``) to what the registry returned
    at *where*. Whoever can write the registry must not be able to make a version answer
    for another owner (whose keys the consumer does not trust): a mismatch is a tampered
    registry, never a reason to go on (SPEC §5).

    >>> check_identity("reg", "x.json", ("alice", "sp", "0.1.0"), {"owner": "mallory", "name": "sp", "version": "0.1.0"})
    Traceback (most recent call last):
    starforge.errors.TamperedError: registry reg is tampered: x.json answers for mallory/sp@0.1.0, asked for alice/sp@0.1.0
    """
    from packaging.version import InvalidVersion, Version

    owner, name, version = asked

    def same_version(got) -> bool:
        try:
            return isinstance(got, str) and Version(got) == Version(version)
        except InvalidVersion:
            return False

    got = (record.get("owner"), record.get("name"), record.get("version"))
    problem = None
    if got[0] != owner or got[1] != name or not same_version(got[2]):
        problem = f"answers for {got[0]}/{got[1]}@{got[2]}"
    manifest = record.get("manifest")
    if problem is None and manifest is not None:
        m_name = manifest.get("name") if isinstance(manifest, dict) else None
        m_version = manifest.get("version") if isinstance(manifest, dict) else None
        if m_name != name or not same_version(str(m_version) if m_version is not None else None):
            problem = f"holds the plugin.yaml of {m_name}@{m_version}"
    if problem is not None:
        from ..errors import TamperedError
        from ..urls import mask_url

        raise TamperedError(
            f"registry {mask_url(registry_url)} is tampered: {where} {problem}, asked for {owner}/{name}@{version}",
            hint="nothing was pulled; whoever can write that registry changed its records — tell its owner, "
            "and do not use it until it is restored",
        )

