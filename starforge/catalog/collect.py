"""What a registry serves, verified: the document behind every page and ``catalog.json``.

:func:`collect` lists every plugin and version of a registry and, for each version, shows
what building the catalogue verified, never what the registry claims:

- **integrity**: its files are fetched (cache first) and checked against the tree digest,
  and the registry record is compared with ``plugin.yaml`` in the verified tree; the
  metadata shown (params, ``requires``, targets, load mode, kind, description) is read from
  that tree. A version that fails shows the failure and no metadata;
- **signature**: judged by the trust file given, by the plugin store's verified fetch
  (:meth:`starforge.registry.store.PluginStore.fetch_verified`, nothing unpacked), with the
  key ids and key types;
- **yank**: :func:`starforge.catalog.yanks.yank_of`;
- **change**: what ``forge plugin diff --stat`` compares between it and the previous
  version (:func:`starforge.experiment.lockdiff.compare_facts` of the two verified trees).

Each version carries its *basis*: the sha256 of what the registry served for it (record,
signature envelopes, yank statements) and of the keys the trust file holds for its owner.
A rebuild whose previous ``catalog.json`` holds an entry of the same basis (and, for the
change, the same previous version and files, :func:`change_key`) reuses it instead of
verifying again: the same inputs give the same verdict. The registry's *state* is the sha256 of every version's
served digest, so a page built from another state of the registry is recognisable.

Laptop side.
"""

from __future__ import annotations

import hashlib
import json

from ..errors import ForgeError, SignatureError
from .yanks import yank_of, yank_state

SCHEMA = "forge/catalog/v1"


def sha256_json(value) -> str:
    """``sha256:<hex>`` of *value* as canonical JSON (sorted keys, no spaces, ASCII)."""
    data = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def trust_summary(trust) -> list:
    """``[{owner, key_id}]`` of the trust file, sorted: what every page says it was built under."""
    return [{"owner": o, "key_id": k} for o in sorted(trust.owners) for k in trust.key_ids(o)]


def served_digest(registry, info) -> str:
    """The sha256 of what *registry* serves for the version *info*: its record, its signature
    envelopes (and their Sigstore bundles, where the registry keeps them) and its yank statements."""
    from ..registry.store import PluginStore

    envelopes, bundles = PluginStore(registry).served_signatures(info)
    return sha256_json({
        "record": {**vars(info), "top_level": list(info.top_level)},
        "envelopes": [hashlib.sha256(e).hexdigest() for e in envelopes],
        "bundles": [hashlib.sha256(b).hexdigest() for b in bundles],
        "yank": yank_state(registry, info),
    })


def key_facts(trust, envelope: bytes | None, info, verified_key: str | None) -> list:
    """``[{key_id, key_type, trusted}]`` of the keys that signed *envelope*: the key that verified
    (with its type, from the trust file), or the key ids the envelope names when none is trusted."""
    from ..cluster.dsse import check_statement, load_public_key
    from ..signatures.signing import key_type

    if verified_key is not None:
        pem = trust.all_keys().get(verified_key)
        kind = key_type(load_public_key(pem)) if pem else "unknown"
        return [{"key_id": verified_key, "key_type": kind, "trusted": True}]
    if envelope is None:
        return []
    try:
        named = check_statement(envelope, owner=info.owner, name=info.name, version=info.version,
                                tree_digest=info.tree_digest, artifact_digest=info.artifact_digest or None)
    except SignatureError:
        return []
    return [{"key_id": k, "key_type": "not in the trust file", "trusted": False} for k in sorted(set(named))]


