"""``forge plan``: what a job will patch, known before it runs (SPEC §16).

:func:`plan_experiment` stages the locked experiment exactly as ``forge submit`` does
(:func:`~starforge.experiment.stage.resolve_job_in`, :func:`~starforge.experiment.stage.stage_job`:
the same checks, the same JobSpec), into a temporary directory that is removed
afterwards, and runs the launcher's load phase there (``forge-launch --plan``, see
:mod:`starforge.cluster.ledger`) through the job's node entry, so it runs under the job's
Python (SPEC §14), in a fresh child process whose environment has no credential
variables. Nothing else is written: no job record, no staged directory.

:func:`analyze` reads the ledger the launcher wrote and flags the **conflicts**:

- ``hidden``: a ``replace`` that hides an earlier plugin's wrap of the same target (that
  wrap never runs there, so its settings have no effect);
- ``double-replace``: two plugins replacing one target (the earlier replacement never runs);
- ``install-raised``: an import or ``install`` that raised, or a patch that failed when its
  target module was imported;
- ``not-applied``: a patch still waiting for a target module that cannot be imported here;
- ``untouched-target``: a target an installed plugin declares that none of its patches touched.

A replace the experiment means is acknowledged in ``forge.yaml`` (``plan.acknowledge``:
``[{plugin: dr-grpo, replaces: "toy_grpo.algorithms:*", reason: …}]``); an acknowledged
conflict is still listed, and does not make ``forge plan`` fail.

Laptop side.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..cluster.jobdir_layout import RECIPE_DIR
from ..errors import ForgeError

SCHEMA = "forge/plan/v1"
KINDS = ("hidden", "double-replace", "install-raised", "not-applied", "untouched-target")


@dataclass
class PlanOutcome:
    """One ``forge plan``: the JobSpec it staged, the launcher's ledger, what it means."""

    spec: object
    ledger: dict
    conflicts: list = field(default_factory=list)
    backend: str = "this machine"
    seconds: float = 0.0
    log: str = ""

    @property
    def clean(self) -> bool:
        return not any(not c["acknowledged"] for c in self.conflicts)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "job": {"name": getattr(self.spec, "name", None), "backend": self.backend},
            "python": self.ledger.get("python"),
            "plugins": plugin_rows(self.ledger),
            "imports": self.ledger.get("imports") or [],
            "conflicts": self.conflicts,
            "clean": self.clean,
        }


def _name_of(ref: str | None) -> str:
    """``dr-grpo`` for ``starforge/dr-grpo@2.0.0`` and for ``recipe:dr-grpo@2.0.0``."""
    if not ref:
        return ""
    base = ref.rsplit("@", 1)[0]
    return base.split(":", 1)[-1].split("/")[-1]


def how(record: dict) -> str:
    """wrap, replace, registry entry or created: how a patch changed its target."""
    if record.get("created"):
        return "created"
    if "[" in str(record.get("target", "")).partition(":")[2]:
        return "registry entry"
    return str(record.get("mode"))


def plugin_rows(ledger: dict) -> list:
    """Each plugin of the ledger, in load order, with the patches it made."""
    patches = ledger.get("patches") or []
    rows = []
    for p in ledger.get("plugins") or []:
        mine = [
            {
                "target": r.get("target"),
                "how": how(r),
                "mode": r.get("mode"),
                "status": r.get("status"),
                "function": r.get("function"),
                "layer": r.get("layer"),
                "hides": r.get("hides") or [],
                "error": r.get("error"),
            }
            for r in patches
            if r.get("plugin") == p.get("ref")
        ]
        rows.append({
            "ref": p.get("ref"),
            "name": p.get("name"),
            "source": p.get("source"),
            "kind": p.get("kind"),
            "load": p.get("load"),
            "status": p.get("status"),
            "targets": p.get("targets") or [],
            "shadowed_by": p.get("shadowed_by"),
            "error": p.get("error"),
            "patches": mine,
        })
    return rows


def acknowledged_by(ack: tuple, plugin_ref: str | None, target: str | None):
    """The ``plan.acknowledge`` entry of forge.yaml that covers *plugin_ref* replacing *target*, or None."""
    name = _name_of(plugin_ref)
    for entry in ack:
        if entry.get("plugin") == name and fnmatch.fnmatchcase(str(target), entry.get("replaces", "")):
            return entry
    return None


