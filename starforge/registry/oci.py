"""Plugin versions stored as OCI artifacts in any distribution registry.

Layout of ``owner/name@version`` under ``oci://host[:port]/prefix``:

- repository ``prefix/owner/name`` (lowercase), tag = the canonical version;
- an OCI image manifest with ``artifactType`` :data:`ARTIFACT_TYPE`;
- config blob (:data:`CONFIG_TYPE`): canonical JSON ``{"schema": "forge/oci-config/v1",
  "owner", "name", "version", "tree_digest", "manifest", "files", "top_level"}`` where
  ``manifest`` is the plugin.yaml content and ``files`` the per-file sha256 map (kept out of
  the annotations: a 10,000-file map would not fit a registry's manifest size limit);
- one layer (:data:`LAYER_TYPE`): the package archive;
- annotations: tree digest, reference, top-level names, and the standard
  ``org.opencontainers.image.title`` / ``.version``. No creation time, so the same content
  always gives the same manifest digest.

The manifests and config blob are built by :mod:`.artifact`, the one builder that bundles
(:mod:`starforge.bundle`) use too, so a version has the same manifest digest in either.

A signature is a second manifest (``artifactType`` :data:`SIGNATURE_TYPE`, empty config, the
DSSE envelope as its one layer) whose ``subject`` is the plugin manifest, and beside it a
third, its Sigstore bundle (``artifactType`` :data:`BUNDLE_TYPE`, what cosign and ``oras
discover`` list). They are found through the referrers API or, where the registry lacks
one, the referrers tag ``sha256-<hex>`` that holds an image index of referrers (OCI
distribution-spec 1.1), updated read-modify-write: after a write the index is read again,
and once more a few of our own round trips later, so that a signer racing us cannot drop
our entry unnoticed; a registry whose tags are immutable refuses the second update of that tag,
which is reported as such.

A registry has no conditional tag write: publish checks the tag before pushing, again just
before writing it, right after, and once more after a short settle delay
(:data:`SETTLE_DELAY`, longer when the registry answers slowly: :data:`SETTLE_GAPS`); a
publisher that finds other content (another tree-digest
annotation) under the tag reports the conflict. Registry-side tag immutability (Harbor,
ECR) is the real guard.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from ..cluster.digest import digest_of_map, is_digest
from ..cluster.names import is_plugin_name
from ..errors import ImmutableVersionError, NotFoundError, RegistryError, UsageError
from ..package_format.manifest import canonical_version
from ..state.directories import make_dirs
from .artifact import (  # noqa: F401  (ARTIFACT_TYPE, CONFIG_TYPE: re-exported)
    ANN_TREE_DIGEST,
    ARTIFACT_TYPE,
    BUNDLE_TYPE,
    CONFIG_TYPE,
    LAYER_TYPE,
    SIGNATURE_TYPE,
    bundle_artifact,
    bundle_descriptor,
    canonical_json,
    envelope_descriptor,
    is_plugin_manifest,
    plugin_artifact,
    plugin_parts,
    plugin_version,
    referrers_tag,
    signature_artifact,
)
from .base import Progress, PublishedVersion, PublishResult, Registry
from .oci_client import (
    EMPTY_JSON,
    OCI_INDEX,
    OCI_MANIFEST,
    Fetched,
    ManifestBlobUnknownError,
    OciClient,
    file_digest,
    sha256_digest,
)
from .oci_credentials import find_credentials
from .oci_location import parse_oci_url
from .oci_tls import registry_trust

CONFIG_MAX = 64 << 20
# After writing a tag, publish reads it back, waits this long and reads it once more: a
# racing publisher that read the tag before our write lands its own within milliseconds.
SETTLE_DELAY = 0.5
SETTLE_GAPS = 4  # ... or this many times our own look-then-write round trip, when longer
SIGNATURE_MAX = 1 << 20
# A manifest PUT refused with MANIFEST_BLOB_UNKNOWN for blobs we pushed is retried after
# pushing those blobs again, at most this many PUTs in all (see _put_manifest).
BLOB_RACE_ATTEMPTS = 3


def _counter(progress: Progress | None, total: int):
    """Turn ``progress(done, total)`` into the client's ``update(delta)``."""
    if progress is None:
        return None
    done = 0

    def update(delta: int) -> None:
        nonlocal done
        done += delta
        progress(done, total)

    return update