def signature_verdict(registry, info, trust) -> dict:
    """``{status, error, keys}``: the signature of *info* judged by *trust* (``refused`` with the
    reason when the trust rule refuses it: a bad or stripped signature, an untrusted key)."""
    from ..registry.store import PluginStore

    store = PluginStore(registry, trust=trust)
    try:
        fetched = store.fetch_verified(info)
        status, envelope = fetched.status, fetched.envelope
    except SignatureError as exc:
        return {"status": "refused", "error": exc.message, "keys": []}
    verified_key = None
    if status == "verified" and envelope is not None:
        verified_key = store.key_of(info, envelope)
    return {"status": status, "error": None, "keys": key_facts(trust, envelope, info, verified_key)}


def verified_facts(registry, info, cache=None) -> tuple:
    """``(tree, integrity)``: the verified tree of *info* (None when it fails) and
    ``{ok, error}``: its files match its tree digest and its record agrees with them."""
    from ..registry.store import PluginStore

    try:
        tree = PluginStore(registry, cache_dir=cache).tree(info)
    except ForgeError as exc:
        return None, {"ok": False, "error": exc.message}
    return tree, {"ok": True, "error": None}


def manifest_facts(tree) -> dict:
    """What a page shows of a version, from its verified ``plugin.yaml``."""
    m = tree.manifest
    return {
        "kind": m.kind,
        "load": m.load,
        "entrypoint": m.entrypoint,
        "description": m.description,
        "targets": list(m.targets),
        "requires": m.requires.to_dict(),
        "params": {k: p.to_dict() for k, p in sorted(m.params.items())},
    }


def change_facts(old_tree, new_tree, owner: str, old_version: str, new_version: str) -> dict:
    """The ``plugin diff --stat`` of two verified trees: the manifest fields and files that changed."""
    from ..experiment.lockdiff import compare_facts, facts_of_plugin

    fields = compare_facts(facts_of_plugin(old_tree.plugin_entry(owner, old_version)),
                           facts_of_plugin(new_tree.plugin_entry(owner, new_version)))
    return {"from": old_version, "fields": fields}


def failed(entry: dict) -> bool:
    """Whether the version *entry* failed a check: its files, its signature or its yank facts."""
    return not entry["integrity"]["ok"] or entry["signature"]["status"] == "refused" or bool(entry["yank"].get("error"))


def change_key(entry: dict) -> str:
    """What the change from the version *entry* to the next one depends on: its version and its
    files (the tree digest, when they verified). Its yank or signature changing alters nothing there."""
    return sha256_json([entry["version"], entry["tree_digest"], entry["integrity"]["ok"]])


