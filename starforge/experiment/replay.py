"""``forge jobs replay ID``: a new job that runs what job ID ran (SPEC §16).

What ID ran is read from its staged directory as this machine sees it (the laptop's
staged copy) and proved against its records before anything is staged:

- the **recipe**: ``recipe/`` as staged, whose tree digest must be the ``recipe.digest``
  its JobSpec recorded at staging (never today's working tree);
- the **runtime**: its ``.forge-runtime/starforge-runtime.zip``, whose sha256 must be the
  ``runtime_sha256`` its job record holds;
- the **plugins**: the same versions by tree digest, from the cache (any archive with
  exactly those files) or any configured registry that serves that version with that
  digest (``--registry``, the experiment's ``registry:``, ``FORGE_REGISTRY``, the
  default), each unpacked and verified;
- everything else from its JobSpec: hyperparams, entrypoint, Python, built-ins, the
  carried signatures.

Today's trust policy applies (``PluginStore.judge_pins``: a key revoked since then is
refused). A plugin, the recipe or the runtime that no longer matches
is a :class:`ReplayError` naming which. The new JobSpec says ``replay: {of, environment,
strict}``: the launcher compares the environment fingerprint ID recorded with its own, warns
on a difference and, with ``strict``, refuses (exit 11). The new job's record says
``replay_of``.

A job staged by an older starforge-core recorded no recipe digest, no runtime sha256 and
no environment fingerprint, so what cannot be proved is said, not refused (``--strict``
refuses, naming each): the recipe runs as staged; the runtime is this starforge-core's
(an unrecorded zip is never run: it cannot be proved, and a zip from before the binding
refuses the ``--spec-sha256`` every backend passes today); the new JobSpec records what
was not proved (``replay.unproven``), the recipe's digest and its own core version, so the
replay itself can be replayed exactly.

Laptop side.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..cluster.jobdir_layout import PLUGINS_DIR, PROVENANCE_DIR, RECIPE_DIR, SPEC_FILE
from ..cluster.jobspec import JobSpec
from ..errors import ForgeError, NotFoundError, VerificationError

if TYPE_CHECKING:
    from ..jobs.staged import StagedJob


class ReplayError(ForgeError):
    """What a replay would run no longer matches what the job ran (exit 10, as a failed verification)."""

    exit_code = VerificationError.exit_code


@dataclass(frozen=True)
class Replay:
    old: Any  # JobRecord of the replayed job
    spec: JobSpec  # the new job's JobSpec
    job_dir: Path | None  # None for a dry run
    record: Any  # JobRecord of the new job (None for a dry run)
    backend: Any
    notes: tuple = ()
    warnings: tuple = ()  # a yanked version run again (with its reason)


def _refuse(old_id: str, what: str, hint: str) -> ReplayError:
    return ReplayError(f"cannot replay job {old_id}: {what}", hint=hint)


def _old_job(job_id: str, store):
    """The record and staged directory of *job_id* (exit 7 for an unknown id, as ``jobs show``)."""
    from ..jobs.store import JobStore

    record = (store or JobStore()).get(job_id)
    job_dir = Path(record.dir)
    if not job_dir.is_dir():
        raise NotFoundError(
            f"cannot replay job {record.id}: its directory {record.dir} is gone; replay runs the recipe and runtime "
            "as they were staged there",
            hint="a job can be replayed while its staged directory exists; submit the experiment again instead (forge submit)",
        )
    return record, job_dir


def _old_spec(record, job_dir: Path) -> JobSpec:
    """The replayed job's JobSpec, read only once its sha256 is the one its record holds.

    The JobSpec names the recipe digest, the plugins, the entrypoint and the hyperparams that
    replay proves the rest against: trusting an edited one would prove nothing (SPEC §16).
    """
    from ..cluster.binding import sha256_file
    from ..cluster.errors import SpecError
    from ..cluster.jobspec import read_spec

    path = job_dir / SPEC_FILE
    if record.spec_sha256:
        try:
            got = sha256_file(str(path))
        except OSError as exc:
            got = f"unreadable ({exc.strerror or exc})"
        if got != record.spec_sha256:
            raise _refuse(record.id, f"its JobSpec {path} changed since the job was submitted: sha256 {got}, recorded "
                          f"{record.spec_sha256}", "the staged job directory was changed; replay runs only what the job ran")
    try:
        return read_spec(path)
    except SpecError as exc:
        raise _refuse(record.id, f"its JobSpec cannot be read: {exc}", "the staged job directory was changed") from None


def check_spec_recorded(record) -> str:
    """"" when the job record holds its JobSpec's sha256, else why the JobSpec cannot be proved."""
    if record.spec_sha256:
        return ""
    return (f"job {record.id} was submitted by an older starforge-core that recorded no JobSpec sha256: its "
            f"{SPEC_FILE} cannot be proved to be the one it ran")