class OciRegistry(Registry):
    """A :class:`Registry` on an OCI distribution registry (``oci://host[:port]/prefix``)."""

    def __init__(
        self,
        url: str,
        *,
        insecure: bool = False,
        ca_file: str | Path | None = None,
        retries: int = 4,
        backoff: float = 0.25,
        chunk_size: int | None = None,
        settle_delay: float = SETTLE_DELAY,
    ) -> None:
        """*ca_file* (``--ca-file``): a CA that signs the registry's certificate, over the
        user config's ``ca_file`` for its host (:mod:`.oci_tls`)."""
        self.url = url
        self.settle_delay = settle_delay
        self.location = parse_oci_url(url)
        kwargs = {"chunk_size": chunk_size} if chunk_size else {}
        self.client = OciClient(self.location, insecure=insecure, credentials=lambda: find_credentials(self.location.host),
                                trust=registry_trust(self.location.host, ca_file), retries=retries, backoff=backoff,
                                **kwargs)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "OciRegistry":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- naming ---------------------------------------------------------------------------

    def repository(self, owner: str, name: str) -> str:
        for part, what in ((owner, "owner"), (name, "name")):
            if not is_plugin_name(part):
                raise UsageError(f"'{part}' is not a valid {what}", hint="lowercase letters, digits and single dashes")
        return self.location.repository(owner, name)

    @staticmethod
    def _tag(version: str) -> str:
        try:
            return canonical_version(version)
        except ValueError:
            raise UsageError(f"'{version}' is not a valid version") from None

    # -- reading ----------------------------------------------------------------------------

    def versions(self, owner: str, name: str) -> list:
        from packaging.version import Version

        out = []
        for tag in self.client.tags(self.repository(owner, name)):
            if tag.startswith("sha256-"):
                continue  # referrers index, not a version
            try:
                if canonical_version(tag) == tag:
                    out.append(tag)
            except ValueError:
                continue
        return sorted(out, key=Version)

    def plugins(self, owner: str | None = None) -> list:
        prefix = self.location.prefix + "/" if self.location.prefix else ""
        found = []
        for repo in self.client.catalog():
            if not repo.startswith(prefix):
                continue
            parts = repo[len(prefix):].split("/")
            if len(parts) != 2 or not all(is_plugin_name(p) for p in parts):
                continue
            if owner is not None and parts[0] != owner:
                continue
            # A repository left by an interrupted upload, or holding foreign images, has no versions.
            if self.versions(parts[0], parts[1]):
                found.append((parts[0], parts[1]))
        return sorted(found)

    def _equal_tags(self, repo: str, tag: str) -> list[str]:
        """Tags of *repo* equal to *tag* by PEP 440 (``1.2`` and ``1.2.0``), in listing order."""
        from packaging.version import InvalidVersion, Version

        wanted = Version(tag)
        out = []
        for other in self.client.tags(repo):
            if other.startswith("sha256-"):
                continue
            try:
                if Version(other) == wanted and canonical_version(other) == other:
                    out.append(other)
            except (InvalidVersion, ValueError):
                continue
        return out

    def _manifest(self, owner: str, name: str, version: str) -> tuple[Fetched, dict] | None:
        """The plugin manifest stored for *version* (under its own or a PEP 440-equal tag), or None."""
        repo = self.repository(owner, name)
        tag = self._tag(version)
        got = self.client.get_manifest(repo, tag)
        if got is None:
            for other in self._equal_tags(repo, tag):
                got = self.client.get_manifest(repo, other)
                if got is not None:
                    tag = other
                    break
        if got is None:
            return None
        data = got.json()
        if not is_plugin_manifest(data):
            raise RegistryError(f"{repo}:{tag} is not a StarForge plugin (artifactType {data.get('artifactType')!r})",
                                hint="the repository holds something else; use another prefix")
        return got, data

    def get(self, owner: str, name: str, version: str) -> PublishedVersion:
        found = self._manifest(owner, name, version)
        if found is None:
            raise NotFoundError(f"{owner}/{name}@{version} is not in {self.url}",
                                hint=f"published versions: {', '.join(self.versions(owner, name)) or 'none'}")
        got, data = found
        return self._describe(owner, name, version, got, data)

    def _describe(self, owner: str, name: str, version: str, got: Fetched, data: dict) -> PublishedVersion:
        repo = self.repository(owner, name)
        where = f"{repo}@{got.digest}"
        _, config_desc, _ = plugin_parts(data, where)
        config_raw = self.client.read_blob(repo, config_desc["digest"], int(config_desc.get("size", -1)), CONFIG_MAX)
        return plugin_version((owner, name, version), data, config_raw, where, self.url,
                              signed=bool(self._signatures(repo, got.digest)))

    def download(self, info: PublishedVersion, dest: Path, progress: Progress | None = None) -> None:
        repo = self.repository(info.owner, info.name)
        size = info.size
        if size <= 0:
            size = self._checked(info)[1]
        dest = Path(dest)
        make_dirs(dest.parent)
        # Written to *dest* directly: the caller (the cache) writes through a temp file of
        # its own and renames it into place only once its digest checked out.
        try:
            with open(dest, "wb") as out:
                self.client.fetch_blob(repo, info.artifact_digest, size, out, _counter(progress, size))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(dest)
            raise

    def _checked(self, info: PublishedVersion) -> tuple[Fetched, int]:
        """The manifest now under the tag, and its layer size; raise when the tag moved."""
        found = self._manifest(info.owner, info.name, info.version)
        if found is None:
            raise NotFoundError(f"{info.ref} is not in {self.url}")
        got, data = found
        tree = (data.get("annotations") or {}).get(ANN_TREE_DIGEST)
        if tree != info.tree_digest:
            raise ImmutableVersionError(
                f"{info.ref} now holds tree digest {tree}, not {info.tree_digest}",
                hint="the tag was moved in the registry; enable tag immutability there and republish as a new version")
        layer: dict = next((d for d in data.get("layers") or [] if d.get("mediaType") == LAYER_TYPE), {})
        return got, int(layer.get("size", 0))

    # -- signatures ---------------------------------------------------------------------------

    def _signatures(self, repo: str, subject: str, artifact_type: str = SIGNATURE_TYPE) -> list[dict]:
        """Descriptors of signature manifests (or of *artifact_type*) referring to *subject*, oldest first where known."""
        found = self.client.referrers(repo, subject, artifact_type)
        if not found:
            # No referrers API (or an empty answer after an upgrade): the referrers tag.
            index = self.client.get_manifest(repo, referrers_tag(subject), accept=(OCI_INDEX,))
            found = (index.json().get("manifests") or []) if index is not None else []
        return [d for d in found if isinstance(d, dict) and self._artifact_type(repo, d) == artifact_type]

    def _artifact_type(self, repo: str, descriptor: dict) -> str | None:
        """The artifact type of a referrer: its descriptor's ``artifactType`` or, where a copy
        dropped it (skopeo rewrites a referrers index without it), the manifest's own, as the
        OCI 1.1 referrers rules derive it (``artifactType``, else the config media type)."""
        if "artifactType" in descriptor:
            return descriptor["artifactType"]
        digest = descriptor.get("digest")
        if descriptor.get("mediaType") != OCI_MANIFEST or not isinstance(digest, str) or not digest.startswith("sha256:"):
            return None
        got = self.client.get_manifest(repo, digest)
        if got is None:
            return None
        data = got.json()
        found = data.get("artifactType") or (data.get("config") or {}).get("mediaType")
        return found if isinstance(found, str) else None

    def sigstore_bundles(self, info: PublishedVersion) -> list:
        """The Sigstore bundles stored as referrers of *info*'s manifest."""
        repo = self.repository(info.owner, info.name)
        got, _ = self._checked(info)
        out: list = []
        for desc in self._signatures(repo, got.digest, BUNDLE_TYPE):
            ref = self.client.get_manifest(repo, desc["digest"])
            layer = bundle_descriptor(ref.json(), got.digest) if ref is not None else None
            if layer is not None:
                out.append(self.client.read_blob(repo, layer["digest"], int(layer.get("size", -1)), SIGNATURE_MAX))
        return out

    def signature(self, info: PublishedVersion) -> bytes | None:
        found = self._envelopes(info, newest_only=True)
        return found[-1] if found else None

    def signatures(self, info: PublishedVersion) -> list:
        return self._envelopes(info)

    def attach_signature(self, info: PublishedVersion, envelope: bytes) -> bool:
        if envelope in self._envelopes(info):
            return True
        repo = self.repository(info.owner, info.name)
        got, _ = self._checked(info)
        subject = {"mediaType": OCI_MANIFEST, "digest": got.digest, "size": len(got.body)}
        self._attach_signature(repo, subject, envelope, info.ref)
        return True

    def _envelopes(self, info: PublishedVersion, newest_only: bool = False) -> list:
        """The envelopes referring to *info*'s manifest, oldest first (only the newest with *newest_only*)."""
        repo = self.repository(info.owner, info.name)
        got, _ = self._checked(info)
        out: list = []
        for desc in reversed(self._signatures(repo, got.digest)):
            sig = self.client.get_manifest(repo, desc["digest"])
            if sig is None:
                continue
            layer = envelope_descriptor(sig.json(), got.digest)
            if layer is not None:
                envelope = self.client.read_blob(repo, layer["digest"], int(layer.get("size", -1)), SIGNATURE_MAX)
                if envelope not in out:
                    out.insert(0, envelope)
                if newest_only:
                    break
        return out

    def _put_manifest(self, repo: str, reference: str, body: bytes, media_type: str, pushed: dict):
        """PUT a manifest whose blobs (or, for an index, manifests) we pushed; *pushed* maps
        each of their digests to a function that pushes it again.

        Concurrent publishers of one content push the same blobs. A registry may refuse the
        manifest (``MANIFEST_BLOB_UNKNOWN``) while another client commits one of them: Debian's
        docker-registry rewrites the repository's link to a blob in place on every commit of
        it, and a manifest PUT that reads the link mid-write finds it empty. Then what the
        registry named (all of ours if it named nothing) is pushed again, which rewrites the
        link, and the PUT is repeated, :data:`BLOB_RACE_ATTEMPTS` PUTs at most. Only that
        refusal, and only for what we pushed, is retried: any other error, or a digest the
        registry names that is not one of ours, is raised at once, and so is the refusal
        after the last attempt (a registry that keeps losing blobs has a real problem).
        """
        for attempt in range(BLOB_RACE_ATTEMPTS):
            try:
                return self.client.put_manifest(repo, reference, body, media_type)
            except ManifestBlobUnknownError as exc:
                named = exc.digests or tuple(pushed)
                if any(d not in pushed for d in named):
                    raise
                if attempt + 1 >= BLOB_RACE_ATTEMPTS:
                    raise RegistryError(
                        f"{exc.message}; still refused after pushing {', '.join(named)} again "
                        f"({BLOB_RACE_ATTEMPTS} attempts)",
                        hint="the registry does not keep the blobs it accepted; ask its operator to check its storage",
                    ) from None
                time.sleep(self.client.backoff * (2 ** attempt))  # let the other commit finish
                for digest in named:
                    pushed[digest]()
        raise AssertionError("unreachable")

    def _attach_signature(self, repo: str, subject: dict, envelope: bytes, ref: str) -> str:
        """Push the envelope, and its Sigstore bundle, as referrers of *subject*; return the
        signature manifest digest."""
        from ..errors import SignatureError
        from ..signatures.sigstore_bundle import PREDICATE_TYPE, bundle_of

        parts = [(signature_artifact(subject, envelope, ref), envelope)]
        try:
            bundle = bundle_of(envelope)
            parts.append((bundle_artifact(subject, bundle, ref, PREDICATE_TYPE), bundle))
        except SignatureError:
            pass  # an envelope forge did not make (copied as it is): no bundle
        return self.attach_referrers(repo, subject, parts)

    def attach_referrers(self, repo: str, subject: dict, parts: list) -> str:
        """Push each ``(SignatureArtifact, layer)`` of *parts* as a referrer of *subject* (the
        referrers tag where the registry has no referrers API); return the first one's digest."""
        empty = sha256_digest(EMPTY_JSON)
        self.client.push_blob(repo, EMPTY_JSON, empty, len(EMPTY_JSON))
        maintained = True
        again: dict = {}
        for part, layer in parts:
            digest = part.envelope_desc["digest"]
            self.client.push_blob(repo, layer, digest, len(layer))
            r = self._put_manifest(repo, part.digest, part.manifest, OCI_MANIFEST, {
                empty: self._pusher(repo, EMPTY_JSON, empty, len(EMPTY_JSON)),
                digest: self._pusher(repo, layer, digest, len(layer)),
            })
            maintained = maintained and r.headers.get("oci-subject") == subject["digest"]
            # The index names our manifests: pushing one again is PUTting it again.
            again[part.digest] = (lambda p=part: self.client.put_manifest(repo, p.digest, p.manifest, OCI_MANIFEST))
        if not maintained:  # the registry has no referrers API: the referrers tag
            self.add_to_index(repo, referrers_tag(subject["digest"]), [p.referrer for p, _ in parts], again)
        return parts[0][0].digest

    def _pusher(self, repo: str, source: bytes | Path, digest: str, size: int):
        return lambda: self.client.push_blob(repo, source, digest, size, again=True)

    def add_to_index(self, repo: str, tag: str, descriptors: list, again: dict) -> None:
        """Read-modify-write the index under *tag* (the referrers tag of a subject, or a
        version's yank index) until it names every one of *descriptors* on two
        reads apart by :data:`SETTLE_GAPS` times our own read-then-write round trip (a racing
        signer that read the index before our write lands its own within about one such round
        trip, dropping our entry; then we add ours again)."""
        rounds = self.client.retries + 4
        settled = False
        gap = 0.0
        for round_ in range(rounds):
            looked = time.monotonic()
            current = self.client.get_manifest(repo, tag, accept=(OCI_INDEX,))
            index: dict
            if current is None:
                index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []}
            else:
                index = current.json()
                if index.get("mediaType") != OCI_INDEX or not isinstance(index.get("manifests"), list):
                    raise RegistryError(f"{repo}:{tag} is not a referrers index",
                                        hint="something else uses the referrers tag; remove it in the registry")
            named = {d.get("digest") for d in index["manifests"] if isinstance(d, dict)}
            missing = [d for d in descriptors if d["digest"] not in named]
            if not missing:
                if settled or self.settle_delay <= 0:
                    return
                settled = True
                time.sleep(max(0.05, SETTLE_GAPS * gap))
                continue
            settled = False
            if round_ + 1 == rounds:
                break
            index["manifests"].extend(missing)
            try:
                self._put_manifest(repo, tag, canonical_json(index), OCI_INDEX, again)
                gap = max(gap, time.monotonic() - looked)
            except RegistryError as exc:
                if current is None:
                    raise
                if not tag.startswith("sha256-"):  # a version's yank index
                    raise RegistryError(f"{repo}: the registry refused to update the yank index {tag} ({exc.message})",
                                        hint="exempt tags matching yank-* from tag immutability") from None
                raise RegistryError(
                    f"{repo}: the registry refused to update the referrers tag {tag} ({exc.message}); "
                    "a registry with immutable tags cannot add a second signature to a version this way",
                    hint="exempt tags matching sha256-* from tag immutability, or use a registry with the OCI "
                         "referrers API (distribution 3, Harbor, Zot)") from None
        raise RegistryError(f"{repo}:{tag}: the referrers index keeps changing under us",
                            hint="another client is writing referrers; sign again")

    # -- yank statements (starforge.registry.oci_yank) ------------------------------------

    def yank_statements(self, owner: str, name: str, version: str, tree_digest: str) -> list:
        from .oci_yank import read_statements

        return read_statements(self, owner, name, version, tree_digest)

    def attach_yank_statement(self, owner: str, name: str, version: str, tree_digest: str, envelope: bytes) -> None:
        from .oci_yank import add_statement

        add_statement(self, owner, name, version, tree_digest, envelope)

    def holding(self, owner: str, name: str, version: str, tree_digest: str) -> Fetched:
        """The version's manifest, which must carry *tree_digest*; :class:`NotFoundError` otherwise."""
        found = self._manifest(owner, name, version)
        if found is None:
            raise NotFoundError(f"{owner}/{name}@{version} is not in {self.url}")
        got, data = found
        held = (data.get("annotations") or {}).get(ANN_TREE_DIGEST)
        if held != tree_digest:
            raise NotFoundError(f"{self.url} holds {owner}/{name}@{version} as {held}, not {tree_digest}")
        return got

    # -- publishing ---------------------------------------------------------------------------

    def publish(
        self, archive: Path, info: PublishedVersion, signature: bytes | None = None, progress: Progress | None = None
    ) -> PublishResult:
        archive = Path(archive)
        repo = self.repository(info.owner, info.name)
        tag = self._tag(info.version)
        ref = f"{info.owner}/{info.name}@{tag}"
        if not is_digest(info.tree_digest):
            raise UsageError(f"{ref}: '{info.tree_digest}' is not a tree digest")
        if info.files and digest_of_map(info.files) != info.tree_digest:
            raise UsageError(f"{ref}: the per-file map does not add up to tree digest {info.tree_digest}")
        layer_digest, size = file_digest(archive)
        if info.artifact_digest and info.artifact_digest != layer_digest:
            raise RegistryError(f"{archive}: archive digest is {layer_digest}, not the declared {info.artifact_digest}",
                                hint="pack the plugin again and publish the archive you packed")

        existing = self._manifest(info.owner, info.name, tag)
        if existing is not None:
            return self._republish(existing, info, tag, ref, signature)

        artifact = plugin_artifact(info, layer_digest, size)
        body, digest = artifact.manifest, artifact.digest

        self.client.push_blob(repo, artifact.config, artifact.config_desc["digest"], len(artifact.config))
        self.client.push_blob(repo, archive, layer_digest, size, _counter(progress, size))

        # The upload took time: look again just before writing the tag.
        looked = time.monotonic()
        again = self._manifest(info.owner, info.name, tag)
        if again is not None:
            return self._republish(again, info, tag, ref, signature, concurrent=True)
        try:
            self._put_manifest(repo, tag, body, OCI_MANIFEST, {
                artifact.config_desc["digest"]: self._pusher(repo, artifact.config, artifact.config_desc["digest"],
                                                             len(artifact.config)),
                layer_digest: self._pusher(repo, archive, layer_digest, size),
            })
        except RegistryError:
            # A registry with immutable tags refuses the write when another publisher got
            # there first: report that as the conflict it is.
            again = self._manifest(info.owner, info.name, tag)
            if again is None:
                raise
            return self._republish(again, info, tag, ref, signature, concurrent=True)
        # Re-check: our tag, and any PEP 440-equal spelling another publisher may have
        # written; then once more after a short settle delay, so that a publisher whose
        # write lands just after ours (it read the tag before we wrote it) is seen too.
        self._check_tag_holds(repo, tag, digest, info, ref)
        if self.settle_delay > 0:
            # A racing publisher's write lands up to its own look-then-write gap after ours;
            # on a loaded machine or registry that gap grows, and so does the wait (our own
            # gap is the measure of how slow the round trip is right now).
            time.sleep(max(self.settle_delay, SETTLE_GAPS * (time.monotonic() - looked)))
            self._check_tag_holds(repo, tag, digest, info, ref)

        if signature is not None:
            self._attach_signature(repo, artifact.subject, signature, ref)
        published = PublishedVersion(
            owner=info.owner, name=info.name, version=tag, tree_digest=info.tree_digest,
            artifact_digest=layer_digest, manifest=info.manifest, files=info.files, top_level=tuple(info.top_level),
            size=size, signed=signature is not None,
        )
        return PublishResult(version=published, created=True, signature_attached=signature is not None)

    def _check_tag_holds(self, repo: str, tag: str, digest: str, info: PublishedVersion, ref: str) -> None:
        """Raise :class:`ImmutableVersionError` when *tag* (or a PEP 440-equal spelling) holds other content.

        "Other content" is another tree-digest annotation: two laptops may pack the same
        files into different archive bytes, and that is the same version.
        """
        for other in [tag] + [t for t in self._equal_tags(repo, tag) if t != tag]:
            after = self.client.get_manifest(repo, other)
            if after is not None and after.digest == digest:
                continue
            moved = (after.json().get("annotations") or {}).get(ANN_TREE_DIGEST) if after is not None else None
            if moved == info.tree_digest:
                continue  # someone published the same content at the same time: no conflict
            raise ImmutableVersionError(
                f"{ref}: the tag moved while publishing; {repo}:{other} now holds tree digest {moved}, "
                f"ours was {info.tree_digest}",
                hint="another publisher wrote the same version at the same time; enable tag immutability in the "
                     "registry, and run forge lock --check where this version is locked")

    def _republish(self, existing: tuple[Fetched, dict], info: PublishedVersion, tag: str, ref: str,
                   signature: bytes | None, concurrent: bool = False) -> PublishResult:
        got, data = existing
        stored = (data.get("annotations") or {}).get(ANN_TREE_DIGEST)
        if stored != info.tree_digest:
            when = "was published by someone else while we uploaded" if concurrent else "is already published"
            raise ImmutableVersionError(
                f"{ref} {when} with tree digest {stored}; refusing {info.tree_digest}",
                hint="published versions are immutable: bump the version in plugin.yaml")
        repo = self.repository(info.owner, info.name)
        published = self._describe(info.owner, info.name, tag, got, data)
        # an envelope names the archive it was made for: only that archive's version takes it
        attached = (signature is not None and published.artifact_digest == info.artifact_digest
                    and signature not in self._envelopes(published))
        if signature is not None and attached:
            # Same content, another signature: adding a referrer does not change the version.
            subject = {"mediaType": OCI_MANIFEST, "digest": got.digest, "size": len(got.body)}
            self._attach_signature(repo, subject, signature, ref)
        if attached:
            published = self._describe(info.owner, info.name, tag, got, data)
        return PublishResult(version=published, created=False, signature_attached=attached)
