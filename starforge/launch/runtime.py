"""The per-process plugin runtime shared by the launcher and the bootstrap.

For every plugin of a job, in load order: verify the tree against the JobSpec digest (one
read of the bytes), check ``requires``, import the entrypoint from the verified snapshot,
then call ``install(params)`` (eager) or register it (deferred). The launcher runs all of
it up front (:meth:`Job.load_all`); any other Python process of the job runs it from the
bootstrap (:func:`boot_process`), postponing a plugin that declares ``targets`` until one
of its targets is imported.

Failures are :class:`LaunchFailure` (phase, exit code, plugin). In a worker process they
are never swallowed: the reason goes to stderr and the provenance record, and the process
ends with ``os._exit(code)``.

Cluster side: standard library, plus ``packaging`` for ``requires``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import stat
import sys
import threading
import time

from .. import plugins as _plugins
from ..atomic import write_file as atomic_write  # re-exported: loader, environment, __main__
from ..digest import verify_tree
from ..errors import ForgeError, SpecError, VerificationError
from ..jobspec import JobSpec, PluginEntry, format_json, read_spec

PHASES = ("spec", "verify", "requires", "import", "install", "entrypoint")
RUNTIME_DIR = ".forge-runtime"
PROVENANCE_DIR = "provenance"


class LaunchFailure(Exception):
    """A plugin (or the spec) stopped the job: phase, exit code, plugin ref, message."""

    def __init__(self, phase: str, code: int, plugin: str | None, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.phase = phase
        self.code = code
        self.plugin = plugin
        self.message = message
        self.detail = detail  # a traceback, when one explains the failure

    def to_dict(self) -> dict:
        return {"phase": self.phase, "code": self.code, "plugin": self.plugin, "message": self.message}


class Item:
    """One plugin of the job as this process sees it (a plain class: cheap to define)."""

    __slots__ = ("entry", "builtin", "root", "status", "shadowed_by", "verified", "trigger", "seconds", "contents")

    def __init__(self, entry: PluginEntry, builtin: bool, root: str) -> None:
        self.entry = entry
        self.builtin = builtin
        self.root = root
        self.status = "planned"  # planned|pending|loaded|registered|skipped|shadowed|disabled|failed|verified
        self.shadowed_by: str | None = None
        self.verified = False
        self.trigger: str | None = None  # launcher | start-up | target:<module> | install_deferred | ray-setup-hook
        self.seconds: float | None = None
        self.contents: dict | None = None  # the verified snapshot, until it is imported

    @property
    def ref(self) -> str:
        return self.entry.ref

    def to_record(self) -> dict:
        e = self.entry
        rec = {
            "ref": e.ref,
            "name": e.name,
            "version": e.version,
            "digest": e.digest,
            "source": "builtin" if self.builtin else "package",
            "kind": e.kind,
            "load": e.load,
            "targets": list(e.targets),
            "status": self.status,
            "verified": self.verified,
            "trigger": self.trigger,
        }
        if self.shadowed_by:
            rec["shadowed_by"] = self.shadowed_by
        if self.seconds is not None:
            rec["seconds"] = round(self.seconds, 6)
        return rec


def plan(spec: JobSpec, job_dir: str) -> list[Item]:
    """Load order: packages, then built-ins; a built-in named like a package is shadowed.

    Refuses (exit 2) data-prep plugins and two loaded plugins sharing a top-level name.
    """
    items: list[Item] = []
    packages = {p.name: p for p in spec.plugins}
    for e in spec.plugins:
        items.append(Item(e, False, os.path.join(job_dir, "forge_plugins", e.name)))
    for e in spec.recipe_plugins:
        item = Item(e, True, os.path.join(job_dir, "recipe", "common", "algorithms", e.name))
        if e.name in packages:
            item.status = "shadowed"
            item.shadowed_by = packages[e.name].ref
        items.append(item)
    owners: dict[str, str] = {}
    for item in items:
        if item.entry.kind == "data-prep":
            raise LaunchFailure(
                "spec", 2, item.ref, f"{item.ref} is a data-prep plugin; data-prep plugins never leave the laptop"
            )
        if item.entry.kind == "environment" and item.status == "planned":
            item.status = "skipped"
        if item.status != "planned":
            continue
        for top in item.entry.top_level:
            if top in owners:
                raise LaunchFailure(
                    "spec", 2, item.ref, f"{item.ref} and {owners[top]} both provide the top-level module '{top}'"
                )
            owners[top] = item.ref
    return items


def check_requires(entry: PluginEntry) -> None:
    """Raise LaunchFailure(requires, 11) when core, python or packages are not satisfied here.

    Every verdict comes from ``packaging``. A ``core``/``python`` requirement that this same
    ``packaging`` installation found satisfied before, for the same specifier and version,
    is remembered in the private per-user cache (see :func:`_remembered`), so a job whose
    plugins declare only those does not import ``packaging`` again (several milliseconds in
    every process). Unmet or invalid requirements are never remembered: they are always
    evaluated, and reported, by ``packaging``.
    """
    req = entry.requires or {}
    if not req:
        return
    from .. import __version__

    core = req.get("core")
    python = req.get("python")
    have_py = "%d.%d.%d" % sys.version_info[:3]
    packages = req.get("packages") or {}
    pairs = [(spec, have) for spec, have in ((core, __version__), (python, have_py)) if spec]
    if not packages and _remembered(pairs):
        return

    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    def unmet(what: str, spec: str, have: str | None) -> LaunchFailure:
        found = f"found {have}" if have else "not installed"
        return LaunchFailure("requires", 11, entry.ref, f"{entry.ref} requires {what} {spec}, {found}")

    def satisfied(spec: str, have: str, what: str) -> bool:
        try:
            return SpecifierSet(spec).contains(Version(have), prereleases=True)
        except InvalidSpecifier:
            raise LaunchFailure("requires", 11, entry.ref, f"{entry.ref}: invalid specifier for {what}: {spec!r}") from None

    if core and not satisfied(core, __version__, "starforge-core"):
        raise unmet("starforge-core", core, __version__)
    if python and not satisfied(python, have_py, "python"):
        raise unmet("python", python, have_py)
    if packages:
        import importlib.metadata as md

        for dist, spec in packages.items():
            try:
                have = md.version(dist)
            except md.PackageNotFoundError:
                raise unmet(dist, spec or "(any version)", None) from None
            if spec and not satisfied(spec, have, dist):
                raise unmet(dist, spec, have)
    _remember(pairs)


# -- remembered requirement verdicts -------------------------------------------------------
#
# One empty file per (packaging installation, specifier, version) that packaging found
# satisfied, under <cache>/requires/. The installation is identified by the path, size and
# modification time of each of its modules, so upgrading or editing packaging starts afresh.
# FORGE_REQUIRES_CACHE=0 turns this off (every check imports packaging).

_verdict_dir: str | None | bool = False  # False: not looked up yet; None: off
_packaging_id: bytes | None | bool = False


def _verdict_path(spec: str, have: str) -> str | None:
    global _verdict_dir, _packaging_id
    if _verdict_dir is False:
        _verdict_dir = None
        if os.environ.get("FORGE_REQUIRES_CACHE", "1") not in ("0", "false", "no", "off"):
            _verdict_dir = private_cache_dir("requires")
    if _verdict_dir is None:
        return None
    if _packaging_id is False:
        _packaging_id = _packaging_identity()
    if _packaging_id is None:
        return None
    from ..digest import sha256_for

    key = b"\0".join((b"forge-requires/1 prereleases", _packaging_id, spec.encode("utf-8", "surrogateescape"),
                      have.encode("utf-8", "surrogateescape")))
    return os.path.join(_verdict_dir, sha256_for(len(key))(key).hexdigest())


def _packaging_identity() -> bytes | None:
    """Where the ``packaging`` this process would import lives, and the stat of each module."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("packaging")
        locations = list(spec.submodule_search_locations or ()) if spec else []
        if not locations:
            return None
        parts = [os.path.abspath(locations[0])]
        with os.scandir(locations[0]) as entries:
            for e in entries:
                if e.name.endswith(".py"):
                    st = e.stat()
                    parts.append(f"{e.name}\0{st.st_size}\0{st.st_mtime_ns}")
    except (ImportError, ValueError, OSError):
        return None  # e.g. the copy inside the job's runtime zip: no file stats, no memo
    parts[1:] = sorted(parts[1:])
    return "\n".join(parts).encode("utf-8", "surrogateescape")


