"""From a locked experiment to a JobSpec and a staged job directory (SPEC §8).

:func:`resolve_job` builds the :class:`~starforge.cluster.jobspec.JobSpec` (nothing is written):
the lock must be fresh against forge.yaml (a stale or missing lock is an error, never
re-resolved), the built-ins pass the static checks, and the hyperparameters are the
declared ``params`` defaults, then ``config:`` flattened, then the ``--set`` overrides.

:func:`stage_job` says where a submitted job's parts come from and hands them to
:func:`starforge.backends.staged.stage`, the one owner of a staged job (its layout,
temporary directory, modes, read-only step, rename, cleanup and binding)::

    forge_plugins/<name>/...          each locked package, fetched by tree digest (cache first)
    recipe/...                        the experiment directory, debris and .forge/ left out
    recipe/common/algorithms/<name>/  each built-in: exactly its packable files

The staged ``jobspec.json`` carries the tree digest of ``recipe/`` as staged
(``recipe.digest``), so ``forge jobs replay`` can prove the recipe it runs again is the one
the job ran.

Laptop side.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..backends.staged import StagedJob, copy_checked, stage
from ..cluster.digest import digest_of_map, file_map
from ..cluster.jobspec import JobSpec, PluginEntry
from ..cluster.readonly import make_read_only  # noqa: F401  (the staging tests use it from here)
from ..cluster.utctime import TIMESTAMP
from ..directories import PRIVATE, dir_mode
from ..errors import VerificationError
from ..registry.verified import read_tree
from .config import Experiment
from .lock import Builtin, check_entry, fresh_lock, load_builtins
from .lockfile import LockFile, check_conflicts
from .overrides import build_hyperparams, declared_params

# Never copied into recipe/: tool debris, VCS data, virtualenvs, and the experiment's own
# .forge/ (where local jobs are staged).
SKIP_DIRS = {
    "__pycache__",
    ".git",
    ".hg",
    ".svn",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
    ".venv",
    ".ipynb_checkpoints",
}
SKIP_TOP_DIRS = {".forge"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".egg-info")
SKIP_FILES = {".DS_Store"}


@dataclass(frozen=True)
class ResolvedJob:
    """Everything needed to stage one job."""

    spec: JobSpec
    experiment: Experiment
    lock: LockFile
    builtins: list = field(default_factory=list)
    shadowed: list = field(default_factory=list)
    dev: tuple = ()  # DevPlugin: unpublished directories standing in for locked plugins (forge submit --dev)

    @property
    def published(self) -> LockFile:
        """The lock without the plugins a dev directory stands in for (what a registry can answer for)."""
        replaced = {d.entry.name for d in self.dev}
        return dataclasses.replace(self.lock, plugins=tuple(e for e in self.lock.plugins if e.name not in replaced))


def new_job_id(name: str, now: datetime | None = None) -> str:
    """``<name>-<UTC yyyymmdd-HHMMSS>-<4 hex>``, e.g. ``qwen3b-grpo-opsd-20261129-120000-3fa2``."""
    now = now or datetime.now(timezone.utc)
    return f"{name}-{now.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def builtin_entry(b: Builtin) -> PluginEntry:
    """The JobSpec's entry for a built-in: its manifest, its checked digest, its files hashed."""
    return b.manifest.plugin_entry(b.tree_digest, b.top_level, file_map(b.root, b.files))


