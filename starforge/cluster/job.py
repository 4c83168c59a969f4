"""One job as this process sees it: verify, check, import and install its plugins.

For every plugin of a job, in load order: verify the tree against the JobSpec digest (the
launcher: one read of every byte; any other process: the listing, then each file's hash as
it is read), check ``requires``, import the entrypoint from the verified snapshot,
then call ``install(params)`` (eager) or register it (deferred). The launcher runs all of
it up front (:meth:`Job.load_all`); any other Python process of the job runs it from the
bootstrap (:meth:`Job.boot`, through :mod:`.process_job`), postponing a plugin that declares
``targets`` until one of its targets is imported.

Failures are :class:`~.errors.LaunchFailure` (phase, exit code, plugin). Standard library
only.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
import time

from .. import __version__
from . import hyperparams_and_deferred
from .attempts import attempt_number
from .digest import HashedFiles, check_bound, check_listing, verify_tree
from .errors import InstallError, LaunchFailure, PluginImportError, SpecError, VerificationError
from .exits import die, run_or_exit
from .import_hooks import TargetWatcher
from .jobdir_layout import BUILTINS_DIR, PLUGINS_DIR, RECIPE_DIR
from .jobspec import JobSpec
from .load_order import Item, ordered_items
from .provenance import LOG_ENV, new_record, patch_records, scheduler_ids, write_record
from .utctime import utc_millis

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from collections.abc import Mapping



class Job:
    """One job as seen by this process: the spec, its plugins in load order, what happened to each."""

    def __init__(self, job_dir: str, spec_path: str, spec: JobSpec, role: str) -> None:
        self.job_dir = job_dir
        self.spec_path = spec_path
        self.spec = spec
        self.role = role  # launcher | worker
        self.items = ordered_items(spec, job_dir)
        self.finders: list = []
        self.failure: LaunchFailure | None = None
        self.disabled = False
        self.started = time.time()
        self.argv = list(sys.argv)
        self.lock = threading.RLock()
        self.watcher: TargetWatcher | None = None
        self.attempt = attempt_number(os.environ)
        self.mode = "launch" if role == "launcher" else "bootstrap"  # or verify-only, other-interpreter
        self.params = hyperparams_and_deferred.set_hyperparams(spec.hyperparams)
        self._recipe_names: dict[str, str] | None = None  # the recipe's own top-level names, listed once
        self.environment: dict | None = None  # the launcher's fingerprint (cluster/fingerprint.py)
        self.environments: dict[str, tuple] = {}  # name -> (ctx keys, time) of each environment loaded here

    # -- the four phases for one plugin ----------------------------------------------------

    def verify_all(self) -> None:
        """Verify every plugin still to be loaded, then check every one's ``requires``.

        Runs before any plugin is imported or installed, so a tampered or unsatisfiable
        plugin stops the job before another plugin's code has run. In the launcher, with
        ``FORGE_TRUST`` set, the carried signatures are checked too (:mod:`.signatures`).

        The launcher reads every file of every tree once and digests those bytes
        (:func:`.digest.verify_tree`); the verified bytes are kept (``item.contents``) and
        the import later reads them, never the disk. Every other process checks the
        tree's listing and that the JobSpec's per-file hashes digest to its tree digest,
        then hashes each file when it is first imported or read (:meth:`_check_files`),
        so its start does not grow with the size of the plugin. Idempotent.
        """
        with self.lock:
            todo = [i for i in self.items if i.status in ("planned", "pending") and i.contents is None]
            # The launcher verifies the environment plugins it ships too (a tampered one
            # stops the job before training starts); their requirements are checked where
            # load_environment runs, which may be another interpreter (a reward actor).
            shipped = [i for i in self.items if self.role == "launcher" and self._unverified_environment(i)]
            # A launcher that the bootstrap had already started as a worker checks the
            # whole trees it only listed then: the launcher verifies every byte once.
            relisted = [i for i in self.items if self.role == "launcher" and i.check == "files" and i not in todo]
            if not todo and not relisted and not shipped:
                return
            try:
                for item in relisted + todo + shipped:
                    t0 = time.perf_counter()
                    try:
                        contents = self._verified_contents(item)
                    finally:
                        item.seconds = (item.seconds or 0.0) + time.perf_counter() - t0
                    item.verified = True
                    if item in todo or item in shipped:
                        item.contents = contents
                    if item.check == "tree":
                        self._check_names(item, contents)
                if self.role == "launcher" and (os.environ.get("FORGE_TRUST") or os.environ.get("FORGE_REQUIRE_SIGNATURES")):
                    from .signatures import check_items  # brings cryptography

                    check_items(todo + shipped)
                from .requires import check_requires  # packaging only where a plugin declares requires

                for item in todo:
                    t0 = time.perf_counter()
                    try:
                        check_requires(item.entry)
                    finally:
                        item.seconds = (item.seconds or 0.0) + time.perf_counter() - t0
            except LaunchFailure as failure:
                for item in relisted + todo + shipped:
                    if item.ref == failure.plugin:
                        item.status = "failed"
                self.failure = failure
                raise

    def _check_names(self, item: Item, contents: Mapping[str, bytes]) -> None:
        """The launcher: refuse a plugin whose top-level names would shadow the standard
        library, the training stack, StarForge's own names or the recipe's own packages.

        ``forge plugin check`` and ``forge lock`` refuse these too, but a hand-made
        registry record or bundle never went through them. The names are the declared
        ones and those the verified files provide (:func:`.shadowing.top_level_names`).
        """
        from .recipe_imports import recipe_names
        from .shadowing import shadowing, top_level_names

        if self._recipe_names is None:  # listed once, by the recipe's finder where it is installed
            self._recipe_names = recipe_names(os.path.join(self.job_dir, RECIPE_DIR))
        names = set(item.entry.top_level) | set(top_level_names(list(contents)))
        refusal = shadowing(item.ref, names, self._recipe_names)
        if refusal is not None:
            raise LaunchFailure(SpecError, item.ref, refusal)

    def _verified_contents(self, item: Item) -> Mapping[str, bytes]:
        """*item*'s files as this process verifies them (see :meth:`verify_all`): the launcher
        digests the whole tree; any other process checks the listing and hashes each file as it
        is read. A mismatch is a :class:`~.errors.LaunchFailure` of the verify phase."""
        try:
            if self.role != "launcher" and item.entry.files:
                return self._check_files(item)
            item.check = "tree"
            return verify_tree(item.root, item.entry.tree_digest, item.entry.files or None)
        except VerificationError as exc:
            raise LaunchFailure(VerificationError, item.ref, self._verify_message(item, str(exc))) from None

    def _step(self, item: Item) -> _Step:
        """``with self._step(item):`` one step of loading *item*, timed into ``item.seconds``; a
        :class:`~.errors.LaunchFailure` raised in it marks *item* failed and is the job's failure."""
        return _Step(self, item)

    @staticmethod
    def _unverified_environment(item: Item) -> bool:
        return item.entry.kind == "environment" and item.status == "skipped" and not item.verified

    def _check_files(self, item: Item) -> HashedFiles:
        """A process other than the launcher: listing and bound map now, each file's hash on use.

        A file that does not match when it is read ends this process with the
        verification exit code, whatever code was importing or reading it.
        """
        entry = item.entry
        check_bound(entry.tree_digest, entry.files)
        check_listing(item.root, entry.files)

        def mismatch(message: str) -> None:
            item.status = "failed"
            die(self, LaunchFailure(VerificationError, item.ref, self._verify_message(item, message)))

        contents = HashedFiles(item.root, entry.files, on_mismatch=mismatch)
        item.check = "files"
        item.hashed = contents.hashed
        return contents

    @staticmethod
    def _verify_message(item: Item, detail: str) -> str:
        where = "/".join((RECIPE_DIR, *BUILTINS_DIR)) if item.builtin else PLUGINS_DIR
        return f"{item.ref}: verification failed in {where}/{item.entry.name}: {detail}"

    def activate(self, item: Item, trigger: str) -> None:
        """Import and install/register *item* (idempotent), every plugin verified first."""
        with self.lock:
            if item.status not in ("planned", "pending"):
                return
            self.verify_all()
            with self._step(item):
                item.trigger = trigger
                entry = item.entry
                contents, item.contents = item.contents, None
                assert contents is not None  # verify_all kept the verified bytes
                func = self._import(item, contents)
                if entry.load == "eager":
                    from . import patching  # not before a plugin installs: a waiting worker needs none of it

                    try:
                        with patching.acting_for(item.ref):
                            func(self.params)
                    except Exception as exc:
                        raise LaunchFailure(
                            InstallError, item.ref,
                            f"{item.ref}: install raised {type(exc).__name__}: {exc}",
                            _plugin_traceback(exc, item),
                        ) from None
                    item.status = "loaded"
                else:
                    hyperparams_and_deferred.register(entry.name, item.ref, func)
                    item.status = "registered"

    def _import(self, item: Item, contents: Mapping[str, bytes]):
        from .loader import SnapshotFinder

        entry = item.entry
        module_name, _, func_name = entry.entrypoint.partition(":")
        finder = SnapshotFinder(item.root, contents, entry.top_level, label=item.ref)
        if module_name not in finder.modules:
            raise LaunchFailure(PluginImportError, item.ref, f"{item.ref}: entrypoint module '{module_name}' is not in the plugin tree")
        sys.meta_path.insert(0, finder)
        self.finders.append(finder)
        try:
            module = importlib.import_module(module_name)
        except VerificationError as exc:  # a file read during the import did not match
            raise LaunchFailure(VerificationError, item.ref, self._verify_message(item, str(exc))) from None
        except (Exception, SystemExit) as exc:
            raise LaunchFailure(
                PluginImportError, item.ref,
                f"{item.ref}: importing '{module_name}' raised {type(exc).__name__}: {exc}",
                _plugin_traceback(exc, item),
            ) from None
        func = getattr(module, func_name, None)
        if not callable(func):
            raise LaunchFailure(PluginImportError, item.ref, f"{item.ref}: '{module_name}' has no callable '{func_name}'")
        return func

    # -- environment plugins (SPEC §17) ------------------------------------------------------

    def environment_names(self) -> list:
        """Manifest names of the job's environment plugins, in load order."""
        return [i.entry.name for i in self.items if i.entry.kind == "environment" and i.status != "shadowed"]

    def environment_item(self, name: str) -> Item | None:
        for item in self.items:
            if item.entry.kind == "environment" and item.entry.name == name and item.status != "shadowed":
                return item
        return None

    def load_environment(self, item: Item, ctx: Mapping) -> object:
        """Verify, check, import *item* (an environment plugin) and call its entrypoint.

        Verification as in any process of the job: the bytes the launcher read and
        digested, or here the listing and each file's hash as it is read. Returns what
        ``entrypoint(params, **ctx)`` returned. Failures before the call are
        :class:`~.errors.LaunchFailure` (the caller ends the process with the phase's
        code); an exception of the entrypoint is raised as
        :class:`~.errors.InstallError` naming the plugin.
        """
        with self.lock:
            with self._step(item):
                item.trigger = "load_environment"
                contents = item.contents
                if contents is None:
                    contents = self._verified_contents(item)
                item.verified = True
                from .requires import check_requires

                check_requires(item.entry)
                item.contents = None
                func = self._import(item, contents)
            from . import patching

            try:
                with patching.acting_for(item.ref):
                    value = func(self.params, **ctx)
            except Exception as exc:
                item.status = "failed"
                err = InstallError(f"{item.ref}: environment entrypoint raised {type(exc).__name__}: {exc}")
                err.plugin = item.ref  # type: ignore[attr-defined]
                self.failure = LaunchFailure(InstallError, item.ref, err.message, _plugin_traceback(exc, item))
                raise err from exc
            item.status = "loaded"
            self.environments[item.entry.name] = (sorted(ctx), time.time())
            return value

    # -- whole-job entry points ---------------------------------------------------------------

    def verify_all_reporting(self, on_item=None) -> None:
        """:meth:`verify_all`; when it fails, *on_item(item)* for each plugin that failed, then the raise."""
        try:
            self.verify_all()
        except LaunchFailure:
            if on_item:
                for item in self.items:
                    if item.status == "failed":
                        on_item(item)
            raise

    def load_all(self, on_item=None) -> None:
        """The launcher: every plugin now, in load order; *on_item(item)* after each one.

        Every plugin is verified and requirement-checked before the first is imported.
        """
        self.verify_all_reporting(on_item)
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

    def boot(self, trigger: str, other_interpreter: bool = False) -> None:
        """A worker: plugins without targets now, the others at the first target import.

        *other_interpreter*: this process is not the job's Python (a system ``python3``
        tool inheriting the job's environment): it is left alone — plugins without
        targets are not loaded here, and the others only if it imports one of their
        targets.
        """
        waiting: list[Item] = []
        due: list[Item] = []
        if other_interpreter:
            self.mode = "other-interpreter"
        for item in self.items:
            if item.status != "planned":
                continue
            targets = item.entry.targets
            if other_interpreter and not targets:
                item.status = "left-alone"
                continue
            if targets and not any(t in sys.modules for t in targets):
                item.status = "pending"
                waiting.append(item)
            else:
                due.append(item)
        for item in due:  # the first activation verifies every plugin, waiting ones too
            self.activate(item, trigger)
        if waiting:
            self.watcher = TargetWatcher(waiting, self._targets_imported)
            sys.meta_path.insert(0, self.watcher)
        hyperparams_and_deferred.registry.activate = self.activate_by_name
        hyperparams_and_deferred.registry.listing = self.deferred_names
        hyperparams_and_deferred.registry.installed = self.write_provenance

    def _targets_imported(self, due: list[Item], module_name: str) -> None:
        """Activate the plugins waiting for *module_name*, now imported; a failure ends the process."""
        for item in due:
            run_or_exit(self, functools.partial(self.activate, item, f"target:{module_name}"))
        self.write_provenance()

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
        installed = {d["name"] for d in hyperparams_and_deferred.deferred_status() if d["installed"]}
        return [i for i in self.items if i.status == "registered" and i.entry.name not in installed]

    # -- provenance -------------------------------------------------------------------------

    def record(self) -> dict:
        installs = {d["name"]: d for d in hyperparams_and_deferred.deferred_status()}
        plugins = []
        for item in self.items:
            rec = item.to_record()
            d = installs.get(item.entry.name)
            if d and item.status == "registered":
                rec["installed_later"] = bool(d["installed"])
                if d["installed"]:
                    rec["installed_at"] = utc_millis(d["installed_at"])
                    rec["ctx_keys"] = d["ctx_keys"]
            loaded = self.environments.get(item.entry.name) if item.entry.kind == "environment" else None
            if loaded is not None and item.status == "loaded":
                rec["ctx_keys"], at = loaded
                rec["loaded_at"] = utc_millis(at)
            plugins.append(rec)
        return new_record(
            job_id=self.spec.id,
            role=self.role,
            mode=self.mode,
            host=os.uname().nodename,
            pid=os.getpid(),
            attempt=self.attempt,
            argv=self.argv,
            python="%d.%d.%d" % sys.version_info[:3],
            executable=sys.executable,
            core_version=__version__,
            started=utc_millis(self.started),
            written=utc_millis(time.time()),
            disabled=self.disabled,
            plugins=plugins,
            patches=patch_records(),
            failure=self.failure.to_dict() if self.failure else None,
            scheduler=scheduler_ids(),
            environment=self.environment,
            replay_of=(self.spec.replay or {}).get("of"),
        )

    def write_provenance(self) -> str | None:
        record = self.record()
        if os.environ.get(LOG_ENV) == "1":  # no shared file system: the record travels in the log too
            from .provenance_log import emit

            emit(record)
        try:
            return write_record(self.job_dir, record)
        except OSError as exc:
            sys.stderr.write(f"forge: cannot write provenance record: {exc}\n")
            return None


class _Step:
    """What :meth:`Job._step` returns (a class, not contextlib: a worker's start imports no more)."""

    def __init__(self, job: Job, item: Item) -> None:
        self.job, self.item = job, item

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, kind, exc, tb) -> None:
        if isinstance(exc, LaunchFailure):
            self.item.status = "failed"
            self.job.failure = exc
        self.item.seconds = (self.item.seconds or 0.0) + time.perf_counter() - self.t0


def _plugin_traceback(exc: BaseException, item: Item) -> str:
    from .tracebacks import plugin_traceback  # only on a failure: not on a job's start path

    return plugin_traceback(exc, item)