def _remembered(pairs: list) -> bool:
    """True when packaging found every ``(specifier, version)`` of *pairs* satisfied before."""
    if not pairs or "packaging.specifiers" in sys.modules:  # imported already: just check
        return False
    for spec, have in pairs:
        path = _verdict_path(spec, have)
        if path is None or not os.path.isfile(path):
            return False
    return True


def _remember(pairs: list) -> None:
    for spec, have in pairs:
        path = _verdict_path(spec, have)
        if path is None:
            return
        if not os.path.isfile(path):
            try:
                atomic_write(path, b"", 0o600)
            except OSError:
                return


@contextlib.contextmanager
def _acting_for(ref: str):
    from .. import patching

    with patching.acting_for(ref):
        yield


def _patch_records() -> list:
    patching = sys.modules.get("starforge.patching")
    if patching is None or not hasattr(patching, "records"):
        return []
    try:
        return [r if isinstance(r, dict) else _as_dict(r) for r in patching.records()]
    except Exception as exc:  # provenance must still be written
        return [{"error": f"patching.records() raised {type(exc).__name__}: {exc}"}]


def _as_dict(record: Any) -> dict:
    if hasattr(record, "to_dict"):
        return record.to_dict()
    import dataclasses

    if dataclasses.is_dataclass(record):
        import json

        return json.loads(json.dumps(dataclasses.asdict(record), default=str))
    return {"record": str(record)}