def resolve_job(exp: Experiment, sets=(), *, backend: str | None = None, dev: dict | None = None) -> ResolvedJob:
    """The JobSpec for *exp* with the ``--set`` overrides *sets*; writes nothing.

    *dev* (``{name: directory}``, ``forge submit --dev``) puts unpublished plugin
    directories in place of locked plugins (:mod:`.dev_plugins`).
    """
    builtins = load_builtins(exp)
    lock = fresh_lock(exp, builtins)
    shadowed = check_conflicts([e.loaded() for e in lock.plugins], [b.loaded() for b in builtins])
    dev_plugins: tuple = ()
    if dev:
        from .dev_plugins import load_dev_plugins

        dev_plugins = tuple(load_dev_plugins(dev, list(lock.plugins)))
    stand_ins = {d.entry.name: d.entry for d in dev_plugins}
    plugins = tuple(stand_ins.get(e.name, e.plugin) for e in lock.plugins)
    declared = declared_params(
        [(p.ref, p.params) for p in plugins]
        + [(f"built-in {b.name}", {k: p.to_dict() for k, p in b.manifest.params.items()})
           for b in builtins if b.name not in shadowed]
    )
    config_lines = {}
    for key in exp.flat_config():
        line = exp.line(("config",) + tuple(key.split(".")))
        config_lines[key] = f"{exp.path}:{line}" if line else str(exp.path)
    hyperparams = build_hyperparams(declared, exp.flat_config(), sets, config_lines)
    backend = backend or exp.backend
    settings = exp.backend_settings(backend)
    now = datetime.now(timezone.utc)
    spec = JobSpec(
        id=new_job_id(exp.name, now),
        name=exp.name,
        created=now.strftime(TIMESTAMP),
        entrypoint=list(exp.entrypoint),
        hyperparams=hyperparams,
        plugins=plugins,
        recipe_plugins=tuple(builtin_entry(b) for b in builtins),
        core_version=__version__,
        strict_deferred=exp.strict_deferred,
        backend=backend,
        extra={backend: settings} if settings else {},
        python=exp.job_python(backend),
    )
    return ResolvedJob(spec=spec, experiment=exp, lock=lock, builtins=builtins, shadowed=shadowed, dev=dev_plugins)


def stage_job(job: ResolvedJob, job_dir: str | os.PathLike, registry, *, require_signatures: bool = False,
              trust=None, allow_yanked: bool = False) -> StagedJob:
    """Stage *job* at *job_dir* (which must not exist): the locked plugins, the experiment's tree.

    Signatures are checked first (:func:`verify_signatures`), so a plugin the trust file
    refuses is never staged. The staged ``jobspec.json`` carries each package's signature
    envelope, where one is known (:func:`carried_signatures`), for the launcher's optional
    check against a node-side trust file (``FORGE_TRUST``).
    """
    if job.dev and require_signatures:
        from ..errors import SignatureError

        raise SignatureError(
            f"dev plugin {job.dev[0].entry.ref} (from {job.dev[0].root}) is unpublished and unsigned; "
            "--require-signatures runs signed plugins only",
            hint="publish and sign it (forge plugin publish --sign), lock, and submit without --dev",
        )
    published = job.published
    from .yanked import check_yanked

    # a yanked version runs only when forge.yaml acknowledges it or with --allow-yanked; the record says so
    ran_yanked = check_yanked(published, registry, allow=allow_yanked, trust=trust)
    verify_signatures(published, registry, require=require_signatures, trust=trust)
    spec = with_signatures(job.spec, carried_signatures(published, registry))
    dev = {d.entry.name: d for d in job.dev}

    def fill_plugins(plugins_dir: Path) -> None:
        for entry in job.lock.plugins:
            target = plugins_dir / entry.name
            if entry.name in dev:
                from .dev_plugins import copy_dev_plugin

                copy_dev_plugin(dev[entry.name], target)
                continue
            materialize_locked(entry, target, registry, job.lock.registry)
            files = file_map(target)
            got = digest_of_map(files)
            if got != entry.tree_digest:
                raise VerificationError(f"{entry.ref}: staged files have digest {got}, the lock says {entry.tree_digest}")
            # what the JobSpec says of the plugin is the lock entry: it must be what the staged tree says
            check_entry(entry, read_tree(target, files, entry.tree_digest, entry.ref), job.experiment.lock_path.name)

    staged = stage(spec, job_dir, plugins=fill_plugins,
                   recipe=lambda dest: copy_recipe(job.experiment.root, dest, job.builtins))
    return dataclasses.replace(staged, ran_yanked=ran_yanked) if ran_yanked else staged