class Collector:
    """One build's pass over a registry, with the previous build's entries to reuse."""

    def __init__(self, registry, trust, previous: dict | None = None, cache=None) -> None:
        self.registry = registry
        self.trust = trust
        self.cache = cache
        self.reused = 0
        self.verified = 0
        self.previous = {}
        if previous and previous.get("schema") == SCHEMA:
            for plugin in previous.get("plugins") or []:
                for v in plugin.get("versions") or []:
                    if isinstance(v, dict) and isinstance(v.get("basis"), str):
                        self.previous[v["basis"]] = v

    def basis(self, info, served: str) -> str:
        keys = {k: self.trust.owners[info.owner][k] for k in self.trust.key_ids(info.owner)}
        return sha256_json({"served": served, "trusted_keys": keys})

    def plugin(self, owner: str, name: str) -> tuple:
        """``(entry, served digests)`` of one plugin: its versions, oldest first."""
        from ..registry.directory import sort_versions

        versions: list = []
        served_all: list = []
        trees: dict = {}
        prev = None  # (version, change key, info) of the previous readable version
        for version in sort_versions(self.registry.versions(owner, name)):
            try:
                info = self.registry.get(owner, name, version)
                served = served_digest(self.registry, info)
            except ForgeError as exc:
                served_all.append([f"{owner}/{name}@{version}", "unreadable"])
                versions.append(self.unreadable(owner, name, version, exc.message))
                prev = None
                continue
            served_all.append([info.ref, served])
            basis = self.basis(info, served)
            entry = self.version(info, basis, prev, trees)
            versions.append(entry)
            prev = (info.version, change_key(entry), info)
        return self.summary(owner, name, versions), served_all

    def unreadable(self, owner: str, name: str, version: str, error: str) -> dict:
        ref = f"{owner}/{name}@{version}"
        return {"version": version, "ref": ref, "basis": None, "tree_digest": None, "artifact_digest": None,
                "size": 0, "integrity": {"ok": False, "error": error},
                "signature": {"status": "unknown", "error": None, "keys": []},
                "yank": yank_of(None, None, None), "manifest": None, "change": None, "change_basis": None,
                "add": f"forge plugin add {ref}"}

    def version(self, info, basis: str, prev, trees: dict) -> dict:
        prev_key = prev[1] if prev else None  # what this version's change depends on besides itself
        old = self.previous.get(basis)
        if old is not None and old.get("change_basis") == prev_key and old.get("ref") == info.ref:
            self.reused += 1
            return old
        self.verified += 1
        tree, integrity = verified_facts(self.registry, info, self.cache)
        trees[info.version] = tree
        change = None
        if prev is not None and tree is not None:
            old_version, _, old_info = prev
            if old_version not in trees:
                trees[old_version] = verified_facts(self.registry, old_info, self.cache)[0]
            if trees[old_version] is not None:
                change = change_facts(trees[old_version], tree, info.owner, old_version, info.version)
        return {
            "version": info.version,
            "ref": info.ref,
            "basis": basis,
            "change_basis": prev_key,
            "tree_digest": info.tree_digest,
            "artifact_digest": info.artifact_digest,
            "size": info.size,
            "integrity": integrity,
            "signature": signature_verdict(self.registry, info, self.trust),
            "yank": yank_of(self.registry, info, self.trust),
            "manifest": manifest_facts(tree) if tree is not None else None,
            "change": change,
            "add": f"forge plugin add {info.ref}",
        }

    @staticmethod
    def summary(owner: str, name: str, versions: list) -> dict:
        """A plugin's entry: its versions and what the index shows (from its newest verified final
        release that is not yanked)."""
        from packaging.version import Version

        good = [v for v in versions if v["manifest"] is not None]
        finals = [v for v in good if not Version(v["version"]).is_prerelease]
        # what a bare reference locks to: the newest final release not yanked (SPEC §18), else the newest shown
        chosen = [v for v in finals if not v["yank"]["yanked"]]
        latest = (chosen or finals or good or versions)[-1] if versions else None
        shown = latest["manifest"] if latest and latest["manifest"] else {}
        return {
            "owner": owner,
            "name": name,
            "ref": f"{owner}/{name}",
            "latest": latest["version"] if latest else None,
            "latest_signature": latest["signature"]["status"] if latest else None,
            "kind": shown.get("kind"),
            "description": shown.get("description", ""),
            "targets": sorted({t for v in good for t in v["manifest"]["targets"]}),
            "yanked": [v["version"] for v in versions if v["yank"]["yanked"]],
            "problems": [v["version"] for v in versions if failed(v)],
            "versions": versions,
        }


def collect(registry, trust, previous: dict | None = None, cache=None) -> tuple:
    """``(document, counts)``: the catalogue of *registry* verified under *trust*, reusing the
    entries of *previous* (an earlier ``catalog.json``) whose basis is unchanged; *counts* is
    ``{verified, reused}``."""
    from ..urls import mask_url

    collector = Collector(registry, trust, previous, cache)
    plugins: list = []
    served: list = []
    for owner, name in registry.plugins():
        entry, digests = collector.plugin(owner, name)
        plugins.append(entry)
        served += digests
    doc = {
        "schema": SCHEMA,
        "registry": mask_url(registry.url),
        "registry_state": sha256_json(served),
        "trust": {"keys_digest": sha256_json(trust_summary(trust)), "keys": trust_summary(trust)},
        "plugins": plugins,
    }
    return doc, {"verified": collector.verified, "reused": collector.reused}
