"""From a locked experiment to a JobSpec and a staged job directory (SPEC §8).

:func:`resolve_job` builds the :class:`~starforge.cluster.jobspec.JobSpec` (nothing is written):
the lock must be fresh against forge.yaml (a stale or missing lock is an error, never
re-resolved), the built-ins pass the static checks, and the hyperparameters are the
declared ``params`` defaults, then ``config:`` flattened, then the ``--set`` overrides.

:func:`stage_job` says where a submitted job's parts come from and hands them to
:func:`starforge.jobs.staged.stage`, the one owner of a staged job (its layout,
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
from ..cluster.digest import digest_of_map, file_map
from ..cluster.jobspec import JobSpec, PluginEntry
from ..cluster.readonly import make_read_only  # noqa: F401  (the staging tests use it from here)
from ..cluster.utctime import TIMESTAMP
from ..errors import VerificationError
from ..jobs.staged import StagedJob, copy_checked, stage
from ..registry.verified import read_tree
from ..state.directories import PRIVATE, dir_mode
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
        lineage=job_lineage(exp),
    )
    return ResolvedJob(spec=spec, experiment=exp, lock=lock, builtins=builtins, shadowed=shadowed, dev=dev_plugins)


def job_lineage(exp: Experiment) -> dict | None:
    """The JobSpec's ``lineage``: the declared output directories (SPEC §18), None without."""
    if not exp.outputs:
        return None
    out: dict = {"outputs": list(exp.outputs)}
    if exp.sample_above is not None:
        out["sample_above"] = exp.sample_above
    return out


def yanks_at_submit(lock: LockFile, ran_yanked: tuple) -> dict:
    """``{ref: {"yanked": bool, …}}`` for every locked package: the yanked ones the job runs
    knowingly (reason, as of when, allowed by what), every other one checked and not yanked."""
    out: dict = {entry.ref: {"yanked": False} for entry in lock.plugins}
    for y in ran_yanked:
        out[y["ref"]] = {"yanked": True, "reason": y.get("reason"), "as_of": y.get("as_of"),
                         "allowed_by": y.get("allowed_by")}
    return out


def stage_job(job: ResolvedJob, job_dir: str | os.PathLike, registry, *, require_signatures: bool = False,
              trust=None, allow_yanked: bool = False) -> StagedJob:
    """Stage *job* at *job_dir* (which must not exist): the locked plugins, the experiment's tree.

    The locked versions are asked of the :class:`~starforge.registry.store.PluginStore`:
    yanks and signatures are judged first (``PluginStore.judge_pins``), so a plugin the
    trust file refuses is never staged; each package's files come from it by tree digest,
    and the staged ``jobspec.json`` carries the signature envelope it hands out
    (``PluginStore.carried``), for the launcher's optional check against a node-side trust
    file (``FORGE_TRUST``).
    """
    if job.dev and require_signatures:
        from ..errors import SignatureError

        raise SignatureError(
            f"dev plugin {job.dev[0].entry.ref} (from {job.dev[0].root}) is unpublished and unsigned; "
            "--require-signatures runs signed plugins only",
            hint="publish and sign it (forge plugin publish --sign), lock, and submit without --dev",
        )
    published = job.published
    from ..registry.store import Pin, PluginStore
    from .yanked import check_yanked

    # a yanked version runs only when forge.yaml acknowledges it or with --allow-yanked; the record says so
    store = PluginStore(registry, trust=trust, locked_from=job.lock.registry)
    ran_yanked = check_yanked(published, store, allow=allow_yanked)
    pins = [Pin.of(entry) for entry in published.plugins]
    store.judge_pins(pins, require=require_signatures)  # a plugin the trust file refuses is never staged
    carried = {pin.name: store.carried(pin) for pin in pins}
    spec = with_signatures(job.spec, {name: envelope for name, envelope in carried.items() if envelope is not None})
    if spec.lineage is not None:  # the sidecars carry each pin's yank facts at submit
        spec = spec.replace(lineage={**spec.lineage, "yanks": yanks_at_submit(published, ran_yanked)})
    dev = {d.entry.name: d for d in job.dev}

    def fill_plugins(plugins_dir: Path) -> None:
        for entry in job.lock.plugins:
            target = plugins_dir / entry.name
            if entry.name in dev:
                from .dev_plugins import copy_dev_plugin

                copy_dev_plugin(dev[entry.name], target)
                continue
            store.unpack_pin(Pin.of(entry), target)
            files = file_map(target)
            got = digest_of_map(files)
            if got != entry.tree_digest:
                raise VerificationError(f"{entry.ref}: staged files have digest {got}, the lock says {entry.tree_digest}")
            # what the JobSpec says of the plugin is the lock entry: it must be what the staged tree says
            check_entry(entry, read_tree(target, files, entry.tree_digest, entry.ref), job.experiment.lock_path.name)

    staged = stage(spec, job_dir, plugins=fill_plugins,
                   recipe=lambda dest: copy_recipe(job.experiment.root, dest, job.builtins))
    return dataclasses.replace(staged, ran_yanked=ran_yanked) if ran_yanked else staged


def with_signatures(spec: JobSpec, envelopes: dict) -> JobSpec:
    """*spec* with ``envelopes[name]`` (bytes) as the ``signature`` of each named package entry;
    an envelope that is not UTF-8 text is carried as nothing, so a node that checks refuses it."""
    texts = {}
    for name, envelope in envelopes.items():
        try:
            texts[name] = envelope.decode("utf-8")
        except UnicodeDecodeError:
            continue
    if not texts:
        return spec
    return spec.replace(plugins=tuple(p.replace(signature=texts[p.name]) if p.name in texts else p
                                      for p in spec.plugins))


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