def check_recipe(record, job_dir: Path, spec: JobSpec) -> str:
    """The staged ``recipe/`` still has the tree digest its JobSpec recorded.

    Returns "" when proved, else why it cannot be (a JobSpec of an older starforge-core
    records no digest); raises when it differs.
    """
    from ..cluster.digest import tree_digest

    if not spec.recipe_digest:
        return (f"job {record.id} was staged by an older starforge-core that recorded no recipe digest: the recipe as staged "
                f"in {job_dir / RECIPE_DIR} runs, but cannot be proved to be the one it ran")
    try:
        got = tree_digest(job_dir / RECIPE_DIR)
    except (OSError, VerificationError) as exc:
        got = f"unreadable ({exc})"
    if got != spec.recipe_digest:
        raise _refuse(record.id, f"the recipe as staged in {job_dir / RECIPE_DIR} changed since the job ran: tree digest {got}, "
                      f"recorded {spec.recipe_digest}",
                      "the staged copy was edited; replay runs only what the job ran (forge submit runs today's tree)")
    return ""


def check_runtime(record, job_dir: Path) -> str:
    """The staged runtime zip still has the sha256 the job record holds.

    Returns "" when proved, else why it cannot be (a record of an older starforge-core
    holds no sha256: this starforge-core's runtime runs instead); raises when it differs.
    """
    from .. import __version__
    from ..cluster.digest import hash_file
    from ..cluster.environment import runtime_paths

    path = Path(runtime_paths(str(job_dir))["zip"])
    if not record.runtime_sha256:
        return (f"job {record.id} was submitted by an older starforge-core that recorded no runtime sha256: its runtime "
                f"zip cannot be proved to be the one it ran, so the replay runs this starforge-core's runtime ({__version__})")
    try:
        got = hash_file(path)
    except OSError as exc:
        got = f"unreadable ({exc.strerror or exc})"
    if got != record.runtime_sha256:
        raise _refuse(record.id, f"its runtime zip {path} changed since the job was submitted: sha256 {got}, recorded "
                      f"{record.runtime_sha256}", "the staged runtime was replaced; replay runs only the runtime the job ran")
    return ""


def lock_entries(spec: JobSpec) -> list:
    """The JobSpec's packages as lock entries (fetched by tree digest; the archive digest is unknown)."""
    from .lockfile import LockEntry

    return [LockEntry(plugin=p, request=f"{p.owner}/{p.name}@=={p.version}", artifact_digest="sha256:" + "0" * 64)
            for p in spec.plugins]


def candidate_registries(record, explicit: str | None, insecure: bool, ca_file: str | None = None) -> list:
    """Every configured registry, first the one named: ``--registry``, the experiment's, ``FORGE_REGISTRY``/config/default."""
    from ..registry.factory import open_registry

    urls: list = [explicit] if explicit else []
    exp_dir = Path(record.experiment) if record.experiment else None
    if exp_dir is not None and (exp_dir / "forge.yaml").is_file():
        try:
            from .config import load_experiment
            from .lock import open_experiment_registry

            urls.append(open_experiment_registry(load_experiment(exp_dir), None, insecure=insecure, ca_file=ca_file).url)
        except ForgeError:
            pass
    urls.append(None)  # FORGE_REGISTRY, the user config, the embedded registry
    out, seen = [], set()
    for url in urls:
        try:
            reg = open_registry(url, insecure=insecure, ca_file=ca_file)
        except ForgeError:
            if url == explicit and explicit:
                raise
            continue
        if reg.url not in seen:
            seen.add(reg.url)
            out.append(reg)
    return out


def fetch_plugin(old_id: str, entry, target: Path, registries: list):
    """Unpack *entry*'s files (by tree digest) into *target*: the cache, else the first registry serving them
    (:func:`starforge.registry.store.unpack_from_any`); the registry that served them (None: the cache)."""
    from ..registry.store import Pin, unpack_from_any

    found, detail = unpack_from_any(Pin.of(entry.plugin), target, registries)
    if found:
        return detail
    reasons = detail
    raise _refuse(
        old_id, f"plugin {entry.ref} with tree digest {entry.tree_digest} (what the job ran) is neither in the cache nor served "
        f"by any configured registry" + (f"; {reasons[-1]}" if reasons else ""),
        "pass --registry URL of a registry holding that version as published; a version whose content changed is not "
        "the one the job ran",
    )