def analyze(ledger: dict, ack: tuple = ()) -> list:
    """The conflicts the ledger shows, in load order; each ``{kind, plugin, target, message,
    acknowledged, reason}``."""
    from ..cluster.patching import hiding_message

    conflicts: list = []

    def add(kind, plugin, target, message, entry=None):
        conflicts.append({
            "kind": kind, "plugin": plugin, "target": target, "message": message,
            "acknowledged": entry is not None, "reason": (entry or {}).get("reason"),
        })

    failed_imports = {i["module"]: i["error"] for i in ledger.get("imports") or [] if not i.get("ok")}
    patches = ledger.get("patches") or []
    for p in ledger.get("plugins") or []:
        ref = p.get("ref")
        err = p.get("error")
        if err:
            add("install-raised", ref, None, err.get("message") or f"{ref} failed in phase {err.get('phase')}")
        for r in (r for r in patches if r.get("plugin") == ref):
            target = r.get("target")
            if r.get("status") == "failed" and not err:
                add("install-raised", ref, target, f"{ref}'s {r.get('mode')} of {target} failed: {r.get('error')}")
            elif r.get("status") == "pending":
                module = str(target).split(":", 1)[0]
                why = failed_imports.get(module, "the module was not imported")
                add("not-applied", ref, target, f"{ref}'s {r.get('mode')} of {target} never applied: importing {module} failed: {why}")
            hides = r.get("hides") or []
            if hides and r.get("status") in ("applied", "pending"):
                entry = acknowledged_by(ack, ref, target)
                if any(h.get("mode") == "replace" for h in hides):
                    others = " and ".join(f"{h.get('plugin') or 'an unattributed patch'}" for h in hides if h.get("mode") == "replace")
                    add("double-replace", ref, target, f"{ref} and {others} both replace {target}; the earlier replacement never runs", entry)
                if any(h.get("mode") != "replace" for h in hides):
                    wraps = dict(r, hides=[h for h in hides if h.get("mode") != "replace"])
                    add("hidden", ref, target, hiding_message(wraps) or "", entry)
        if p.get("status") == "loaded" and p.get("load") == "eager":
            touched = {str(r.get("target")).split(":", 1)[0] for r in patches if r.get("plugin") == ref and r.get("status") != "failed"}
            for module in p.get("targets") or []:
                if module not in touched and not any(t.startswith(module + ".") for t in touched):
                    extra = f" (importing it failed: {failed_imports[module]})" if module in failed_imports else ""
                    add("untouched-target", ref, module,
                        f"{ref} declares target {module}, but none of its patches touched it{extra}")
    return conflicts


# -- running the load phase -------------------------------------------------------------------------


def launch_error(code: int, output: str, where: str) -> ForgeError:
    """The launcher's failure (exit *code*, its log *output*) as the laptop's one-line error."""
    from ..cluster.errors import PluginImportError, RequirementError, SpecError, VerificationError

    lines = [ln for ln in output.splitlines() if ln.startswith("error: ")]
    message = lines[-1][len("error: "):] if lines else f"the load phase ended with exit code {code}"
    by_code = {kind.exit_code: kind for kind in (SpecError, VerificationError, RequirementError, PluginImportError)}
    cls = by_code.get(code, ForgeError)
    err = cls(f"forge plan: {message}", hint=f"the load phase {where} stopped there (exit {code}); run with -v for its whole log")
    return err


def child_environment() -> dict:
    """This environment for the load phase: no credential variables (SPEC §9), and nothing
    that would tell the node entry which Python to use (it works that out from the JobSpec)."""
    from ..state.credentials import shield_credentials, without_credentials

    shield_credentials()  # plugin code must not read them from this process's /proc either
    env = without_credentials()
    for name in ("FORGE_PYTHON", "FORGE_PYTHON_FROM", "FORGE_JOBSPEC", "FORGE_JOB_DIR", "FORGE_LAUNCH_FROM_ZIP"):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def local_python(spec, job_dir: Path) -> str:
    """The job's Python as this machine resolves it; a clear error when it cannot."""
    from ..cluster.errors import RequirementError
    from ..cluster.interpreter import JobPythonError, check_job_python, resolve_job_python

    python, how_ = resolve_job_python(spec.python, list(spec.entrypoint), str(job_dir / RECIPE_DIR), sys.executable)
    try:
        check_job_python(python)
    except JobPythonError as exc:
        where = {"spec": "forge.yaml's python", "entrypoint": "the entrypoint's interpreter"}.get(how_, "the job's Python")
        raise RequirementError(
            f"forge plan: {where} cannot run on this machine: {exc}",
            hint="run the load phase where that Python exists, as a short CPU-only job: forge plan --backend ray|slurm",
        ) from None
    return python


