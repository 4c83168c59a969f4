"""``forge lock``: resolve forge.yaml's plugin requests against a registry into the lock.

- :func:`lock_experiment` writes ``plugins.lock.json`` (only when its content changes).
  A plugin already locked keeps its version while forge.yaml's request still admits it;
  a request edited so that it no longer does is re-resolved (and the change says
  "request changed"); otherwise only ``upgrade`` (``forge lock --upgrade [NAME]``)
  re-resolves a locked plugin. A locked
  version the registry now serves with another tree digest (a moved tag) is a hard error
  naming both digests.
- :func:`check_lock` (``forge lock --check``) writes nothing; it raises when the lock no
  longer satisfies forge.yaml, or (unless offline) when the registry no longer serves the
  locked content.
- :func:`fresh_lock` is what ``forge submit`` uses: the lock against forge.yaml alone.

Laptop side.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import LockError, ManifestError, UsageError
from ..package_format.manifest import PluginManifest
from .config import Experiment
from .lockfile import (
    SCHEMA,
    LoadedPlugin,
    LockEntry,
    LockFile,
    check_conflicts,
    check_module_names,
    read_lock,
    stale_reasons,
    write_lock,
)

ALL = "*"  # upgrade every plugin


@dataclass(frozen=True)
class LockResult:
    lock: LockFile
    written: bool  # False: the file already held this content
    changes: list = field(default_factory=list)  # one line per change to the lock; empty: the lock would not change
    shadowed: list = field(default_factory=list)  # built-ins hidden by a package of the same name
    verdicts: dict = field(default_factory=dict)  # name -> verified|unverified|unsigned, by this machine's trust file


@dataclass(frozen=True)
class Builtin:
    """A built-in plugin of the recipe, checked (the files that would be packed, their digest)."""

    name: str
    root: Path
    manifest: PluginManifest
    files: tuple
    top_level: tuple
    tree_digest: str

    def loaded(self) -> LoadedPlugin:
        return LoadedPlugin(
            label=f"built-in {self.name}", name=self.name, kind=self.manifest.kind, top_level=self.top_level, builtin=True
        )


def load_builtins(exp: Experiment) -> list:
    """Check every built-in forge.yaml names under ``common/algorithms/<name>/``."""
    out = []
    for name in exp.recipe_plugins:
        from ..authoring.checks import require_valid  # (ast, tokenize: only where there are built-ins)

        root = exp.builtin_dir(name)
        if not (root / "plugin.yaml").is_file():
            from ..package_format.manifest import closest

            present = sorted(q.parent.name for q in root.parent.glob("*/plugin.yaml"))
            guess = closest(name, present)
            raise ManifestError(
                f"{exp.path}: recipe.plugins names '{name}', but {root}/plugin.yaml does not exist"
                + (f" (did you mean '{guess}'?)" if guess else ""),
                hint=(f"built-ins here: {', '.join(present)}" if present else f"create the built-in under common/algorithms/{name}/")
                + "; or remove it from recipe.plugins",
            )
        report = require_valid(root)
        manifest = report.manifest
        assert manifest is not None and report.digest is not None  # require_valid raised otherwise
        if manifest.name != name:
            raise LockError(
                f"{root}/plugin.yaml: name '{manifest.name}' does not match its directory common/algorithms/{name}/"
            )
        out.append(
            Builtin(
                name=name,
                root=root,
                manifest=manifest,
                files=tuple(report.files),
                top_level=tuple(report.top_level),
                tree_digest=report.digest,
            )
        )
    return out


def entry_from_tree(info, tree, request: str, signature: dict | None) -> LockEntry:
    """A lock entry for the published version *info*, its metadata read from its verified *tree*."""
    return LockEntry.from_tree(tree, owner=info.owner, version=info.version, request=request,
                               artifact_digest=info.artifact_digest, signature=signature)


def check_entry(entry: LockEntry, tree, lock_name: str = "plugins.lock.json") -> None:
    """Refuse a lock entry whose metadata disagrees with its version's verified tree (an edited lock)."""
    from ..registry.verified import check_record

    check_record(lock_name, "the lock entry", entry.ref, tree, entry.manifest_dict(), entry.plugin.top_level, entry.plugin.files,
                 hint=f"the lock was edited, or written from a tampered registry; restore {lock_name} from version "
                      f"control, or delete it and run: forge lock (it reads each version's metadata from its verified tree)")


