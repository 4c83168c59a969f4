"""The small interface every backend implements, and the record of one submitted job.

A backend receives a job that :func:`starforge.jobs.staged.stage` has built (a
:class:`~starforge.jobs.staged.StagedJob`: the directory with ``jobspec.json``,
``forge_plugins/``, ``recipe/``, ``work/``, SPEC §8, the JobSpec and the binding) and runs
``forge-launch --spec jobspec.json`` on it somewhere::

    backend = get_backend("local", settings={})
    job_dir = backend.staging_dir(experiment_dir, spec.id)   # where stage() should build
    staged = stage(spec, job_dir, plugins=..., recipe=...)    # built, bound
    record = backend.submit(staged, detach=False)             # started; record saved
    record = wait(backend, record, sys.stdout.write)          # follow logs until it ends
    backend.refresh(record).status                            # 'succeeded', 'failed', ...

Contract for implementations:

- ``submit`` starts the job and returns quickly with a :class:`JobRecord` whose status is
  ``pending`` or ``running``; it saves the record in the jobs store
  (:class:`starforge.jobs.store.JobStore`) before returning. ``detach`` says whether
  the caller will go on to follow the job; a backend may ignore it.
- ``refresh`` asks the backend for the current state, saves and returns the updated
  record (final records are returned unchanged).
- ``logs(record, follow=False)`` yields the job's output as text chunks; with ``follow``
  it keeps yielding until the job has ended and all output has been yielded.
- ``cancel`` stops the job (for the local backend: SIGTERM to its process group), records
  status ``cancelled`` and returns the record; cancelling a finished job is a no-op.
- ``backend_ref`` is the backend's own handle as JSON data (local: pids; ray: address and
  submission id; slurm: job id), opaque to everything else.
- Failures a user can act on raise :class:`starforge.errors.BackendError`.

Statuses (:mod:`starforge.jobs.jobrecord`): ``pending``, ``running`` (live);
``succeeded``, ``failed``, ``cancelled``, ``lost`` (final).

Laptop side.
"""

from __future__ import annotations

import abc
import importlib
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from ..cluster import jobdir_layout
from ..cluster.utctime import utc_now
from ..errors import BackendError, ManifestError, UsageError
from ..jobs.jobrecord import FINAL, LIVE, STATUSES, JobRecord  # noqa: F401  (re-exported for backends)
from ..jobs.store import JobStore
from . import BACKENDS

if TYPE_CHECKING:
    from ..jobs.staged import StagedJob