def plan_experiment(
    directory: str | os.PathLike = ".",
    sets=(),
    *,
    registry: str | None = None,
    insecure: bool = False,
    ca_file: str | None = None,
    require_signatures: bool = False,
    backend: str | None = None,
    dev: dict | None = None,
    allow_yanked: bool = False,
) -> PlanOutcome:
    """Stage *directory*'s job into a temporary directory, run its load phase here, read the ledger."""
    from ..jobs.staged import remove_tree
    from .lock import open_experiment_registry
    from .stage import resolve_job_in, stage_job

    t0 = time.perf_counter()
    resolved = resolve_job_in(directory, sets, backend=backend, dev=dev)
    exp = resolved.experiment
    reg = open_experiment_registry(exp, registry, insecure=insecure, ca_file=ca_file)
    tmp = Path(tempfile.mkdtemp(prefix="forge-plan-"))
    try:
        job_dir = tmp / resolved.spec.id
        staged = stage_job(resolved, job_dir, reg, require_signatures=require_signatures, allow_yanked=allow_yanked)
        local_python(resolved.spec, job_dir)
        ledger_path = tmp / "ledger.json"
        from ..backends.base import node_entry
        from ..cluster.errors import VerificationError
        from ..jobs.binding import check_runtime
        from ..state.process_group import run_in_group

        # bound like a real launch (SPEC §9 "Binding"): the runtime zip checked here, outside
        # it, before it runs; the JobSpec's sha256 handed to the node entry and the launcher
        bound = staged.binding
        refused = check_runtime(job_dir, bound.runtime_sha256)
        if refused:
            raise VerificationError(f"forge plan: {refused}", hint="stage the job again (forge plan does so on every run)")

        env = child_environment()
        # what the frameworks imported write to their temporary directory (torch's
        # inductor cache) goes with the rest
        os.mkdir(tmp / "tmp", 0o700)
        env.update(TMPDIR=str(tmp / "tmp"), TEMP=str(tmp / "tmp"), TMP=str(tmp / "tmp"))

        # plugin code runs in there: in a process group of its own, ended with the load
        # phase, so that nothing it starts outlives forge plan or keeps it waiting
        code, out = run_in_group(node_entry(sys.executable, str(job_dir), bound.spec_sha256) + ["--plan", str(ledger_path)],
                                 cwd=job_dir, env=env)
        output = out.decode("utf-8", "replace")
        if code != 0 or not ledger_path.is_file():
            raise launch_error(code or 1, output, "on this machine")
        ledger = json.loads(ledger_path.read_text(encoding="utf-8"))
    finally:
        remove_tree(tmp)
    return PlanOutcome(
        spec=resolved.spec, ledger=ledger, conflicts=analyze(ledger, exp.plan_acknowledge),
        seconds=time.perf_counter() - t0, log=output,
    )


def plan_on_backend(
    directory: str | os.PathLike = ".",
    sets=(),
    *,
    backend: str,
    registry: str | None = None,
    insecure: bool = False,
    ca_file: str | None = None,
    require_signatures: bool = False,
    dev: dict | None = None,
    allow_yanked: bool = False,
) -> PlanOutcome:
    """The load phase as a short CPU-only job on *backend*: the ledger comes back in its log.

    The job is staged as ``forge submit --backend`` stages it, with ``plan: true`` in its
    JobSpec (the launcher stops after the load phase and prints the ledger) and the
    backend's settings without GPU requests. Its record goes to a temporary jobs store and
    its staged directory is removed afterwards: the user's jobs list does not show it.
    """
    import dataclasses

    from ..backends.base import backend_class, get_backend, wait
    from ..cluster.ledger import extract
    from ..jobs.staged import remove_tree
    from ..jobs.store import JobStore
    from .lock import open_experiment_registry
    from .stage import resolve_job_in, stage_job

    t0 = time.perf_counter()
    resolved = resolve_job_in(directory, sets, backend=backend, dev=dev)
    exp = resolved.experiment
    settings = backend_class(backend).cpu_only_settings(exp.backend_settings(backend))
    spec = resolved.spec.replace(ledger_only=True, extra={backend: settings} if settings else {})
    resolved = dataclasses.replace(resolved, spec=spec)
    reg = open_experiment_registry(exp, registry, insecure=insecure, ca_file=ca_file)
    scratch = Path(tempfile.mkdtemp(prefix="forge-plan-"))
    runner = get_backend(backend, settings, JobStore(scratch / "jobs"))
    job_dir = runner.staging_dir(exp.root, spec.id)
    made = [p for p in (job_dir.parent, job_dir.parent.parent) if not p.exists()]  # .forge/jobs, when new
    chunks: list = []
    try:
        staged = stage_job(resolved, job_dir, reg, require_signatures=require_signatures, allow_yanked=allow_yanked)
        record = runner.submit(staged, detach=True)
        record = wait(runner, record, chunks.append)
        output = "".join(chunks)
        ledger = extract(output)
        if ledger is None:
            code = record.exit_code if record.exit_code not in (None, 0) else 1
            raise launch_error(code, output, f"on the {backend} backend (job {record.id}, {record.status})")
    finally:
        remove_tree(job_dir)
        remove_tree(scratch)
        for folder in made:
            try:
                folder.rmdir()
            except OSError:
                pass
    return PlanOutcome(
        spec=spec, ledger=ledger, conflicts=analyze(ledger, exp.plan_acknowledge), backend=f"the {backend} backend",
        seconds=time.perf_counter() - t0, log=output,
    )
