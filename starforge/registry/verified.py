"""A plugin version's metadata, read from its digest-verified tree (SPEC §5).

Whoever can write a registry (or craft a bundle, or edit a lock) can edit a version's
record — ``params`` defaults, ``kind``, ``load``, ``entrypoint``, ``requires``, ``targets``,
``top_level`` — but not the files behind its tree digest, which include ``plugin.yaml``.
So every field a command or the launcher acts on is read here, from the unpacked and
verified tree (:class:`VerifiedTree`; top-level names derived from the tree's files), and
any record that disagrees is tampering (:func:`check_record`: a :class:`TamperedError`,
exit code 6, naming the fields).

The comparison is canonical (:func:`canonical`), so records and locks written by earlier
releases against honest registries agree: declared defaults filled in (``load: eager``),
numbers compared as values (``1`` is ``1.0``, ``True`` is not ``1``), specifier sets
compared as sets (``<1,>=0.1`` is ``>=0.1,<1``), and order ignored where it carries no
meaning (``targets``, top-level names, ``choices``, mapping keys).

>>> canonical({"schema": "forge/plugin/v1", "name": "p", "version": "1.0", "kind": "algorithm",
...            "entrypoint": "p:install"}, ())["load"]
'eager'

Laptop side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..cluster.plain_specifiers import plain_text
from ..errors import ManifestError, TamperedError
from ..package_format.manifest import PluginManifest

MANIFEST_FILE = "plugin.yaml"
#: The fields compared between a record and the tree, in the order an error lists them.
FIELDS = ("name", "version", "kind", "load", "entrypoint", "params", "requires", "targets", "top_level", "files")


@dataclass(frozen=True)
class VerifiedTree:
    """What the files behind one tree digest say of themselves: the one source of a version's metadata."""

    tree_digest: str
    manifest: PluginManifest
    top_level: tuple
    files: dict = field(default_factory=dict)  # relpath -> sha256 hex, as hashed while unpacking

    def plugin_entry(self, owner: str, version: str):
        """The JobSpec's entry for ``owner/<name>@version`` with these files (what a lock entry holds)."""
        return self.manifest.plugin_entry(self.tree_digest, self.top_level, self.files, owner=owner, version=version)


def read_tree(root: str | os.PathLike, files: Mapping[str, str], tree_digest: str, label: str) -> VerifiedTree:
    """The :class:`VerifiedTree` of the unpacked, verified tree at *root* (*files*: its hash map)."""
    from ..cluster.shadowing import top_level_names
    from ..package_format.yamlio import load_yaml

    source = f"{label}: {MANIFEST_FILE} in the verified tree"
    if MANIFEST_FILE not in files:
        raise ManifestError(f"{label}: the verified tree ({tree_digest}) holds no {MANIFEST_FILE}",
                            hint="the version was not published by forge; do not use it")
    try:
        text = (Path(root) / MANIFEST_FILE).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ManifestError(f"{source}: not UTF-8 text") from None
    doc = load_yaml(text, source)
    manifest = PluginManifest.from_mapping(doc.data, source=source, lines=doc.line)
    return VerifiedTree(tree_digest=tree_digest, manifest=manifest, top_level=top_level_names(list(files)),
                        files=dict(files))


# -- the canonical comparison -------------------------------------------------------------

def _value(v: Any) -> Any:
    """A hashable form of a JSON value in which equal values are equal: numbers by value, bools apart."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("num", v)
    if isinstance(v, float):
        return ("num", int(v)) if v.is_integer() else ("num", v)
    if isinstance(v, str):
        return ("str", v)
    if v is None:
        return ("null",)
    if isinstance(v, (list, tuple)):
        return ("list", tuple(_value(x) for x in v))
    if isinstance(v, Mapping):
        return ("map", tuple(sorted((str(k), _value(x)) for k, x in v.items())))
    return ("other", repr(v))


def _specifier(text: str | None) -> str | None:
    """The specifier set *text* as packaging writes it (a plain one without importing its SpecifierSet)."""
    if text is None:
        return None
    plain = plain_text(text)
    if plain is not None:
        return plain
    from packaging.specifiers import SpecifierSet

    return str(SpecifierSet(text))


def canonical(manifest: Mapping | PluginManifest, top_level, files: Mapping | None = None) -> dict:
    """The comparable form of a manifest (plugin.yaml data or a :class:`PluginManifest`) and
    its top-level names; raise :class:`ManifestError` when *manifest* is not a valid plugin.yaml."""
    from packaging.version import Version

    # PEP 503 names without packaging.utils, which imports packaging.tags (logging, platform, sysconfig)
    from ..cluster.fingerprint import canonical_name

    m = manifest if isinstance(manifest, PluginManifest) else PluginManifest.from_mapping(dict(manifest), "record")
    params = {}
    for key, p in m.params.items():
        choices = None if p.choices is None else tuple(sorted({_value(c) for c in p.choices}))
        params[key] = (p.type, _value(p.default) if p.has_default else ("absent",), p.description, choices)
    out = {
        "name": m.name,
        "version": Version(m.version),  # PEP 440 equality: 1.2 is 1.2.0
        "kind": m.kind,
        "load": m.load,
        "entrypoint": m.entrypoint,
        "params": params,
        "requires": (
            _specifier(m.requires.core),
            _specifier(m.requires.python),
            {canonical_name(k): _specifier(v) for k, v in m.requires.packages.items()},
        ),
        "targets": tuple(sorted(set(m.targets))),
        "top_level": tuple(sorted(set(top_level))),
    }
    if files is not None:
        out["files"] = dict(files)
    return out


def disagreeing(tree: VerifiedTree, manifest: Mapping | PluginManifest, top_level, files: Mapping | None = None) -> list:
    """The fields of :data:`FIELDS` in which a record (*manifest*, *top_level*, *files*: None
    when the record has no file map) differs from *tree*; ``["manifest"]`` when it is not a
    valid plugin.yaml at all."""
    try:
        got = canonical(manifest, top_level, files)
    except (ManifestError, ValueError, TypeError, AttributeError):
        return ["manifest"]
    want = canonical(tree.manifest, tree.top_level, tree.files if files is not None else None)
    return [f for f in FIELDS if f in want and got.get(f) != want[f]]


def registry_label(url: str) -> str:
    """How an error names a registry: ``registry URL`` with userinfo masked."""
    from ..urls import mask_url

    return f"registry {mask_url(url)}"


def check_record(source: str, what: str, ref: str, tree: VerifiedTree, manifest, top_level,
                 files: Mapping | None = None, *, hint: str | None = None) -> None:
    """Raise a :class:`TamperedError` naming the fields in which *what* (``the
    registry record``, ``the OCI config``, ``the bundle's config``, ``the lock entry``) of
    *ref* disagrees with the plugin.yaml and files of its verified tree. *source* names what
    is tampered: ``registry URL`` (:func:`registry_label`), a bundle, a lock file."""
    fields = disagreeing(tree, manifest, top_level, files)
    if not fields:
        return
    raise TamperedError(
        f"{source} is tampered: {what} of {ref} disagrees with plugin.yaml in its verified tree "
        f"({tree.tree_digest}) in {', '.join(fields)}",
        hint=hint or ("nothing was used; whoever can write it edited the version's metadata — tell its owner; "
                      "the tree digest and signatures cover plugin.yaml, so the files themselves are intact"),
    )
