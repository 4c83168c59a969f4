"""The OCI artifacts of a plugin version, built and read without any I/O.

One builder for every place that writes them: ``forge plugin publish`` to an OCI registry
and ``forge bundle create`` into an OCI image layout produce the same bytes, so a manifest
digest is the same wherever the version travels.

- plugin manifest: ``artifactType`` :data:`ARTIFACT_TYPE`; config blob (:data:`CONFIG_TYPE`,
  canonical JSON ``{"schema", "owner", "name", "version", "tree_digest", "manifest",
  "files", "top_level"}``); one layer (:data:`LAYER_TYPE`, the package archive); the tree
  digest, reference, top-level names, title and version in the annotations; no creation
  time, so the same content always gives the same digest;
- signature manifest: ``artifactType`` :data:`SIGNATURE_TYPE`, the empty config, the DSSE
  envelope as its one layer, ``subject`` = the plugin manifest;
- Sigstore bundle manifest (beside each signature manifest): ``artifactType``
  :data:`BUNDLE_TYPE` (``application/vnd.dev.sigstore.bundle.v0.3+json``, what cosign and
  ``oras discover`` look for), the empty config, the bundle as its one layer of that media
  type, the statement's predicate type in ``dev.sigstore.bundle.predicateType``, ``subject``
  = the plugin manifest.

>>> referrers_tag("sha256:" + "ab" * 32)[:12]
'sha256-ababa'

Laptop side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..cluster.digest import digest_of_map, is_digest
from ..cluster.jsonload import loads as load_json
from ..errors import RegistryError
from ..package_format.manifest import canonical_version
from .base import PublishedVersion, check_identity
from .oci_client import EMPTY_JSON, OCI_EMPTY, OCI_INDEX, OCI_MANIFEST, sha256_digest

__all__ = ["OCI_INDEX", "PluginArtifact", "SignatureArtifact", "plugin_artifact", "signature_artifact"]

ARTIFACT_TYPE = "application/vnd.starforge.plugin.v1"
CONFIG_TYPE = "application/vnd.starforge.plugin.config.v1+json"
LAYER_TYPE = "application/vnd.starforge.plugin.layer.v1.tar+gzip"
SIGNATURE_TYPE = "application/vnd.starforge.signature.v1+json"
DSSE_TYPE = "application/vnd.dsse.envelope.v1+json"
BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
YANK_TYPE = "application/vnd.starforge.yank.v1+json"  # a yank or unyank statement (a DSSE envelope) of a version
ANN_BUNDLE_CONTENT = "dev.sigstore.bundle.content"
ANN_BUNDLE_PREDICATE = "dev.sigstore.bundle.predicateType"
CONFIG_SCHEMA = "forge/oci-config/v1"

ANN_TREE_DIGEST = "org.starforge.plugin.tree-digest"
ANN_REF = "org.starforge.plugin.ref"
ANN_TOP_LEVEL = "org.starforge.plugin.top-level"
ANN_TITLE = "org.opencontainers.image.title"
ANN_VERSION = "org.opencontainers.image.version"


def canonical_json(data) -> bytes:
    """Sorted keys, no spaces, UTF-8: the same data always gives the same bytes (and digest)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def referrers_tag(digest: str) -> str:
    """The OCI 1.1 referrers tag of a manifest digest: ``sha256:ab..`` → ``sha256-ab..``."""
    algo, _, hexpart = digest.partition(":")
    return f"{algo}-{hexpart}"[:128]


def descriptor(media_type: str, body: bytes, **extra) -> dict:
    return {"mediaType": media_type, "digest": sha256_digest(body), "size": len(body), **extra}


@dataclass(frozen=True)
class PluginArtifact:
    """The manifest and config blob of one plugin version (the layer is the archive itself)."""

    ref: str  # owner/name@<canonical version>
    tag: str  # the canonical version
    config: bytes
    config_desc: dict
    layer_desc: dict
    manifest: bytes
    digest: str

    @property
    def subject(self) -> dict:
        """The manifest's descriptor, as a signature's ``subject`` names it."""
        return {"mediaType": OCI_MANIFEST, "digest": self.digest, "size": len(self.manifest)}


def plugin_artifact(info: PublishedVersion, layer_digest: str, layer_size: int) -> PluginArtifact:
    """The OCI artifact of *info* whose archive has *layer_digest* and *layer_size* bytes."""
    tag = canonical_version(info.version)
    ref = f"{info.owner}/{info.name}@{tag}"
    config = canonical_json({
        "schema": CONFIG_SCHEMA,
        "owner": info.owner,
        "name": info.name,
        "version": tag,
        "tree_digest": info.tree_digest,
        "manifest": info.manifest,
        "files": info.files,
        "top_level": list(info.top_level),
    })
    config_desc = descriptor(CONFIG_TYPE, config)
    layer_desc = {"mediaType": LAYER_TYPE, "digest": layer_digest, "size": layer_size,
                  "annotations": {ANN_TITLE: f"{info.owner}-{info.name}-{tag}.tar.gz"}}
    body = canonical_json({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": ARTIFACT_TYPE,
        "config": config_desc,
        "layers": [layer_desc],
        "annotations": {
            ANN_TREE_DIGEST: info.tree_digest,
            ANN_REF: ref,
            ANN_TOP_LEVEL: ",".join(info.top_level),
            ANN_TITLE: f"{info.owner}/{info.name}",
            ANN_VERSION: tag,
        },
    })
    return PluginArtifact(ref=ref, tag=tag, config=config, config_desc=config_desc, layer_desc=layer_desc,
                          manifest=body, digest=sha256_digest(body))


@dataclass(frozen=True)
class SignatureArtifact:
    """A signature manifest referring to a plugin manifest; its blobs are ``{}`` and the envelope."""

    envelope_desc: dict  # the one layer (the envelope, or a bundle)
    manifest: bytes
    digest: str
    annotations: dict
    artifact_type: str = SIGNATURE_TYPE

    @property
    def referrer(self) -> dict:
        """Its entry in a referrers index."""
        return {"mediaType": OCI_MANIFEST, "digest": self.digest, "size": len(self.manifest),
                "artifactType": self.artifact_type, "annotations": self.annotations}


def signature_artifact(subject: dict, envelope: bytes, ref: str, artifact_type: str = SIGNATURE_TYPE) -> SignatureArtifact:
    """The signature manifest carrying *envelope* for the manifest *subject* of *ref* (with
    :data:`YANK_TYPE`: a yank statement's manifest)."""
    return _referrer(subject, descriptor(DSSE_TYPE, envelope), artifact_type, {ANN_REF: ref})


def bundle_artifact(subject: dict, bundle: bytes, ref: str, predicate_type: str) -> SignatureArtifact:
    """The referrer manifest carrying the Sigstore *bundle* for the manifest *subject* of *ref*."""
    annotations = {ANN_REF: ref, ANN_BUNDLE_CONTENT: "dsse-envelope", ANN_BUNDLE_PREDICATE: predicate_type}
    return _referrer(subject, descriptor(BUNDLE_TYPE, bundle), BUNDLE_TYPE, annotations)


def _referrer(subject: dict, layer: dict, artifact_type: str, annotations: dict) -> SignatureArtifact:
    """The OCI referrer manifest of *artifact_type* whose one layer is *layer*, pointing at *subject*."""
    body = canonical_json({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": descriptor(OCI_EMPTY, EMPTY_JSON),
        "layers": [layer],
        "subject": subject,
        "annotations": annotations,
    })
    return SignatureArtifact(envelope_desc=layer, manifest=body, digest=sha256_digest(body),
                             annotations=annotations, artifact_type=artifact_type)


def bundle_descriptor(data: dict, subject_digest: str) -> dict | None:
    """The bundle layer of a Sigstore bundle referrer for *subject_digest*, or None when it is not one."""
    if (data.get("subject") or {}).get("digest") != subject_digest:
        return None
    layers = [d for d in data.get("layers") or [] if isinstance(d, dict) and d.get("mediaType") == BUNDLE_TYPE]
    return layers[0] if len(layers) == 1 else None


