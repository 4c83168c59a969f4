"""Yank statements on an OCI registry: a referrer of the version, and one index to read.

Each statement (:mod:`starforge.registry.yank`) is pushed as signatures are: a manifest of
``artifactType`` :data:`~starforge.registry.artifact.YANK_TYPE` whose ``subject`` is the
version's manifest and whose one layer is the statement (found by referrers-aware tools
through the referrers API, or the ``sha256-<hex>`` referrers tag). Its descriptor is also
added to the content's **yank index**: the tag ``yank-<tree digest hex>`` in the plugin's
repository, an OCI index whose entries carry the statement itself in the annotation
:data:`ANN_STATEMENT` (base64). Reading a version's statements is then one request — the
index by the tree digest the lock already holds, no tag to resolve first — which is what
``forge submit`` asks on its warm path (a 404 means no statement). What the index says is
checked like any registry text: each statement must name this version and tree digest, and
a signed one verifies or is shown as unverified; a yank that vanishes from it is caught by
the yank this machine remembers.

Laptop side.
"""

from __future__ import annotations

import base64
import binascii

from ..errors import TamperedError
from ..urls import mask_url
from .artifact import YANK_TYPE, signature_artifact
from .oci_client import OCI_INDEX, OCI_MANIFEST

INDEX_PREFIX = "yank-"
ANN_STATEMENT = "org.starforge.yank.statement"


def index_tag(tree_digest: str) -> str:
    """The tag of the yank index of the content *tree_digest* (``sf1:<hex>`` -> ``yank-<hex>``)."""
    algo, _, hex_ = tree_digest.partition(":")
    if algo != "sf1" or len(hex_) != 64 or any(c not in "0123456789abcdef" for c in hex_):
        raise TamperedError(f"'{tree_digest}' is not a tree digest (sf1:<64 hex>)")
    return INDEX_PREFIX + hex_


def read_statements(reg, owner: str, name: str, version: str, tree_digest: str) -> list:
    """The statements the yank index of *tree_digest* names (one GET; none when it is absent)."""
    repo = reg.repository(owner, name)
    tag = index_tag(tree_digest)
    got = reg.client.get_manifest(repo, tag, accept=(OCI_INDEX,))
    if got is None:
        return []
    where = f"registry {mask_url(reg.url)}: {repo}:{tag}"
    try:
        data = got.json()
        entries = data["manifests"]
        if not isinstance(entries, list):
            raise TypeError
        out = []
        for d in entries:
            if d.get("artifactType") != YANK_TYPE:
                continue
            statement = base64.b64decode(d["annotations"][ANN_STATEMENT], validate=True)
            if statement not in out:
                out.append(statement)
    except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
        raise TamperedError(f"{where} is not a yank index", hint="something else uses that tag, or it was edited; tell "
                                                                 "the registry's owner") from None
    return out


def add_statement(reg, owner: str, name: str, version: str, tree_digest: str, envelope: bytes) -> None:
    """Push *envelope* as a referrer of the version's manifest and name it in the yank index."""
    repo = reg.repository(owner, name)
    got = reg.holding(owner, name, version, tree_digest)
    subject = {"mediaType": OCI_MANIFEST, "digest": got.digest, "size": len(got.body)}
    part = signature_artifact(subject, envelope, f"{owner}/{name}@{version}", YANK_TYPE)
    reg.attach_referrers(repo, subject, [(part, envelope)])
    entry = {**part.referrer, "annotations": {**part.annotations,
                                              ANN_STATEMENT: base64.b64encode(envelope).decode("ascii")}}
    again = {part.digest: lambda: reg.client.put_manifest(repo, part.digest, part.manifest, OCI_MANIFEST)}
    reg.add_to_index(repo, index_tag(tree_digest), [entry], again)