def verify_signatures(lock: LockFile, registry, *, require: bool = False, trust=None) -> dict:
    """Apply the trust check of ``forge lock --check`` to every locked plugin; ``{ref: status}``.

    A plugin needs a valid signature by a trusted key when its owner has trusted keys in
    the trust file (a stripped signature is an error, SPEC §6) or when *require*
    (``--require-signatures``); "verified" is decided here, by this machine's trust file,
    never taken from the lock. Those are
    verified against the registry in use with :func:`starforge.signing.verify_published`
    (the envelope lives there). When that registry cannot answer for the version (offline,
    or another registry than the lock's), an envelope that verified before and was kept in
    the cache (:func:`starforge.registry.cache.cached_signature`) is verified against the
    trust file instead. The others need no registry, so they still stage offline.
    """
    from ..cluster.dsse import UNVERIFIED, trust_rule
    from ..errors import RegistryError, SignatureError
    from ..registry.cache import cached_signature
    from ..registry.verified_fetch import fetch_verified
    from ..signing import VERIFIED, load_trust, verify_envelope
    from .locked_signature import staged_envelope

    trust = trust if trust is not None else load_trust()
    out = {}
    for entry in lock.plugins:
        # an entry locked as signed by key K needs a valid envelope by K (cache first, else the registry)
        locked = staged_envelope(entry, lambda e=entry: _served_for_signature(e, registry, lock.registry), trust)
        if trust_rule(trust.key_ids(entry.owner), signed=True, require=require) == UNVERIFIED:
            continue  # nothing to check it against, and nothing requires it
        if locked is not None:
            try:
                verify_envelope(locked, owner=entry.owner, name=entry.name, version=entry.version,
                                tree_digest=entry.tree_digest, trust=trust)
            except SignatureError:
                pass  # the locked key is not trusted here: another envelope may be by a trusted key
            else:
                out[entry.ref] = VERIFIED
                continue
        try:
            served = served_version(entry, registry, lock.registry, SIGNATURE_UNCHECKED)
        except RegistryError:  # not a moved tag (LockError): the registry cannot answer
            envelope = cached_signature(entry.owner, entry.name, entry.version, entry.tree_digest)
            if envelope is None:
                raise
            verify_envelope(
                envelope, owner=entry.owner, name=entry.name, version=entry.version, tree_digest=entry.tree_digest, trust=trust
            )
            status = VERIFIED
        else:
            status = fetch_verified(registry, served, trust=trust, require=require).status
        out[entry.ref] = status
    return out


def carried_signatures(lock: LockFile, registry) -> dict:
    """``{name: envelope text}`` for every locked package whose signature envelope is known.

    The cache holds the envelope of every version whose signature verified (at lock time or
    by :func:`verify_signatures` just before); a version the lock recorded as signed but
    whose envelope is not cached is asked of *registry*, and left without one when the
    registry cannot answer (offline). Nothing is verified here: the launcher verifies what
    it is given against its own trust file.
    """
    from ..errors import LockError, RegistryError
    from ..registry.cache import cached_signature
    from ..signing import load_trust
    from .locked_signature import enforced, locked_envelope

    out = {}
    trust = load_trust()
    for entry in lock.plugins:
        envelope = None
        if enforced(entry):
            # the envelope the lock names (verify_signatures found it, and the cache keeps it)
            from ..registry.cache import cached_envelopes

            envelope = locked_envelope(entry, cached_envelopes(entry.owner, entry.name, entry.version, entry.tree_digest), trust)
        if envelope is None:
            envelope = cached_signature(entry.owner, entry.name, entry.version, entry.tree_digest)
        if envelope is None and entry.signed:
            try:
                envelope = registry.signature(served_version(entry, registry, lock.registry))
            except (RegistryError, LockError):
                envelope = None
        if envelope is not None:
            try:
                out[entry.name] = envelope.decode("utf-8")
            except UnicodeDecodeError:  # not an envelope: carried as nothing, so a node that checks refuses it
                continue
    return out