def is_plugin_manifest(data: dict) -> bool:
    return data.get("artifactType") == ARTIFACT_TYPE or (data.get("config") or {}).get("mediaType") == CONFIG_TYPE


def plugin_parts(data: dict, where: str) -> tuple[str, dict, dict]:
    """``(tree digest, config descriptor, layer descriptor)`` of a plugin manifest; raise when malformed."""
    annotations = data.get("annotations") or {}
    tree = annotations.get(ANN_TREE_DIGEST)
    layers = [d for d in data.get("layers") or [] if isinstance(d, dict) and d.get("mediaType") == LAYER_TYPE]
    config_desc = data.get("config") or {}
    if not isinstance(tree, str) or not is_digest(tree) or len(layers) != 1 or config_desc.get("mediaType") != CONFIG_TYPE:
        raise RegistryError(f"{where}: malformed plugin artifact (tree digest, config or layer missing)")
    return tree, config_desc, layers[0]


def plugin_version(asked: tuple[str, str, str], data: dict, config_raw: bytes, where: str, registry_url: str, *,
                   signed: bool = False) -> PublishedVersion:
    """The :class:`PublishedVersion` a plugin manifest *data* and its config blob describe.

    *asked* is the ``(owner, name, version)`` requested: the ref annotation, the config and
    the plugin.yaml inside must all answer for it (SPEC §5). Raises :class:`RegistryError`
    when they are malformed, disagree with each other or answer for another plugin.
    """
    owner, name, version = asked
    tree, _, layer = plugin_parts(data, where)
    annotations = data.get("annotations") or {}
    try:
        config = load_json(config_raw)
        files, manifest = dict(config["files"]), dict(config["manifest"])
        top_level = tuple(config.get("top_level") or ())
    except (ValueError, KeyError, TypeError, AttributeError):
        raise RegistryError(f"{where}: plugin config blob is not valid") from None
    ref_owner, _, rest = str(annotations.get(ANN_REF) or "").partition("/")
    ref_name, _, ref_version = rest.partition("@")
    check_identity(registry_url, f"{where} (annotation {ANN_REF})", asked,
                   {"owner": ref_owner, "name": ref_name, "version": ref_version})
    check_identity(registry_url, f"{where} (config)", asked, config)
    annotated = str(annotations.get(ANN_TOP_LEVEL) or "")
    if sorted(set(filter(None, annotated.split(",")))) != sorted(set(top_level)):
        from ..errors import TamperedError
        from ..urls import mask_url

        raise TamperedError(f"registry {mask_url(registry_url)} is tampered: {where}: annotation {ANN_TOP_LEVEL} "
                            f"({annotated or 'empty'}) and the config's top_level ({', '.join(top_level) or 'none'}) disagree",
                            hint="the artifact was altered after publishing; do not use it")
    if config.get("tree_digest") != tree or (files and digest_of_map(files) != tree):
        raise RegistryError(f"{where}: the tree digest annotation, config and file map disagree",
                            hint="the artifact was altered after publishing; republish it")
    return PublishedVersion(
        owner=owner,
        name=name,
        version=config.get("version") or annotations.get(ANN_VERSION) or version,
        tree_digest=tree,
        artifact_digest=layer["digest"],
        manifest=manifest,
        files=files,
        top_level=top_level,
        size=int(layer.get("size", 0)),
        signed=signed,
    )


def envelope_descriptor(data: dict, subject_digest: str) -> dict | None:
    """The DSSE layer of a signature manifest for *subject_digest*, or None when it is not one."""
    if (data.get("subject") or {}).get("digest") != subject_digest:
        return None
    layers = [d for d in data.get("layers") or [] if isinstance(d, dict) and d.get("mediaType") == DSSE_TYPE]
    return layers[0] if len(layers) == 1 else None