class Backend(abc.ABC):
    """One place jobs run. Subclasses set ``name`` and implement the four methods.

    A backend owns its ``forge.yaml`` section (the top-level mapping named after it, when
    its :data:`~starforge.backends.BACKENDS` entry says it has one): ``settings_keys`` are
    the keys it may hold, :meth:`check_settings` fills in defaults and refuses bad values.
    """

    name: str = ""
    settings_keys: tuple[str, ...] = ()  # the keys of forge.yaml's `<name>:` mapping

    def __init__(self, settings: Mapping[str, Any] | None = None, store: "JobStore | None" = None) -> None:
        self.settings = self.check_settings(settings or {})
        self.store = store if store is not None else JobStore()

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> dict:
        """forge.yaml's ``<name>:`` mapping checked, with the backend's defaults filled in.

        Runs when the backend is opened, before anything is staged; a bad key or value is
        a :class:`ManifestError` naming it (``forge.yaml: unknown key 'ray.adress' …``).
        The default refuses keys not in ``settings_keys``.
        """
        refuse_unknown_settings(cls.name, settings, cls.settings_keys)
        return dict(settings)

    @classmethod
    def cpu_only_settings(cls, settings: Mapping[str, Any]) -> dict:
        """*settings* for a short CPU-only job (``forge plan --backend``'s load phase): no GPU
        request, one node, the entrypoint once. The default has nothing to drop."""
        return dict(settings)

    def _save_new_record(self, staged: StagedJob, created: str | None = None, **fields: Any) -> JobRecord:
        """Save and return the first record of *staged*: ``pending``, created at *created*
        (default: now), with its binding and the other :class:`JobRecord` *fields* given."""
        spec = staged.spec
        fields.setdefault("runtime_sha256", staged.binding.runtime_sha256)
        fields.setdefault("spec_sha256", staged.binding.spec_sha256)
        experiment = staged.layout.experiment
        fields.setdefault("experiment", str(experiment) if experiment is not None else "")
        from ..jobs.jobindex import pins_of_spec

        fields.setdefault("plugins", pins_of_spec(spec))
        fields.setdefault("params", dict(spec.hyperparams))
        if staged.ran_yanked and "ran_yanked" not in fields:
            fields["ran_yanked"] = [dict(y) for y in staged.ran_yanked]
        replay = getattr(spec, "replay", None)
        if replay and "replay_of" not in fields:
            fields["replay_of"] = str(replay.get("of") or "")
        record = JobRecord(
            id=spec.id,
            name=spec.name,
            backend=self.name,
            status="pending",
            dir=str(staged.dir),
            created=created or utc_now(),
            **fields,
        )
        self.store.save(record)
        return record

    # Whether the job's Python is resolved on this machine (local) or on a node of the cluster.
    resolves_python_here = False
    # What `forge jobs show` and `forge jobs replay` say of a job this backend ran, asked of
    # the backend rather than of its name. Where the job's relative writes land when not in
    # the staged job's work/ (None: there, and they are counted):
    outputs_elsewhere: str | None = None
    # Why this machine may hold no provenance records of the job (None: it reads them as they are written):
    records_later: str | None = None
    # Whether each node ran a node-local copy of the job, whose removal `forge jobs show` reports:
    node_local_copies = False

    def check_job_python(self, python: str | None) -> str | None:
        """Check the declared job's Python (``python:``) before anything is staged; return a
        note for the user, or None. Where it is resolved on a node, ``$VAR`` and paths are
        the node's: say so rather than guess from this machine."""
        if not python:
            return None
        if not self.resolves_python_here:
            if "$" in python:
                return f"python: {python} is resolved on the node, from the job's environment there"
            return None
        expanded = os.path.expandvars(python)
        if "$" in expanded:
            unset = sorted(set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", expanded)))
            raise UsageError(
                f"python: {python}: {', '.join(unset)} {'is' if len(unset) == 1 else 'are'} not set",
                hint=f"export {unset[0]}=/path/to/bin/python (the trainer's interpreter), or write the path in forge.yaml",
            )
        return None  # a path that does not exist is the launcher's to report (exit 11), as on a node

    def staging_dir(self, experiment_dir: Path, job_id: str) -> Path:
        """Where the job directory for *job_id* is built; default ``<experiment>/.forge/jobs/<id>``."""
        return Path(experiment_dir) / ".forge" / "jobs" / job_id

    def prepare(self, job_id: str, job_dir: Path) -> None:
        """Called before the job *job_id* is staged at *job_dir*, for a backend that can get
        ready meanwhile (the local one starts its supervisor, which also cleans up after a
        submit killed before it recorded the job); :meth:`submit` follows, or :meth:`discard`
        when staging failed. The default does nothing."""

    def discard(self, job_id: str) -> None:
        """Undo :meth:`prepare` for a job that will not be submitted. The default does nothing."""

    @abc.abstractmethod
    def submit(self, staged: StagedJob, *, detach: bool) -> JobRecord:
        """Start *staged* (hand its binding to the job over this backend's channel); save and return its record."""

    @abc.abstractmethod
    def refresh(self, record: JobRecord) -> JobRecord:
        """The record with the backend's current status and exit code (saved)."""

    @abc.abstractmethod
    def logs(self, record: JobRecord, follow: bool = False) -> Iterator[str]:
        """The job's output as text chunks; with *follow*, until the job has ended."""

    @abc.abstractmethod
    def cancel(self, record: JobRecord) -> JobRecord:
        """Stop the job and record it as cancelled (a finished job is returned unchanged)."""


def get_backend(name: str, settings: Mapping[str, Any] | None = None, store=None) -> Backend:
    """The backend called *name* (``local``, ``ray``, ``slurm``) with its settings from forge.yaml."""
    return backend_class(name)(settings, store)


def backend_class(name: str) -> type[Backend]:
    """The class :data:`~starforge.backends.BACKENDS` registers as *name*, imported now."""
    entry = BACKENDS.get(name)
    if entry is None:
        from ..package_format.manifest import closest

        guess = closest(name, BACKENDS)
        raise UsageError(
            f"unknown backend '{name}'" + (f" (did you mean '{guess}'?)" if guess else ""),
            hint=f"backends: {', '.join(BACKENDS)}",
        )
    module_name, cls_name = entry.target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise BackendError(f"the '{name}' backend is not available in this build") from None
    return getattr(module, cls_name)


def ran_on(name: str) -> type[Backend]:
    """The class of the backend a job record names: :func:`backend_class`, or the
    :class:`Backend` defaults for a backend no longer registered here (its records stay readable)."""
    return backend_class(name) if name in BACKENDS else Backend


def refuse_unknown_settings(backend: str, settings: Mapping[str, Any], known: tuple) -> None:
    """Refuse the first key of forge.yaml's ``<backend>:`` mapping not in *known*, naming the closest."""
    from ..package_format.manifest import closest

    for key in settings:
        if key not in known:
            guess = closest(str(key), known)
            raise ManifestError(
                f"forge.yaml: unknown key '{backend}.{key}'" + (f" (did you mean '{backend}.{guess}'?)" if guess else ""),
                hint=f"{backend} settings: {', '.join(known)}",
            )


def wait(backend: Backend, record: JobRecord, write: Callable[[str], Any], poll: float = 0.5) -> JobRecord:
    """Follow *record*'s logs through *write* until the job ends; Ctrl-C cancels it.

    Returns the final record. On KeyboardInterrupt the job is cancelled (and the record
    says so) before the interrupt is re-raised.
    """
    try:
        for chunk in backend.logs(record, follow=True):
            write(chunk)
        record = backend.refresh(record)
        while not record.final:
            time.sleep(poll)
            record = backend.refresh(record)
        return record
    except KeyboardInterrupt:
        _cancel_uninterrupted(backend, record)
        raise


def _cancel_uninterrupted(backend: Backend, record: JobRecord) -> JobRecord:
    """Cancel with SIGINT ignored, so an impatient second Ctrl-C cannot leave the job running."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return backend.cancel(record)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return backend.cancel(record)
    finally:
        signal.signal(signal.SIGINT, previous)


def follow_file(path: Path, backend: Backend, record: JobRecord, follow: bool, poll: float = 0.5,
                pause: Callable[[float], Any] = time.sleep) -> Iterator[str]:
    """A job's output file as text chunks; with *follow*, until *backend* reports the job ended.

    Bytes are decoded incrementally, so a character split across two reads is not mangled;
    once the job is final, whatever was written before that is still read. Between reads
    it waits with *pause(poll)*: a backend that can tell when its job ends sooner (the local
    one waits on its supervising process) returns from it at once then.
    """
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    offset = 0
    while True:
        chunk = _read_from(path, offset)
        if chunk:
            offset += len(chunk)
            yield decoder.decode(chunk)
            continue
        if not follow:
            break
        record = backend.refresh(record)
        if record.final:
            tail = decoder.decode(_read_from(path, offset), final=True)
            if tail:
                yield tail
            break
        pause(poll)


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(1 << 16)
    except FileNotFoundError:
        return b""


# How every backend starts a job on its node (SPEC §14): any ``python3`` runs the job's
# runtime zip, whose entry resolves the job's Python there and re-executes the launcher
# under it. The paths are relative to the job directory.
NODE_ENTRY = (f"{jobdir_layout.RUNTIME_DIR}/{jobdir_layout.RUNTIME_ZIP}", "--spec", jobdir_layout.SPEC_FILE)


def node_entry(python: str, job_dir: str | os.PathLike = "", spec_sha256: str = "") -> list[str]:
    """``[python, <job>/.forge-runtime/starforge-runtime.zip, --spec, <job>/jobspec.json]``.

    *python* is the backend's default interpreter (the entry only starts under it);
    with an empty *job_dir* the paths stay relative, for a backend that runs in the job
    directory (Ray's working_dir). *spec_sha256*, the JobSpec's binding (SPEC §9), is
    passed as ``--spec-sha256``.
    """
    zip_path, flag, spec = NODE_ENTRY
    if job_dir:
        zip_path, spec = os.path.join(job_dir, zip_path), os.path.join(job_dir, spec)
    return [python, zip_path, flag, spec, *(["--spec-sha256", spec_sha256] if spec_sha256 else [])]


def exit_status(returncode: int) -> int:
    """A subprocess return code as a shell reports it (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode
