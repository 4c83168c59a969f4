"""What changed between two locks (``forge lock diff``) or two plugin versions (``forge plugin diff``).

A lock diff lists, per plugin (keyed by manifest name, which is unique in a lock), one of:

- ``added`` / ``removed``;
- ``re-versioned``: another version (``upgrade`` or ``downgrade`` by PEP 440 order);
- ``re-digested``: the same version with other content — a moved tag, or a lock edited by
  hand; always loud;
- ``changed``: same version and digest, other recorded facts (the request, the signature).

and for each, what differs in the recorded facts: the manifest fields (``params`` and
their defaults, ``targets``, ``requires``, ``load``, ``kind``, ``entrypoint``), the
top-level module names, the signature (key and envelope), and the files (from the lock's
per-file hashes: no download). ``load_order`` says when the common plugins were reordered.
With *files*, each changed plugin's file-level unified diff is added, its trees fetched by
tree digest from the cache first, else the registry (:func:`file_diff`).

Laptop side.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import LockError, UsageError
from .lockfile import FILENAME, LockEntry, LockFile

if TYPE_CHECKING:
    from ..cluster.jobspec import PluginEntry

# Exit code of `forge lock diff` / `forge plugin diff` when the two sides differ (docs/errors.md):
# not an error, and no error class uses it, so CI can tell "changed" from "failed".
DIFFERENT = 20

MANIFEST_FIELDS = ("kind", "load", "entrypoint", "targets", "requires", "params", "top_level")


def facts_of_plugin(plugin: PluginEntry) -> dict:
    """What a ``PluginEntry`` (a lock's, a registry record's, a plugin directory's) says of one plugin, as the diff compares it."""
    return {
        "owner": plugin.owner,
        "name": plugin.name,
        "version": plugin.version,
        "digest": plugin.tree_digest,
        "kind": plugin.kind,
        "load": plugin.load,
        "entrypoint": plugin.entrypoint,
        "targets": list(plugin.targets),
        "requires": dict(plugin.requires),
        "params": dict(plugin.params),
        "top_level": list(plugin.top_level),
        "files": dict(plugin.files),
    }


def facts_of_entry(entry: LockEntry) -> dict:
    """What a lock records of one plugin: its ``PluginEntry``'s facts, the request and the signature facts."""
    return {**facts_of_plugin(entry.plugin), "owner": entry.owner, "request": entry.request,
            "signature": dict(entry.signature) if entry.signature is not None else None}


def _version_direction(old: str, new: str) -> str:
    from packaging.version import Version

    try:
        return "upgrade" if Version(new) > Version(old) else "downgrade"
    except ValueError:
        return "other version"


def short_digest(digest: str | None) -> str:
    if not digest:
        return "-"
    algo, _, hex_ = digest.partition(":")
    return f"{algo}:{hex_[:12]}…" if hex_ else digest


def _list_change(old: list, new: list) -> dict | None:
    if list(old) == list(new):
        return None
    return {
        "old": list(old),
        "new": list(new),
        "added": [x for x in new if x not in old],
        "removed": [x for x in old if x not in new],
    }


def _mapping_change(old: dict, new: dict) -> dict | None:
    if old == new:
        return None
    keys = sorted(set(old) | set(new))
    return {
        "added": {k: new[k] for k in keys if k not in old},
        "removed": {k: old[k] for k in keys if k not in new},
        "changed": {k: {"old": old[k], "new": new[k]} for k in keys if k in old and k in new and old[k] != new[k]},
    }


def _requires_change(old: dict, new: dict) -> dict | None:
    """``requires`` flattened to ``core``, ``python`` and ``packages.NAME``."""
    def flat(r: dict) -> dict:
        out = {k: v for k, v in r.items() if k != "packages"}
        for name, spec in (r.get("packages") or {}).items():
            out[f"packages.{name}"] = spec
        return out

    return _mapping_change(flat(old or {}), flat(new or {}))


def _files_change(old: dict, new: dict) -> dict | None:
    if old == new:
        return None
    return {
        "added": sorted(p for p in new if p not in old),
        "removed": sorted(p for p in old if p not in new),
        "changed": sorted(p for p in new if p in old and old[p] != new[p]),
    }


def _signature_change(old: dict | None, new: dict | None) -> dict | None:
    if old == new:
        return None
    return {"old": old, "new": new}


def compare_facts(old: dict, new: dict) -> dict:
    """The fields of two plugins' facts that differ: ``{field: change}`` (empty when none)."""
    out: dict = {}
    for key in ("owner", "kind", "load", "entrypoint", "request"):
        if key in old and key in new and old[key] != new[key]:
            out[key] = {"old": old[key], "new": new[key]}
    for key in ("targets", "top_level"):
        change = _list_change(old.get(key) or [], new.get(key) or [])
        if change:
            out[key] = change
    change = _mapping_change(old.get("params") or {}, new.get("params") or {})
    if change:
        out["params"] = change
    change = _requires_change(old.get("requires") or {}, new.get("requires") or {})
    if change:
        out["requires"] = change
    change = _files_change(old.get("files") or {}, new.get("files") or {})
    if change:
        out["files"] = change
    if "signature" in old or "signature" in new:
        change = _signature_change(old.get("signature"), new.get("signature"))
        if change:
            out["signature"] = change
    return out


def _brief(f: dict | None) -> dict | None:
    if f is None:
        return None
    d = {"ref": f"{f['owner']}/{f['name']}@{f['version']}", "version": f["version"], "digest": f["digest"]}
    if "signature" in f:
        d["signature"] = f["signature"]
    return d


def diff_locks(old: LockFile, new: LockFile) -> dict:
    """The document ``forge lock diff --json`` prints (without its ``old``/``new`` labels)."""
    old_by = {e.name: e for e in old.plugins}
    new_by = {e.name: e for e in new.plugins}
    names = [e.name for e in new.plugins] + [e.name for e in old.plugins if e.name not in new_by]
    plugins = []
    counts: dict = {}
    for name in names:
        o, n = old_by.get(name), new_by.get(name)
        of = facts_of_entry(o) if o else None
        nf = facts_of_entry(n) if n else None
        if of is None:
            change = "added"
            fields: dict = {}
        elif nf is None:
            change = "removed"
            fields = {}
        else:
            fields = compare_facts(of, nf)
            if of["version"] != nf["version"]:
                change = "re-versioned"
            elif of["digest"] != nf["digest"]:
                change = "re-digested"
            elif fields:
                change = "changed"
            else:
                continue
        item = {"name": name, "change": change, "old": _brief(of), "new": _brief(nf), "fields": fields}
        if change == "re-versioned":
            item["direction"] = _version_direction(of["version"], nf["version"])  # type: ignore[index]
        plugins.append(item)
        counts[change] = counts.get(change, 0) + 1
    common_old = [e.name for e in old.plugins if e.name in new_by]
    common_new = [e.name for e in new.plugins if e.name in old_by]
    order = {"old": [e.name for e in old.plugins], "new": [e.name for e in new.plugins]} if common_old != common_new else None
    return {"equal": not plugins and order is None, "plugins": plugins, "load_order": order, "counts": counts}


# -- reading the two sides -------------------------------------------------------------------------


def read_lock_file(path: str | os.PathLike) -> LockFile:
    """The lock at *path*; a missing file is a clear error."""
    from .lockfile import read_lock

    lock = read_lock(path)
    if lock is None:
        raise LockError(f"{path}: no such lock file", hint="give the path of a plugins.lock.json, or run 'forge lock' to write one")
    return lock


def _git(args: list, cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise UsageError("--git needs git, which is not on PATH", hint="install git, or compare two files: forge lock diff OLD NEW") from None


def lock_at_revision(lock_path: Path, rev: str) -> tuple[LockFile, bool]:
    """The lock at *lock_path* as committed at git revision *rev*; ``(lock, existed)``.

    A lock the revision does not hold reads as an empty lock (every plugin then shows as
    added). A revision that does not exist is a one-line error; in a shallow clone, the
    hint says how to fetch it.
    """
    lock_path = Path(lock_path).absolute()
    where = lock_path.parent
    if not where.is_dir():
        raise UsageError(f"{where}: no such directory")
    top = _git(["rev-parse", "--show-toplevel"], where)
    if top.returncode != 0:
        raise UsageError(
            f"--git {rev}: {where} is not in a git repository",
            hint="compare two files instead: forge lock diff OLD NEW",
        )
    if rev.startswith("-"):
        raise UsageError(f"--git {rev!r}: a revision does not start with '-'")
    found = _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], where)
    if found.returncode != 0 and rev == "HEAD" and _git(["rev-list", "-n", "1", "--all"], where).stdout.strip() == "":
        return LockFile(), False  # a repository without commits yet: nothing was committed
    if found.returncode != 0:
        shallow = _git(["rev-parse", "--is-shallow-repository"], where).stdout.strip() == "true"
        if shallow:
            remote, _, branch = rev.partition("/")
            fetch = f"git fetch {remote} {branch}" if branch and _git(["remote"], where).stdout.split().count(remote) else "git fetch --unshallow"
            raise UsageError(
                f"--git {rev}: revision not found in this shallow clone",
                hint=f"fetch it first ({fetch}, or 'git fetch --unshallow'); in CI check out with full history (actions/checkout: fetch-depth: 0)",
            )
        raise UsageError(f"--git {rev}: no such revision in {top.stdout.strip()}", hint="name a commit, branch or tag: forge lock diff --git origin/main")
    commit = found.stdout.strip()
    real = Path(os.path.realpath(lock_path))
    rel = os.path.relpath(real, os.path.realpath(top.stdout.strip())).replace(os.sep, "/")
    shown = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=where, capture_output=True, timeout=60)
    if shown.returncode != 0:
        return LockFile(), False
    try:
        data = json.loads(shown.stdout.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise LockError(f"{rel} at {rev}: not valid JSON: {exc}") from None
    return LockFile.from_dict(data, f"{rel} at {rev}"), True


def check_schema(lock: LockFile, label: str) -> None:
    """Both sides in the current schema: a v1 lock recorded other facts, so a diff would mislead."""
    if lock.read_as is not None:
        raise LockError(
            f"{label} is a {lock.read_as} lock; the diff compares {FILENAME} files of the current schema",
            hint="rewrite it with 'forge lock' (which upgrades the schema), commit it, and diff again",
        )


# -- file-level diffs --------------------------------------------------------------------------------


def _fetch_tree(plugin: PluginEntry, artifact_digest: str | None, registry, locked_from: str | None, dest: Path) -> Path:
    """The files of *plugin* (a lock entry's), by tree digest: the cache first, else
    *registry* (the one in use), else the registry the lock names as its hint — whichever
    serves that version with that tree digest (the digest is the identity)."""
    from dataclasses import replace

    from ..errors import ForgeError
    from ..registry.store import Pin, unpack_from_any

    assert plugin.owner is not None  # a lock entry's plugin: a package
    candidates = [registry] if registry is not None else []
    if locked_from and (registry is None or locked_from != registry.url):
        try:
            from ..registry.factory import open_registry

            candidates.append(open_registry(locked_from))
        except ForgeError:
            pass
    found, reasons = unpack_from_any(replace(Pin.of(plugin), artifact_digest=artifact_digest), dest, candidates, locked_from)
    if found:
        return dest
    raise LockError(
        f"{plugin.ref} ({short_digest(plugin.tree_digest)}) is not in the cache and no registry serves it"
        + (f": {reasons[-1]}" if reasons else ""),
        hint="pass --registry URL of a registry that serves this version (or pull it once: forge plugin pull)",
    )


def _read_text(path: Path) -> list | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    if b"\0" in data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    # lines end at a newline only: a carriage return or a form feed inside a line is part of
    # it (and shown spelled out), never a line of the diff of its own
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def tree_diff(old_root: Path | None, new_root: Path | None, old_label: str, new_label: str, files: dict) -> str:
    """The unified diff of the files *files* (``_files_change`` shape) names between two trees."""
    out = []
    for rel in sorted(set(files.get("added", [])) | set(files.get("removed", [])) | set(files.get("changed", []))):
        a = _read_text(old_root / rel) if old_root else []
        b = _read_text(new_root / rel) if new_root else []
        if a is None or b is None:
            out.append(f"Binary files {old_label}/{rel} and {new_label}/{rel} differ\n")
            continue
        from_name = f"{old_label}/{rel}" if rel not in files.get("added", []) else "/dev/null"
        to_name = f"{new_label}/{rel}" if rel not in files.get("removed", []) else "/dev/null"
        for line in difflib.unified_diff(a, b, from_name, to_name):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def file_diffs(diff: dict, old: LockFile, new: LockFile, registry) -> None:
    """Add ``diff`` (unified text) to every plugin of *diff* whose files differ."""
    old_by = {e.name: e for e in old.plugins}
    new_by = {e.name: e for e in new.plugins}
    tmp = Path(tempfile.mkdtemp(prefix="forge-lock-diff-"))
    try:
        for i, item in enumerate(diff["plugins"]):
            o, n = old_by.get(item["name"]), new_by.get(item["name"])
            of = facts_of_entry(o) if o else None
            nf = facts_of_entry(n) if n else None
            files = item["fields"].get("files")
            if files is None:
                if of is None and nf is not None:
                    files = {"added": sorted(nf["files"]), "removed": [], "changed": []}
                elif nf is None and of is not None:
                    files = {"added": [], "removed": sorted(of["files"]), "changed": []}
                else:
                    continue
            a = _fetch_tree(o.plugin, o.artifact_digest, registry, old.registry, tmp / f"{i}-old") if o else None
            b = _fetch_tree(n.plugin, n.artifact_digest, registry, new.registry, tmp / f"{i}-new") if n else None
            label_a = f"{of['name']}@{of['version']}" if of else "/dev/null"
            label_b = f"{nf['name']}@{nf['version']}" if nf else "/dev/null"
            if label_a == label_b:
                label_a, label_b = f"a/{label_a}", f"b/{label_b}"
            item["diff"] = tree_diff(a, b, label_a, label_b, files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- two versions of a plugin (forge plugin diff) ----------------------------------------------


def diff_versions(registry, ref_a: str, ref_b: str, *, stat: bool = False) -> dict:
    """What changed from the published version *ref_a* to *ref_b*: another reference, just
    ``@VERSION`` (another version of *ref_a*'s plugin), or a plugin directory (what publishing
    it would change). A reference without an owner gets the default owner.

    ``{"old": {ref, digest}, "new": {ref, digest}, "equal", "fields"}``, and ``diff`` (the
    unified diff of the files that differ, fetched by tree digest through the cache, else
    *registry*) unless *stat*.
    """
    from ..registry.publish import with_default_owner
    from ..registry.resolve import resolve
    from ..registry.store import PluginStore

    ref_a = with_default_owner(ref_a)
    local = Path(ref_b) if not ref_b.startswith("@") and Path(ref_b).is_dir() else None
    a = resolve(registry, ref_a)
    old = a.recorded_entry()
    b = None
    if local is not None:
        from .dev_plugins import checked_directory

        plugin, _ = checked_directory(local)
        new = plugin.replace(owner=a.owner)
        new_ref = f"{new.ref} ({local})"
    else:
        b = resolve(registry, with_default_owner(ref_a.partition("@")[0] + ref_b if ref_b.startswith("@") else ref_b))
        new, new_ref = b.recorded_entry(), b.ref
    fields = compare_facts(facts_of_plugin(old), facts_of_plugin(new))
    doc: dict = {
        "old": {"ref": a.ref, "digest": old.tree_digest},
        "new": {"ref": new_ref, "digest": new.tree_digest},
        "equal": old.tree_digest == new.tree_digest and not fields,
        "fields": fields,
    }
    if not stat and fields.get("files"):
        tmp = Path(tempfile.mkdtemp(prefix="forge-plugin-diff-"))
        try:
            store = PluginStore(registry)
            root_a = store.unpack(a, tmp / "a")
            root_b = store.unpack(b, tmp / "b") if b is not None else local
            label_a, label_b = f"{old.name}@{old.version}", f"{new.name}@{new.version}"
            if label_a == label_b:
                label_a, label_b = "a/" + label_a, "b/" + label_b
            doc["diff"] = tree_diff(root_a, root_b, label_a, label_b, fields["files"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return doc