class Job:
    """One job as seen by this process: the spec, the plan, what happened to each plugin."""

    def __init__(self, job_dir: str, spec_path: str, spec: JobSpec, role: str) -> None:
        self.job_dir = job_dir
        self.spec_path = spec_path
        self.spec = spec
        self.role = role  # launcher | worker
        self.items = plan(spec, job_dir)
        self.finders: list = []
        self.failure: LaunchFailure | None = None
        self.disabled = False
        self.started = time.time()
        self.argv = list(sys.argv)
        self.lock = threading.RLock()
        self.watcher = None
        self.attempt = attempt_number(os.environ)
        self.mode = "launch" if role == "launcher" else "bootstrap"  # or verify-only
        self.params = _plugins._set_hyperparams(spec.hyperparams)

    # -- the four phases for one plugin ----------------------------------------------------

    def verify_all(self) -> None:
        """Verify every plugin still to be loaded, then check every one's ``requires``.

        Runs before any plugin is imported or installed, so a tampered or unsatisfiable
        plugin stops the job before another plugin's code has run. In the launcher, with
        ``FORGE_TRUST`` set, the carried signatures are checked too (:mod:`.signatures`). The verified bytes are
        kept (``item.contents``): the import later reads them, never the disk. Idempotent.
        """
        with self.lock:
            todo = [i for i in self.items if i.status in ("planned", "pending") and i.contents is None]
            if not todo:
                return
            try:
                for item in todo:
                    t0 = time.perf_counter()
                    entry = item.entry
                    try:
                        contents = verify_tree(item.root, entry.digest, entry.files or None)
                    except VerificationError as exc:
                        where = "recipe/common/algorithms" if item.builtin else "forge_plugins"
                        raise LaunchFailure("verify", 10, item.ref, f"{item.ref}: verification failed in {where}/{entry.name}: {exc}") from None
                    finally:
                        item.seconds = (item.seconds or 0.0) + time.perf_counter() - t0
                    item.verified = True
                    item.contents = contents
                if self.role == "launcher" and (os.environ.get("FORGE_TRUST") or os.environ.get("FORGE_REQUIRE_SIGNATURES")):
                    from .signatures import check_items  # brings starforge.signing and cryptography

                    check_items(todo)
                for item in todo:
                    t0 = time.perf_counter()
                    try:
                        check_requires(item.entry)
                    finally:
                        item.seconds = (item.seconds or 0.0) + time.perf_counter() - t0
            except LaunchFailure as failure:
                for item in todo:
                    if item.ref == failure.plugin:
                        item.status = "failed"
                self.failure = failure
                raise

    def activate(self, item: Item, trigger: str) -> None:
        """Import and install/register *item* (idempotent), every plugin verified first."""
        with self.lock:
            if item.status not in ("planned", "pending"):
                return
            self.verify_all()
            t0 = time.perf_counter()
            item.trigger = trigger
            entry = item.entry
            try:
                contents, item.contents = item.contents, None
                func = self._import(item, contents)
                if entry.load == "eager":
                    try:
                        with _acting_for(item.ref):
                            func(self.params)
                    except Exception as exc:
                        raise LaunchFailure(
                            "install", 13, item.ref,
                            f"{item.ref}: install raised {type(exc).__name__}: {exc}",
                            _format_exc(exc),
                        ) from None
                    item.status = "loaded"
                else:
                    _plugins._register(entry.name, item.ref, func)
                    item.status = "registered"
            except LaunchFailure as failure:
                item.status = "failed"
                self.failure = failure
                raise
            finally:
                item.seconds = (item.seconds or 0.0) + time.perf_counter() - t0

    def _import(self, item: Item, contents: dict):
        from .loader import SnapshotFinder

        entry = item.entry
        module_name, _, func_name = entry.entrypoint.partition(":")
        finder = SnapshotFinder(item.root, contents, entry.top_level, label=item.ref)
        if module_name not in finder.modules:
            raise LaunchFailure("import", 12, item.ref, f"{item.ref}: entrypoint module '{module_name}' is not in the plugin tree")
        sys.meta_path.insert(0, finder)
        self.finders.append(finder)
        try:
            module = importlib.import_module(module_name)
        except (Exception, SystemExit) as exc:
            raise LaunchFailure(
                "import", 12, item.ref,
                f"{item.ref}: importing '{module_name}' raised {type(exc).__name__}: {exc}",
                _format_exc(exc),
            ) from None
        func = getattr(module, func_name, None)
        if not callable(func):
            raise LaunchFailure("import", 12, item.ref, f"{item.ref}: '{module_name}' has no callable '{func_name}'")
        return func

    # -- whole-job entry points ---------------------------------------------------------------

    def load_all(self, on_item=None) -> None:
        """The launcher: every plugin now, in load order; *on_item(item)* after each one.

        Every plugin is verified and requirement-checked before the first is imported.
        """
        try:
            self.verify_all()
        except LaunchFailure:
            if on_item:
                for item in self.items:
                    if item.status == "failed":
                        on_item(item)
            raise
        for item in self.items:
            if item.status in ("planned", "pending"):
                try:
                    self.activate(item, "launcher")
                except LaunchFailure:
                    if on_item:
                        on_item(item)
                    raise
            if on_item:
                on_item(item)

    def boot(self, trigger: str) -> None:
        """A worker: plugins without targets now, the others at the first target import."""
        waiting: list[Item] = []
        due: list[Item] = []
        for item in self.items:
            if item.status != "planned":
                continue
            targets = item.entry.targets
            if targets and not any(t in sys.modules for t in targets):
                item.status = "pending"
                waiting.append(item)
            else:
                due.append(item)
        for item in due:  # the first activation verifies every plugin, waiting ones too
            self.activate(item, trigger)
        if waiting:
            self.watcher = TargetWatcher(self, waiting)
            sys.meta_path.insert(0, self.watcher)
        _plugins._registry.activate = self.activate_by_name
        _plugins._registry.listing = self.deferred_names
        _plugins._registry.installed = self.write_provenance

    def deferred_names(self) -> list:
        """Deferred plugins registered or waiting for a target, in load order."""
        return [i.entry.name for i in self.items if i.entry.load == "deferred" and i.status in ("registered", "pending")]

    def activate_by_name(self, name: str) -> bool:
        """Used by ``install_deferred`` for a deferred plugin still waiting for its target."""
        for item in self.items:
            if item.entry.name == name and item.status == "pending":
                if self.watcher:
                    self.watcher.forget(item)
                run_or_exit(self, lambda: self.activate(item, "install_deferred"))
                self.write_provenance()
                return True
        return False

    def deferred_not_installed(self) -> list[Item]:
        installed = {d["name"] for d in _plugins._deferred_status() if d["installed"]}
        return [i for i in self.items if i.status == "registered" and i.entry.name not in installed]

    # -- provenance -------------------------------------------------------------------------

    def record(self) -> dict:
        deferred = {d["name"]: d for d in _plugins._deferred_status()}
        plugins = []
        for item in self.items:
            rec = item.to_record()
            d = deferred.get(item.entry.name)
            if d and item.status == "registered":
                rec["installed_later"] = bool(d["installed"])
                if d["installed"]:
                    rec["installed_at"] = _iso(d["installed_at"])
                    rec["ctx_keys"] = d["ctx_keys"]
            plugins.append(rec)
        return {
            "schema": "forge/provenance/v1",
            "job_id": self.spec.id,
            "role": self.role,
            "mode": self.mode,
            "host": _host(),
            "pid": os.getpid(),
            "attempt": self.attempt,
            "argv": self.argv,
            "python": "%d.%d.%d" % sys.version_info[:3],
            "core_version": _core_version(),
            "started": _iso(self.started),
            "written": _iso(time.time()),
            "disabled": self.disabled,
            "plugins": plugins,
            "patches": _patch_records(),
            "failure": self.failure.to_dict() if self.failure else None,
            "scheduler": scheduler_ids(),
        }

    def write_provenance(self) -> str | None:
        try:
            return write_record(self.job_dir, self.record())
        except OSError as exc:
            sys.stderr.write(f"forge: cannot write provenance record: {exc}\n")
            return None


