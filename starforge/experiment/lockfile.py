"""``plugins.lock.json``: the exact plugin versions an experiment runs, pinned by tree digest.

Pure model: reading, validating, serializing and comparing lock files, and the checks that
need nothing but the lock, ``forge.yaml`` and the built-ins on disk. Resolving against a
registry is :mod:`starforge.experiment.lock`.

Format (``docs/lockfile.md`` describes every field)::

    {
      "plugins": [ {entry}, ... ],          # forge.yaml order = load order
      "registry": "oci://...",              # where it was resolved: a hint only
      "schema": "forge/lock/v2"
    }

Each entry's ``signature`` records facts from the registry only: ``null`` (the registry
holds no signature envelope for the version) or ``{"envelope_digest": "sha256:...",
"key_id": "..."}``. Whether that signature is *verified* depends on the trust file of the
machine using the lock, so it is computed there and never written down: one lock reads the
same everywhere. A ``forge/lock/v1`` lock (which recorded a verdict, ``{"status": ...}``)
is still read; ``forge lock`` rewrites it as v2 and says so, and ``--check`` fails on it.

Serialization is stable: sorted keys, two-space indent, one trailing newline, so the same
lock is the same bytes. A lock whose content did not change is not rewritten; a lock that
differs only in the registry hint counts as unchanged (a mirror does not make a lock stale).

Laptop side, standard library plus ``packaging``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..cluster import atomic
from ..cluster.digest import is_digest
from ..cluster.jobspec import PluginEntry
from ..cluster.jsonload import loads as load_json
from ..cluster.names import is_plugin_name
from ..errors import LockError
from ..package_format.manifest import KINDS, LOADS, manifest_dict

SCHEMA = "forge/lock/v2"
OLD_SCHEMAS = ("forge/lock/v1",)  # read, and rewritten by forge lock
FILENAME = "plugins.lock.json"
ENVIRONMENT_NOTE = "environment plugin: shipped with the job; the launcher leaves it to the environment mechanism"
V1_SIGNATURE_STATUSES = ("verified", "unverified", "unsigned")  # forge/lock/v1 recorded a verdict
_ENVELOPE_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class LockEntry:
    """One locked plugin package: the JobSpec's entry for it (:attr:`plugin`, every fact of
    the version's verified tree) plus what only the lock records.

    Built from the verified tree in one place (:meth:`from_tree`); staging puts
    :attr:`plugin` into the JobSpec as it is. The file format is flat (``docs/lockfile.md``).
    """

    plugin: PluginEntry  # name, version, tree digest, manifest fields, top-level names, file hashes; owner set
    request: str  # the forge.yaml request this version satisfies, normalized
    artifact_digest: str  # sha256:... of the archive (transport detail)
    signature: dict | None = None  # {envelope_digest, key_id} as the registry serves it; None: no envelope
    note: str = ""
    allow_yanked: bool = False  # forge.yaml acknowledges that this version may be yanked (written only when true)

    @property
    def owner(self) -> str:
        return self.plugin.owner or ""

    @property
    def name(self) -> str:
        return self.plugin.name

    @property
    def version(self) -> str:
        return self.plugin.version

    @property
    def tree_digest(self) -> str:
        return self.plugin.tree_digest

    @property
    def ref(self) -> str:
        return f"{self.owner}/{self.name}@{self.version}"

    def loaded(self) -> "LoadedPlugin":
        """This package as the conflict checks see it."""
        return LoadedPlugin(label=self.ref, name=self.name, kind=self.plugin.kind, top_level=self.plugin.top_level)

    def to_dict(self) -> dict:
        p = self.plugin
        d: dict = {
            "owner": self.owner,
            "name": p.name,
            "version": p.version,
            "request": self.request,
            "digest": p.tree_digest,
            "artifact_digest": self.artifact_digest,
            "kind": p.kind,
            "load": p.load,
            "entrypoint": p.entrypoint,
            "requires": dict(p.requires),
            "targets": list(p.targets),
            "params": dict(p.params),
            "top_level": list(p.top_level),
            "files": dict(p.files),
            "signature": dict(self.signature) if self.signature is not None else None,
        }
        if self.note:
            d["note"] = self.note
        if self.allow_yanked:
            d["allow_yanked"] = True
        return d

    @classmethod
    def from_tree(cls, tree, *, owner: str, version: str, request: str, artifact_digest: str,
                  signature: dict | None) -> "LockEntry":
        """The entry of ``owner/<tree's name>@version``, every manifest field and the top-level
        names and file map read from its verified tree (a :class:`~starforge.registry.verified.VerifiedTree`)."""
        plugin = tree.plugin_entry(owner, version)
        return cls(plugin=plugin, request=request, artifact_digest=artifact_digest, signature=signature,
                   note=ENVIRONMENT_NOTE if plugin.kind == "environment" else "")

    def manifest_dict(self) -> dict:
        """The plugin.yaml content this entry records (``PluginManifest.to_dict()`` without a description)."""
        p = self.plugin
        return manifest_dict(p.name, p.version, p.kind, p.entrypoint, p.load, p.targets, dict(p.requires), dict(p.params))

    @property
    def signed(self) -> bool:
        """The registry held a signature envelope for this version when it was locked."""
        return self.signature is not None

    @classmethod
    def from_dict(cls, data: Any, where: str, schema: str = SCHEMA) -> "LockEntry":
        if not isinstance(data, Mapping):
            raise LockError(f"{where}: expected an object")

        def text(key: str) -> str:
            value = data.get(key)
            if not isinstance(value, str) or not value:
                raise LockError(f"{where}.{key}: expected a string, got {value!r}")
            return value

        for key in ("owner", "name"):
            value = text(key)
            if not is_plugin_name(value):
                raise LockError(f"{where}.{key}: {value!r} is not a valid {key}")
        digest = text("digest")
        if not is_digest(digest):
            raise LockError(f"{where}.digest: expected 'sf1:<64 hex>', got {digest!r}")
        kind, load = text("kind"), text("load")
        if kind not in KINDS:
            raise LockError(f"{where}.kind: expected one of {', '.join(KINDS)}, got {kind!r}")
        if load not in LOADS:
            raise LockError(f"{where}.load: expected eager or deferred, got {load!r}")
        signature = _signature_facts(data.get("signature"), where, schema)
        shapes = {"requires": dict, "params": dict, "files": dict, "targets": list, "top_level": list}
        for key, shape in shapes.items():
            if not isinstance(data.get(key, shape()), shape):
                raise LockError(f"{where}.{key}: expected {'an object' if shape is dict else 'a list'}")
        plugin = PluginEntry(
            name=data["name"],
            version=text("version"),
            tree_digest=digest,
            kind=kind,
            load=load,
            entrypoint=text("entrypoint"),
            owner=data["owner"],
            targets=tuple(data.get("targets", [])),
            requires=dict(data.get("requires", {})),
            top_level=tuple(data.get("top_level", [])),
            files=dict(data.get("files", {})),
            params=dict(data.get("params", {})),
        )
        allow_yanked = data.get("allow_yanked", False)
        if not isinstance(allow_yanked, bool):
            raise LockError(f"{where}.allow_yanked: expected true or false, got {allow_yanked!r}")
        return cls(plugin=plugin, request=text("request"), artifact_digest=text("artifact_digest"), signature=signature,
                   note=str(data.get("note", "")), allow_yanked=allow_yanked)


def _signature_facts(value: Any, where: str, schema: str) -> dict | None:
    """The ``signature`` field of an entry: v2 facts, or a v1 verdict read as what it implies
    (``unsigned``: no envelope; otherwise an envelope whose digest and key the old lock did not record)."""
    if schema in OLD_SCHEMAS:
        value = value if value is not None else {"status": "unsigned"}
        if not isinstance(value, Mapping) or value.get("status") not in V1_SIGNATURE_STATUSES:
            raise LockError(f"{where}.signature: expected an object with status {'|'.join(V1_SIGNATURE_STATUSES)}")
        return None if value["status"] == "unsigned" else {"envelope_digest": None, "key_id": None}
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"envelope_digest", "key_id"}:
        raise LockError(f"{where}.signature: expected null or an object with envelope_digest and key_id")
    digest, kid = value["envelope_digest"], value["key_id"]
    if not isinstance(digest, str) or not _ENVELOPE_DIGEST_RE.match(digest):
        raise LockError(f"{where}.signature.envelope_digest: expected 'sha256:<64 hex>', got {digest!r}")
    if kid is not None and not isinstance(kid, str):
        raise LockError(f"{where}.signature.key_id: expected a string or null, got {kid!r}")
    return {"envelope_digest": digest, "key_id": kid}


@dataclass(frozen=True)
class LockFile:
    """The whole lock: entries in load order plus the registry hint."""

    plugins: tuple = ()
    registry: str | None = None
    read_as: str | None = None  # the older schema this lock was read from (forge lock rewrites it)

    def to_dict(self) -> dict:
        d: dict = {"schema": SCHEMA, "plugins": [e.to_dict() for e in self.plugins]}
        if self.registry:
            from ..urls import strip_userinfo

            d["registry"] = strip_userinfo(self.registry)  # credentials never go into a file that is committed
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"

    def same_content(self, other: "LockFile | None") -> bool:
        """Equal entries in equal order, *other* in the current schema (the registry hint is ignored)."""
        return (
            other is not None
            and other.read_as is None
            and [e.to_dict() for e in self.plugins] == [e.to_dict() for e in other.plugins]
        )

    def get(self, name: str) -> LockEntry | None:
        return next((e for e in self.plugins if e.name == name), None)

    @classmethod
    def from_dict(cls, data: Any, source: str) -> "LockFile":
        if not isinstance(data, Mapping):
            raise LockError(f"{source}: expected a JSON object")
        schema = data.get("schema")
        if schema != SCHEMA and schema not in OLD_SCHEMAS:
            raise LockError(f"{source}: schema: expected '{SCHEMA}', got {schema!r}")
        plugins = data.get("plugins", [])
        if not isinstance(plugins, list):
            raise LockError(f"{source}: plugins: expected a list")
        entries = tuple(LockEntry.from_dict(p, f"{source}: plugins[{i}]", schema) for i, p in enumerate(plugins))
        registry = data.get("registry")
        return cls(
            plugins=entries,
            registry=registry if isinstance(registry, str) else None,
            read_as=None if schema == SCHEMA else schema,
        )


def read_lock(path: str | os.PathLike) -> LockFile | None:
    """The lock at *path*, or None when there is none; a malformed lock is a :class:`LockError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = load_json(text)
    except ValueError as exc:
        raise LockError(f"{path}: not valid JSON: {exc}", hint="regenerate it with: forge lock") from None
    return LockFile.from_dict(data, str(path))


def write_lock(lock: LockFile, path: str | os.PathLike) -> bool:
    """Write *lock* atomically unless the file already holds the same content; True when written."""
    path = Path(path)
    with contextlib.suppress(LockError):
        if lock.same_content(read_lock(path)):
            return False
    atomic.write_file(path, lock.to_json())
    return True


def stale_reasons(requests: Iterable, lock: LockFile) -> list:
    """Why *lock* does not satisfy forge.yaml's *requests* (``PluginRequest``); [] when it does.

    The lock must hold exactly the requested plugins, in the requested order, each made for
    the request as now written and at a version that request admits. ``config:`` plays no
    part, and neither does the registry hint.
    """
    requests = list(requests)
    reasons = []
    locked = {e.name: e for e in lock.plugins}
    wanted = {r.name for r in requests}
    for req in requests:
        entry = locked.get(req.name)
        if entry is None:
            reasons.append(f"{req.request} is requested in forge.yaml but not locked")
            continue
        if entry.owner != req.owner:
            reasons.append(
                f"{req.name}: forge.yaml requests owner {req.owner} ({req.request}), "
                f"the lock holds {entry.owner}/{entry.name}@{entry.version} of owner {entry.owner}"
            )
        elif entry.request != req.request:
            reasons.append(f"{req.name}: forge.yaml requests {req.request}, the lock was made for {entry.request}")
        elif not _admits(req, entry.version):
            reasons.append(f"{req.name}: locked version {entry.version} does not satisfy {req.request}")
        elif entry.allow_yanked != getattr(req, "allow_yanked", False):
            said = "acknowledges" if entry.allow_yanked else "does not acknowledge"
            reasons.append(f"{req.name}: allow_yanked changed in forge.yaml (the lock {said} a yanked version)")
    for entry in lock.plugins:
        if entry.name not in wanted:
            reasons.append(f"{entry.owner}/{entry.name} is locked but no longer requested in forge.yaml")
    if not reasons:
        order = [e.name for e in lock.plugins]
        if order != [r.name for r in requests]:
            reasons.append(f"the lock lists {', '.join(order)} but forge.yaml's load order is {', '.join(r.name for r in requests)}")
    return reasons


def _admits(req, version: str) -> bool:
    try:
        return req.admits(version)
    except ValueError:
        return False


@dataclass(frozen=True)
class LoadedPlugin:
    """What the conflict checks need to know of one plugin a job would carry."""

    label: str  # "alice/opsd-patch@1.2.0" or "built-in reward-clip"
    name: str
    kind: str
    top_level: tuple
    builtin: bool = False


def check_conflicts(packages: Iterable[LoadedPlugin], builtins: Iterable[LoadedPlugin] = ()) -> list:
    """Refuse what cannot run together; return the built-ins shadowed by a package.

    Refused (:class:`LockError`): data-prep plugins (they never enter a job), two
    packages with one manifest name, and two plugins the job would put on ``sys.path``
    (packages and the built-ins not shadowed by a package of the same name) that share a
    top-level module name: the first on the path would hide the other.
    """
    packages, builtins = list(packages), list(builtins)
    for p in packages + builtins:
        if p.kind == "data-prep":
            raise LockError(
                f"{p.label} is a data-prep plugin; data-prep plugins never enter a job (they run on the laptop, with forge prep)",
                hint="remove it from forge.yaml; run it with: forge prep REF --input IN.jsonl --output OUT.jsonl",
            )
    seen: dict = {}
    for p in packages:
        if p.name in seen:
            raise LockError(f"{seen[p.name].label} and {p.label} have the same manifest name '{p.name}'", hint="keep only one of them in forge.yaml")
        seen[p.name] = p
    shadowed = [b.name for b in builtins if b.name in seen]
    carried = packages + [b for b in builtins if b.name not in seen]
    owners: dict = {}
    for p in carried:
        for module in p.top_level:
            if module in owners:
                other = owners[module]
                raise LockError(
                    f"{other.label} and {p.label} both provide the top-level module '{module}'; one would shadow the other on sys.path",
                    hint="rename the module in one of the plugins (name it after the plugin) and publish a new version",
                )
            owners[module] = p
    return shadowed



def check_module_names(packages: Iterable[LoadedPlugin], recipe_dir: str | os.PathLike | None = None) -> None:
    """Refuse a locked package providing a top-level module it must not: a reserved,
    standard-library or training-stack name (``forge plugin publish`` refuses those, but a
    hand-made registry or bundle skips publish), or a name of the recipe's own packages
    under *recipe_dir* (the experiment directory), naming both
    (:func:`starforge.cluster.shadowing.shadowing`, the launcher's rule too)."""
    from ..cluster.shadowing import recipe_top_level, shadowing

    recipe = recipe_top_level(os.fspath(recipe_dir)) if recipe_dir is not None else {}
    for p in packages:
        problem = shadowing(p.label, p.top_level, recipe)
        if problem is not None:
            raise LockError(
                problem,
                hint="forge plugin publish refuses a plugin shadowing the standard library, the training stack or a "
                     "name StarForge needs; rename the module (after the plugin) and publish a new version — or, "
                     "for the recipe's own package, rename that",
            )