def with_signatures(spec: JobSpec, envelopes: dict) -> JobSpec:
    """*spec* with ``envelopes[name]`` as the ``signature`` of each named package entry."""
    if not envelopes:
        return spec
    return spec.replace(plugins=tuple(p.replace(signature=envelopes[p.name]) if p.name in envelopes else p
                                      for p in spec.plugins))


SIGNATURE_UNCHECKED = (
    "and its owner's signature must be checked (a trusted key, --require-signatures, or a lock that "
    "recorded it verified), but the cache holds no verified signature for it"
)


def _served_for_signature(entry, registry, locked_from: str | None):
    """``(registry, record)`` to ask for *entry*'s envelopes; :class:`RegistryError` when there is none to ask."""
    from ..errors import RegistryError

    if registry is None:
        raise RegistryError("no registry was given")
    return registry, served_version(entry, registry, locked_from, SIGNATURE_UNCHECKED)


def served_version(entry, registry, locked_from: str | None = None, consequence: str = "and the cache does not hold its files"):
    """The registry's record of the locked version, which must carry the locked tree digest."""
    from ..errors import NotFoundError
    from .lock import moved_tag_error, registry_hint

    try:
        served = registry.get(entry.owner, entry.name, entry.version)
    except NotFoundError as exc:
        raise NotFoundError(
            f"the lock pins {entry.ref}, which registry {registry.url} does not have, {consequence}",
            hint=f"{registry_hint(registry, locked_from)}; registry said: {exc.message}",
        ) from None
    if served.tree_digest != entry.tree_digest:
        raise moved_tag_error(entry, served.tree_digest, registry, locked_from)
    return served


def materialize_locked(entry, target: Path, registry, locked_from: str | None = None) -> Path:
    """Unpack the files *entry* (a lock entry) pins into the new directory *target*.

    The identity is the tree digest, not the archive: the cache is asked first for any
    archive holding exactly those files; otherwise *registry* (the one in use, perhaps a
    mirror of the one the lock was made with, *locked_from*) is asked for
    ``owner/name@version``. When it serves the locked tree digest, its archive is fetched
    whatever its own digest, and the unpacked files are verified against the tree digest.
    When it serves another tree digest, that is a moved tag (:class:`LockError` naming both).
    """
    from ..registry.cache import materialize, materialize_cached

    if materialize_cached(entry.owner, entry.name, entry.version, entry.tree_digest, target,
                          artifact_digest=entry.artifact_digest, files=entry.plugin.files) is not None:
        return target
    return materialize(registry, served_version(entry, registry, locked_from), target)


def copy_recipe(src: Path, dest: Path, builtins=()) -> None:
    """Copy the experiment *src* to *dest*, leaving out debris; built-ins get exactly their packable files."""
    src, dest = Path(src), Path(dest)
    builtin_roots = {b.root.resolve(): b for b in builtins}

    def walk(here: Path, there: Path, top: bool) -> None:
        os.mkdir(there, dir_mode(PRIVATE))
        for entry in sorted(os.scandir(here), key=lambda e: e.name):
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if entry.name in SKIP_DIRS or entry.name.endswith(".egg-info") or (top and entry.name in SKIP_TOP_DIRS):
                    continue
                b = builtin_roots.get(path.resolve())
                if b is not None:
                    copy_checked(path, there / entry.name, b.files, b.tree_digest, f"built-in {b.name}")
                else:
                    walk(path, there / entry.name, False)
            elif entry.name in SKIP_FILES or entry.name.endswith(SKIP_SUFFIXES):
                continue
            elif entry.is_symlink():
                os.symlink(os.readlink(path), there / entry.name)
            elif entry.is_file(follow_symlinks=False):
                shutil.copy2(path, there / entry.name)

    walk(src, dest, True)


def resolve_job_in(directory: str | os.PathLike, sets=(), backend: str | None = None, dev: dict | None = None) -> ResolvedJob:
    """Read forge.yaml in *directory* and resolve its job (what ``forge submit`` starts with)."""
    from .config import load_experiment

    return resolve_job(load_experiment(Path(directory)), sets, backend=backend, dev=dev)