def copy_staged_plugin(old_id: str, entry, source: Path, target: Path) -> None:
    """Copy a plugin the old job staged (a dev plugin, published nowhere) and check its tree digest."""
    from ..cluster.digest import tree_digest
    from ..jobs.staged import copy_tree

    try:
        copy_tree(source, target)
        got = tree_digest(target)
    except (OSError, VerificationError) as exc:
        got = f"unreadable ({exc})"
    if got != entry.tree_digest:
        raise _refuse(old_id, f"its dev plugin {entry.ref} as staged in {source} changed since the job ran: tree digest "
                      f"{got}, recorded {entry.tree_digest}", "a dev plugin is replayed from its staged copy only")


def stage_replay(record, old_dir: Path, spec: JobSpec, job_dir: Path, registries: list, *,
                 require_signatures: bool = False) -> StagedJob:
    """Stage the replay *spec* at *job_dir*: plugins by digest, the staged recipe, the same runtime zip.

    Staged and bound as ``forge submit`` stages (:func:`starforge.jobs.staged.stage`);
    only the sources differ.
    """
    from ..cluster.environment import runtime_paths
    from ..jobs.staged import OldRuntime, copy_tree, stage
    from ..registry.store import Pin, PluginStore
    from .dev_plugins import is_dev
    from .lockfile import LockFile

    entries = lock_entries(spec)
    published = [e for e in entries if not is_dev(e.plugin)]
    if require_signatures and len(published) < len(entries):
        from ..errors import SignatureError

        dev = next(e for e in entries if is_dev(e.plugin))
        raise SignatureError(f"cannot replay job {record.id} with --require-signatures: it ran the dev plugin {dev.ref} "
                             "(an unpublished directory, unsigned)", hint="replay without --require-signatures")

    def fill_plugins(plugins_dir: Path) -> None:
        served = None
        for entry in entries:
            if is_dev(entry.plugin):  # never published: the old job's staged copy, by its digest
                copy_staged_plugin(record.id, entry, old_dir / PLUGINS_DIR / entry.name, plugins_dir / entry.name)
                continue
            served = fetch_plugin(record.id, entry, plugins_dir / entry.name, registries) or served
        # today's trust policy, against the registry that served the files (else the first configured)
        PluginStore(served or (registries[0] if registries else None)).judge_pins(
            [Pin.of(e.plugin) for e in published], require=require_signatures)

    def fill_recipe(dest: Path) -> None:
        copy_tree(old_dir / RECIPE_DIR, dest)

    from .yanked import REPLAY, check_yanked

    # reproducing a buggy run is what replay is for: a yanked version runs, and the record says so
    ran_yanked = check_yanked(LockFile(plugins=tuple(published)), PluginStore(registries[0] if registries else None), allow=True,
                              allowed_by=REPLAY)
    runtime = None
    if record.runtime_sha256:  # else no runtime was recorded: this starforge-core's, built as staging does
        runtime = OldRuntime(Path(runtime_paths(str(old_dir))["zip"]), record.runtime_sha256)
    staged = stage(spec, job_dir, plugins=fill_plugins, recipe=fill_recipe, runtime=runtime)
    return dataclasses.replace(staged, ran_yanked=ran_yanked) if ran_yanked else staged


def replay_spec(old: JobSpec, old_id: str, backend: str, settings: dict, environment: dict | None, strict: bool,
                unproven: tuple = (), recipe_digest: str | None = None) -> JobSpec:
    """The new job's JobSpec: *old* with a new id and creation time, *backend*, and ``replay``.

    *unproven* names what could not be proved to be what *old* ran (``recipe``,
    ``runtime``, for a job of an older starforge-core): it goes into ``replay.unproven``;
    an unproved recipe is recorded by *recipe_digest* (its staged copy's), an unproved
    runtime is this starforge-core's, and the JobSpec says so in ``core_version``.
    """
    from .. import __version__
    from ..cluster.utctime import TIMESTAMP
    from .stage import new_job_id

    now = datetime.now(timezone.utc)
    replay: dict = {"of": old_id, "environment": environment, "strict": strict}
    if unproven:
        replay["unproven"] = list(unproven)
    changes: dict = {
        "id": new_job_id(old.name, now),
        "created": now.strftime(TIMESTAMP),
        "backend": backend,
        "extra": dict(old.extra) if backend == old.backend else ({backend: settings} if settings else {}),
        "replay": replay,
    }
    if "recipe" in unproven:
        changes["recipe_digest"] = recipe_digest
    if "runtime" in unproven:
        changes["core_version"] = __version__
    return old.replace(**changes)