def lock_experiment(
    exp: Experiment,
    registry,
    *,
    upgrade: str | set | None = None,
    require_signatures: bool = False,
    trust=None,
    previous: LockFile | None = None,
    accept_signature: set | None = None,
) -> LockResult:
    """Resolve *exp*'s plugins as :func:`resolve_lock` does (the same keywords) and write the lock."""
    result = resolve_lock(exp, registry, upgrade=upgrade, require_signatures=require_signatures, trust=trust,
                          previous=previous, accept_signature=accept_signature)
    return replace(result, written=write_lock(result.lock, exp.lock_path))


def resolve_lock(
    exp: Experiment,
    registry,
    *,
    upgrade: str | set | None = None,
    require_signatures: bool = False,
    trust=None,
    previous: LockFile | None = None,
    accept_signature: set | None = None,
) -> LockResult:
    """What :func:`lock_experiment` would write (``written`` is False); writes nothing.

    *upgrade* is a set of names or :data:`ALL`. *previous* defaults to the lock file next to
    forge.yaml. An entry locked as signed by key K keeps its signature facts while the
    registry serves a valid envelope by K over the locked statement (other envelopes beside it break nothing); otherwise this raises
    :class:`~starforge.errors.SignatureError`, unless the plugin is named in
    *accept_signature* (``forge lock --accept-signature NAME``): then the signature served
    now (or its absence) is recorded, the version unchanged.
    """
    from ..registry.resolve import resolve
    from ..registry.signature_facts import facts_of
    from ..registry.store import Pin, PluginStore, moved_tag_error
    from ..terminal_text import shown

    previous = read_lock(exp.lock_path) if previous is None else previous
    upgrade = _upgrade_names(exp, upgrade)
    accept = _plugin_names(exp, accept_signature, "--accept-signature")
    store = PluginStore(registry, trust=trust, locked_from=previous.registry if previous else None)
    trust = store.trust
    builtins = load_builtins(exp)
    entries: list = []
    changes: list = []
    verdicts: dict = {}
    if previous is not None and previous.read_as:
        changes.append(
            f"rewrote {exp.lock_path.name} from {previous.read_as} to {SCHEMA}: signatures are recorded as registry "
            "facts (envelope digest, key id), no longer as a trust verdict"
        )
    for req in exp.plugins:
        before = previous.get(req.name) if previous else None
        # a request edited so that it no longer admits the locked version is re-resolved,
        # as cargo, npm and uv do; one that still admits it keeps it
        request_changed = before is not None and before.owner == req.owner and not _admits(req, before.version)
        yanked_before = None  # the locked version's yank facts, when that yank moves the lock off it
        if before is not None and before.owner == req.owner and req.name not in upgrade and not request_changed:
            assert previous is not None  # before came from it
            info = store.locked(Pin.of(before))  # a moved tag is refused there
            yank = store.yank(info.owner, info.name, info.version, info.tree_digest)
            if yank.yanked and not req.allow_yanked:
                # a locked version yanked since is left for the newest the request admits that is not
                yanked_before = yank
                info = resolve(registry, req.request, skip_yanked=True, trust=trust)
        else:
            info = resolve(registry, req.request, skip_yanked=True, trust=trust)
            if (
                before is not None
                and before.owner == req.owner
                and info.version == before.version
                and info.tree_digest != before.tree_digest
            ):
                # re-resolving landed on the locked version, whose content changed: an
                # upgrade never re-pins a moved tag
                raise moved_tag_error(before, info.tree_digest, registry, previous.registry if previous else None)
        yank = store.yank(info.owner, info.name, info.version, info.tree_digest)
        if yank.yanked and not req.allow_yanked:  # an exact pin: it selects its version, yanked or not
            from .yanked import yanked_error

            raise yanked_error(yank, req.request, store)
        tree = store.tree(info)
        same_version = before is not None and before.owner == req.owner and before.version == info.version
        locked_envelope: bytes | None = None
        if before is not None and same_version and Pin.of(before).enforced and req.name not in accept:
            # the locked signature facts are enforced: the registry must still serve a valid
            # envelope by the locked key (a re-sign or a rotated key beside it breaks nothing)
            locked_envelope = store.served_locked_envelope(Pin.of(before), info)
        fetched = store.fetch_verified(info, require=require_signatures)
        verdicts[req.name], envelope = fetched.status, fetched.envelope
        facts = facts_of(envelope)
        if locked_envelope is not None:
            assert before is not None
            facts, envelope = before.signature, locked_envelope
        if envelope is not None:
            store.keep_envelope(info, envelope)  # offline staging
        if before is not None and same_version:
            # the locked metadata must be what the verified tree says (compared canonically,
            # so a lock written by an earlier release stays as it is); a mirror may serve
            # another archive of the same files: the tree digest is the identity
            check_entry(before, tree, exp.lock_path.name)
            entry = replace(before, request=req.request, signature=facts)
        else:
            entry = entry_from_tree(info, tree, req.request, facts)
        entry = replace(entry, allow_yanked=req.allow_yanked)
        if entry.name != req.name:
            raise LockError(f"{req.request}: the registry serves a plugin whose manifest is named '{entry.name}'")
        if before is None or before.owner != req.owner:
            changes.append(f"added {entry.ref} ({entry.tree_digest})")
        elif yanked_before is not None:
            changes.append(f"{entry.owner}/{req.name} {before.version} -> {entry.version} ({before.version} is yanked: "
                           f"{shown(yanked_before.reason)}) ({entry.tree_digest})")
        elif before.version != entry.version and request_changed:
            changes.append(f"{entry.owner}/{req.name} {before.version} -> {entry.version} (request changed) ({entry.tree_digest})")
        elif before.version != entry.version:
            changes.append(f"upgraded {req.name} {before.version} -> {entry.version} ({entry.tree_digest})")
        else:
            if before.request != entry.request:
                changes.append(f"{req.name}: request is now {entry.request}; stays at {entry.version}")
            changes.extend(_field_changes(before, entry))
        entries.append(entry)
    if previous:
        kept = {e.name for e in entries}
        changes.extend(f"removed {e.ref}" for e in previous.plugins if e.name not in kept)
        order = [e.name for e in entries]
        if [e.name for e in previous.plugins if e.name in kept] != [n for n in order if previous.get(n)]:
            changes.append(f"load order is now {', '.join(order)}")
    shadowed = check_conflicts([e.loaded() for e in entries], [b.loaded() for b in builtins])
    check_module_names([e.loaded() for e in entries], exp.root)
    lock = LockFile(plugins=tuple(entries), registry=registry.url)
    return LockResult(lock=lock, written=False, changes=changes, shadowed=shadowed, verdicts=verdicts)