def _spec_from_other_finders(hook, fullname, path, target):
    """The spec the other finders on ``sys.meta_path`` give for *fullname*; *hook* is not re-entered meanwhile."""
    hook.local.busy = True
    try:
        for finder in list(sys.meta_path):
            if finder is hook or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None
    finally:
        hook.local.busy = False


class _PostImportLoader:
    """Wraps a target module's loader to run a callback once the module has executed."""

    def __init__(self, loader, callback) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = self._loader
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._callback(module.__name__)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class TargetWatcher:
    """A meta-path finder that activates waiting plugins when one of their targets is imported."""

    def __init__(self, job: Job, items: list[Item]) -> None:
        self.job = job
        self.waiting = list(items)
        self.local = threading.local()

    def targets(self) -> set:
        return {t for item in self.waiting for t in item.entry.targets}

    def forget(self, item: Item) -> None:
        if item in self.waiting:
            self.waiting.remove(item)
        if not self.waiting and self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname, path=None, target=None):
        if getattr(self.local, "busy", False) or fullname not in self.targets():
            return None
        spec = _spec_from_other_finders(self, fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PostImportLoader(spec.loader, self.imported)
        return spec

    def imported(self, module_name: str) -> None:
        due = [item for item in self.waiting if module_name in item.entry.targets]
        for item in due:
            self.forget(item)
        for item in due:
            run_or_exit(self.job, lambda item=item: self.job.activate(item, f"target:{module_name}"))
        if due:
            self.job.write_provenance()


# -- process-wide state ----------------------------------------------------------------------

_job: Job | None = None
_boot_lock = threading.RLock()


def current_job() -> Job | None:
    return _job


def load_job(job_dir: str, spec_path: str, role: str) -> Job:
    """Read the spec and make *this process's* Job (replacing none: one job per process)."""
    global _job
    with _boot_lock:
        if _job is not None:
            return _job
        spec = read_spec(spec_path)
        _job = Job(os.path.abspath(job_dir), os.path.abspath(spec_path), spec, role)
        return _job


def run_or_exit(job: Job | None, action) -> None:
    """Run *action*; on failure say why, record it and end the process with the §9 code."""
    try:
        action()
    except LaunchFailure as failure:
        _die(job, failure)
    except ForgeError as exc:
        _die(job, LaunchFailure("spec", exc.exit_code, None, str(exc)))


def _die(job: Job | None, failure: LaunchFailure) -> None:
    try:
        if job is not None:
            job.failure = failure
        sys.stderr.write(f"forge: process {os.getpid()} stops the job: {failure.message}\n")
        if failure.detail:
            sys.stderr.write(failure.detail)
        sys.stderr.flush()
        if job is not None:
            job.write_provenance()
    finally:
        os._exit(failure.code)


def boot_process(reason: str = "start-up") -> Job | None:
    """Bootstrap this process from the job environment (``FORGE_JOBSPEC``); idempotent.

    Returns the Job, or None when the process is not part of a job. Never returns after a
    failure: the process ends with the exit code of the failed phase.
    """
    global _job
    with _boot_lock:
        if _job is not None:
            return _job
        spec_path = os.environ.get("FORGE_JOBSPEC")
        if not spec_path:
            return None
        job_dir = os.environ.get("FORGE_JOB_DIR") or os.path.dirname(os.path.abspath(spec_path))
        _absolute_job_env(os.environ)
        job: Job | None = None
        try:
            job = load_job(job_dir, spec_path, "worker")
        except LaunchFailure as failure:
            _die(None, failure)
        except SpecError as exc:
            _die(None, LaunchFailure("spec", 2, None, f"{spec_path}: {exc}"))
        assert job is not None
        _plugins._registry.booted = True
        if os.environ.get("FORGE_DISABLE") == "1":
            job.disabled = True
            _plugins._registry.disabled = True
            for item in job.items:
                if item.status == "planned":
                    item.status = "disabled"
        else:
            run_or_exit(job, lambda: job.boot(reason))
            watch_ray_init()
        # Written now (a worker may be killed, skipping atexit) and again at exit.
        job.write_provenance()
        import atexit

        atexit.register(job.write_provenance)
        return job


def _absolute_job_env(env) -> None:
    """Make relative job paths (Ray's working_dir form) absolute for this process's children.

    They were relative to the working directory this process started in; a child started
    from another directory must still find the job.
    """
    for key in ("FORGE_JOBSPEC", "FORGE_JOB_DIR", "FORGE_HYPERPARAMS", "FORGE_RUNTIME"):
        value = env.get(key)
        if value and not os.path.isabs(value):
            env[key] = os.path.abspath(value)
    job_dir = env.get("FORGE_JOB_DIR")
    if job_dir and env.get("PYTHONPATH"):
        parts = env["PYTHONPATH"].split(os.pathsep)
        fixed = [
            os.path.abspath(p) if p and not os.path.isabs(p) and os.path.abspath(p).startswith(job_dir + os.sep) else p
            for p in parts
        ]
        if fixed != parts:
            env["PYTHONPATH"] = os.pathsep.join(fixed)


def attempt_number(env) -> int:
    """The attempt: ``FORGE_ATTEMPT``, else ``SLURM_RESTART_COUNT``, else 0."""
    for key in ("FORGE_ATTEMPT", "SLURM_RESTART_COUNT"):
        value = env.get(key, "")
        if value.isdigit():
            return int(value)
    return 0


def _format_exc(exc: BaseException) -> str:
    import traceback

    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _host() -> str:
    return os.uname().nodename


def _core_version() -> str:
    from .. import __version__

    return __version__


def _iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + ".%03dZ" % int((ts % 1) * 1000)


# -- provenance records (read and summarized by :mod:`starforge.launch.provenance`) ----------

_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _safe(text: str) -> str:
    """*text* with each run of characters outside ``[A-Za-z0-9._-]`` replaced by one ``_``."""
    if _SAFE.issuperset(text):
        return text
    out = []
    for ch in text:
        if ch in _SAFE:
            out.append(ch)
        elif not out or out[-1] != "\0":
            out.append("\0")
    return "".join(out).replace("\0", "_")


_SLURM_IDS = (
    ("SLURM_JOB_ID", "job_id"),
    ("SLURM_STEP_ID", "step_id"),
    ("SLURM_NODEID", "node_id"),
    ("SLURM_PROCID", "proc_id"),
    ("SLURM_LOCALID", "local_id"),
)


_ray_ids_seen: dict = {}


def scheduler_ids(environ=None) -> dict:
    """The scheduler's ids for this process, those that are known; ``{}`` outside one.

    ``{"slurm": {"job_id", "step_id", "node_id", "proc_id", "local_id"}, "ray": {"job_id",
    "worker_id"}}``. Slurm's come from its ``SLURM_*`` variables. Ray's come from Ray's
    runtime context when this process has already imported and initialised ``ray`` (it is
    never imported here), else the job id from ``RAY_JOB_ID`` (ignored when it is Ray's
    nil id, all ``f``, which pooled workers carry).
    """
    environ = os.environ if environ is None else environ
    out: dict = {}
    slurm = {key: environ[var] for var, key in _SLURM_IDS if environ.get(var)}
    if slurm:
        out["slurm"] = slurm
    ray_ids = dict(_ray_ids_seen)
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            if ray.is_initialized():
                context = ray.get_runtime_context()
                ray_ids["job_id"] = context.get_job_id()
                ray_ids["worker_id"] = context.get_worker_id()
                _ray_ids_seen.update(ray_ids)  # for the record written at exit, after Ray disconnected
        except Exception:  # a Ray shutting down: the ids are not essential
            pass
    # A pooled Ray worker may carry the nil job id (all f) in RAY_JOB_ID: not an id.
    job_id = environ.get("RAY_JOB_ID", "")
    if job_id and "job_id" not in ray_ids and job_id.strip("f"):
        ray_ids["job_id"] = job_id
    if ray_ids:
        out["ray"] = {k: str(v) for k, v in ray_ids.items() if v}
    return out


def record_path(job_dir: str, record: dict) -> str:
    host = _safe(str(record.get("host", "host")))[:64] or "host"
    return os.path.join(job_dir, PROVENANCE_DIR, f"a{int(record.get('attempt', 0))}-{host}-{int(record['pid'])}.json")


def write_record(job_dir: str, record: dict) -> str:
    """Write *record* atomically to its per-host/pid/attempt file; return the path."""
    path = record_path(job_dir, record)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, (format_json(record, default=str) + "\n").encode("utf-8"))
    return path