def recorded_environment(job_dir: Path) -> dict | None:
    """The environment fingerprint the replayed job's launcher recorded, or None (none here)."""
    from ..cluster.provenance import summarize

    if not (job_dir / PROVENANCE_DIR).is_dir():
        return None
    launcher = summarize(str(job_dir)).get("launcher") or {}
    return launcher.get("environment")


def replay_job(
    job_id: str,
    *,
    backend: str | None = None,
    registry: str | None = None,
    insecure: bool = False,
    ca_file: str | None = None,
    dry_run: bool = False,
    strict: bool = False,
    detach: bool = False,
    require_signatures: bool = False,
    store=None,
) -> Replay:
    """Check, stage and (unless *dry_run*) submit the replay of *job_id*."""
    from ..backends.base import get_backend, ran_on
    from ..jobs.staged import remove_tree

    record, old_dir = _old_job(job_id, store)
    old_spec = _old_spec(record, old_dir)
    notes = []
    unproven: list = []  # what a job of an older starforge-core did not record
    for what, why in (("jobspec", check_spec_recorded(record)), ("recipe", check_recipe(record, old_dir, old_spec)),
                      ("runtime", check_runtime(record, old_dir))):
        if why:
            unproven.append(what)
            notes.append(why)
    environment = recorded_environment(old_dir)
    if environment is None:
        later = ran_on(record.backend).records_later
        message = f"job {record.id} recorded no environment fingerprint on this machine" + (f" ({later})" if later else "")
        notes.append(message + "; the environment is not compared")
    if strict and (unproven or environment is None):
        missing = unproven + ([] if environment is not None else ["environment"])
        raise _refuse(record.id, f"--strict: what it ran cannot be proved or compared: {', '.join(missing)} ("
                      + "; ".join(notes) + ")",
                      "replay without --strict: it says what it cannot prove, and the new job records it")
    recipe_digest = None
    if "recipe" in unproven:
        from ..cluster.digest import tree_digest

        try:
            recipe_digest = tree_digest(old_dir / RECIPE_DIR)
        except (OSError, VerificationError) as exc:
            raise _refuse(record.id, f"its staged recipe {old_dir / RECIPE_DIR} cannot be read: {exc}",
                          "the staged job directory was changed") from None
    backend = backend or record.backend
    settings: dict = {}
    exp_dir = Path(record.experiment) if record.experiment else None
    if backend != old_spec.backend and exp_dir is not None and (exp_dir / "forge.yaml").is_file():
        from .config import load_experiment

        settings = load_experiment(exp_dir).backend_settings(backend)
    spec = replay_spec(old_spec, record.id, backend, settings, environment, strict, tuple(unproven), recipe_digest)
    registries = candidate_registries(record, registry, insecure, ca_file)
    if dry_run:
        scratch = Path(tempfile.mkdtemp(prefix="forge-replay-"))
        try:
            staged = stage_replay(record, old_dir, spec, scratch / spec.id, registries, require_signatures=require_signatures)
        finally:
            remove_tree(scratch)
        return Replay(old=record, spec=staged.spec, job_dir=None, record=None, backend=None, notes=tuple(notes),
                      warnings=_yank_warnings(staged))
    runner = get_backend(backend, settings or dict(spec.extra.get(backend) or {}), store)
    root = exp_dir if exp_dir is not None and exp_dir.is_dir() else old_dir.parent.parent.parent
    job_dir = runner.staging_dir(root, spec.id)
    runner.prepare(spec.id, job_dir)
    try:
        staged = stage_replay(record, old_dir, spec, job_dir, registries, require_signatures=require_signatures)
    except BaseException:
        runner.discard(spec.id)
        raise
    spec = staged.spec
    try:
        new_record = runner.submit(staged, detach=detach)
    except BaseException:
        if not runner.store.path(spec.id).exists():
            remove_tree(job_dir)
        raise
    return Replay(old=record, spec=spec, job_dir=job_dir, record=new_record, backend=runner, notes=tuple(notes),
                  warnings=_yank_warnings(staged))


def _yank_warnings(staged) -> tuple:
    from .yanked import replay_warning

    return tuple(replay_warning(ran) for ran in staged.ran_yanked)