def _field_changes(before: LockEntry, after: LockEntry) -> list:
    """What changed in the entry of one locked version (same version, same content)."""
    if before.version != after.version:
        return []
    out = []
    if before.signature != after.signature:
        from ..registry.signature_facts import short_key

        if after.signature is None:
            old_key = (before.signature or {}).get("key_id")
            out.append(f"{after.ref}: signature changed: key {short_key(old_key)} -> none")
        elif before.signature is None:
            out.append(f"{after.ref}: signature recorded ({after.signature['envelope_digest']}, key {after.signature['key_id']})")
        elif before.signature.get("envelope_digest") is None:
            out.append(f"{after.ref}: signature facts recorded ({after.signature['envelope_digest']}, key {after.signature['key_id']})")
        else:
            out.append(f"{after.ref}: signature changed: key {short_key(before.signature.get('key_id'))} -> "
                       f"{short_key(after.signature.get('key_id'))} ({after.signature['envelope_digest']})")
    a, b = before.to_dict(), after.to_dict()
    others = sorted(k for k in set(a) | set(b) if k not in ("signature", "request") and a.get(k) != b.get(k))
    if others:
        out.append(f"{after.ref}: {', '.join(others)} updated from the registry")
    return out


def fresh_lock(exp: Experiment, builtins: list | None = None) -> LockFile:
    """The lock, checked against forge.yaml alone (what submit needs); never re-resolved."""
    lock = read_lock(exp.lock_path)
    if lock is None:
        raise LockError(f"{exp.lock_path}: no lock file next to forge.yaml", hint=f"run: forge lock {_dir_arg(exp)}".rstrip())
    reasons = stale_reasons(exp.plugins, lock)
    if reasons:
        raise LockError(f"{exp.lock_path.name} is stale: {'; '.join(reasons)}", hint=_stale_hint(exp, lock))
    builtins = load_builtins(exp) if builtins is None else builtins
    check_conflicts([e.loaded() for e in lock.plugins], [b.loaded() for b in builtins])
    check_module_names([e.loaded() for e in lock.plugins], exp.root)
    return lock