# -- Ray: chaining the entrypoint's own setup hook (see :mod:`starforge.launch.ray_hook`) -----

def watch_ray_init() -> None:
    """Wrap ``ray.init`` (now, or when ``ray`` is first imported) to chain setup hooks."""
    module = sys.modules.get("ray")
    if module is not None:
        _wrap_init(module)
        return
    if not any(isinstance(f, _RayWatcher) for f in sys.meta_path):
        sys.meta_path.insert(0, _RayWatcher())


def _wrap_init(ray) -> None:
    import functools

    original = getattr(ray, "init", None)
    if original is None or getattr(original, "_forge_chained", False):
        return

    @functools.wraps(original)
    def init(*args, **kwargs):
        from .ray_hook import chain_runtime_env

        kwargs["runtime_env"] = chain_runtime_env(kwargs.get("runtime_env"))
        return original(*args, **kwargs)

    init._forge_chained = True  # type: ignore[attr-defined]
    ray.init = init


class _RayWatcher:
    """A meta-path finder that wraps ``ray.init`` once ``ray`` has been imported."""

    def __init__(self) -> None:
        self.local = threading.local()

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "ray" or getattr(self.local, "busy", False):
            return None
        spec = _spec_from_other_finders(self, fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec.loader = _PostImportLoader(spec.loader, lambda name: _wrap_init(sys.modules[name]))
        return spec


# -- the private per-user caches ------------------------------------------------------------

def private_cache_dir(name: str) -> str | None:
    """``<cache>/<name>`` created private to this user, or None when it cannot be.

    ``<cache>`` is ``$FORGE_HOME/cache``, else ``$XDG_CACHE_HOME/starforge`` (default
    ``~/.cache/starforge``). A directory another user owns or can write is refused: what
    is cached there (compiled code, requirement verdicts) would be theirs to decide.
    """
    if os.environ.get("FORGE_HOME"):
        base = os.path.join(os.environ["FORGE_HOME"], "cache")
    else:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "starforge")
    path = os.path.join(base, name)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o077 or not stat.S_ISDIR(st.st_mode):
            return None
    except OSError:
        return None
    return path