def check_lock(exp: Experiment, registry=None, *, require_signatures: bool = False, trust=None) -> LockFile:
    """``forge lock --check``: raise unless the lock satisfies forge.yaml and *registry* serves it.

    With *registry* None (``--offline``) only forge.yaml and the built-ins are consulted.
    Writes nothing.
    """
    lock = fresh_lock(exp)
    hint = f"run: forge lock {_dir_arg(exp)}".rstrip()
    if registry is None:
        if lock.read_as:
            raise LockError(
                f"{exp.lock_path.name} is in the older format {lock.read_as}; forge lock would rewrite it as {SCHEMA}", hint=hint
            )
        return lock
    from ..registry.store import PluginStore
    from .yanked import check_yanked

    # a yanked version is refused as such (exit 18), not as a stale lock
    check_yanked(lock, PluginStore(registry, trust=trust, locked_from=lock.registry))
    result = resolve_lock(exp, registry, require_signatures=require_signatures, trust=trust, previous=lock)
    if result.changes or not result.lock.same_content(lock):
        changes = "; ".join(result.changes) or "its content"
        raise LockError(f"{exp.lock_path.name} is out of date: forge lock would change it: {changes}", hint=hint)
    return lock


def open_experiment_registry(exp: Experiment, explicit: str | None = None, *, insecure: bool = False, ca_file: str | None = None):
    """The registry for *exp*: ``--registry``, ``FORGE_REGISTRY``, forge.yaml ``registry:``, user config, embedded."""
    import os

    from ..registry.factory import open_registry

    url = explicit or os.environ.get("FORGE_REGISTRY") or None
    if url is None and exp.registry:
        url = exp.registry
        if "://" not in url and not Path(url).is_absolute():
            url = str((exp.root / url).resolve())
    return open_registry(url, insecure=insecure, ca_file=ca_file)


def _upgrade_names(exp: Experiment, upgrade) -> set:
    names = {r.name for r in exp.plugins}
    if upgrade is None:
        return set()
    if upgrade == ALL:
        return names
    upgrade = {upgrade} if isinstance(upgrade, str) else set(upgrade)
    unknown = sorted(upgrade - names)
    if unknown:
        raise UsageError(
            f"--upgrade {unknown[0]}: no plugin of that name in forge.yaml",
            hint=f"plugins: {', '.join(sorted(names)) or 'none'}",
        )
    return upgrade


def _plugin_names(exp: Experiment, names, option: str) -> set:
    """*names* (plugin names) checked against forge.yaml's requests."""
    known = {r.name for r in exp.plugins}
    names = set(names or ())
    unknown = sorted(names - known)
    if unknown:
        raise UsageError(f"{option} {unknown[0]}: no plugin of that name in forge.yaml",
                         hint=f"plugins: {', '.join(sorted(known)) or 'none'}")
    return names


def _stale_hint(exp: Experiment, lock: LockFile) -> str:
    """What makes the lock match forge.yaml again: ``forge lock`` (it re-resolves a request
    that changed and keeps every other locked version), naming the experiment directory
    unless it is the current one."""
    return f"run: forge lock {_dir_arg(exp)}".rstrip()


def _admits(req, version: str) -> bool:
    try:
        return req.admits(version)
    except ValueError:
        return False


def _dir_arg(exp: Experiment) -> str:
    from pathlib import Path as _P

    try:
        rel = exp.root.relative_to(_P.cwd().resolve())
    except ValueError:
        return str(exp.root)
    return "" if str(rel) == "." else str(rel)
