"""``forge-launch --spec JOBSPEC [-- CMD ...]`` (also ``python -m starforge.launch``).

Verifies, checks, imports and installs (or registers) every plugin of the job in load
order, exports the bootstrap environment, then runs the training entrypoint in this
process (``python -m mod ...`` / ``python script.py ...``) or as a child process
(anything else), and reports deferred plugins no process of the job installed.
Exit codes: 2 bad spec or usage, 10 verification failed, 11 unmet requirement, 12 import
failure, 13 ``install`` raised, 14 deferred plugin never installed (strict); otherwise the
entrypoint's own. ``status.json`` in the job directory says which phase decided the code.

Cluster side: standard library and ``packaging`` only.
"""

from __future__ import annotations

import os
import sys

from . import hyperparams_and_deferred, status
from .attempts import attempt_number, next_attempt
from .binding import SPEC_ARG, SPEC_ENV, is_sha256
from .codedir import remove_own_code_dir
from .entrypoint import run_entrypoint
from .errors import DeferredNotInstalledError, LaunchFailure, RequirementError, SpecError, VerificationError
from .interpreter import confirm_python, linked_job_path, spec_argument
from .jobdir_layout import PLUGINS_DIR, RECIPE_DIR, SPEC_FILE
from .jobspec import read_spec
from .readonly import deletable_when_done, is_ray_copy, make_read_only
from .utctime import utc_now

USAGE = """usage: forge-launch --spec JOBSPEC [--spec-sha256 HEX] [--verify-only | --plan LEDGER] [-- CMD ...]

Verify and install a job's plugins, then run its training entrypoint.

  --spec JOBSPEC   the job's %(spec)s; its directory is the job directory
  --spec-sha256 HEX
                   the sha256 the JobSpec had at staging (backends pass it): the
                   launcher and every process of the job refuse another (exit %(verify_exit)d)
  --verify-only    verify every plugin and check its requirements, then stop:
                   nothing is imported or installed and no entrypoint runs
  --plan LEDGER    the load phase only (what 'forge plan' runs): verify, requires,
                   import, install; then import the patch targets, write the
                   ledger as JSON to LEDGER ('-': stdout) and stop before the
                   entrypoint
  -- CMD ...       run CMD instead of the spec's entrypoint
  -h, --help       show this help

example:
  forge-launch --spec /jobs/qwen3b-grpo-opsd-0001/%(spec)s
  forge-launch --spec %(spec)s -- python -m toy_grpo.train --steps 10
  forge-launch --spec %(spec)s --verify-only
""" % {"spec": SPEC_FILE, "verify_exit": status.VERIFY_EXIT}

PREFIX = "plugin  : "
WARNING = "warning : "
_PHASE_WORDS = {
    "spec": "refused",
    "verify": "verification failed",
    "requires": "requirement not met",
    "import": "import failed",
    "install": "install raised",
}


def say(line: str) -> None:
    """One line on the job log (stderr, flushed: it must interleave with the trainer's)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def plugin_line(item) -> str:
    """The §9 log line for one plugin after the launcher has dealt with it."""
    ref = item.ref
    builtin = " (built-in)" if item.builtin else ""
    if "+dev." in str(item.entry.version):  # forge submit --dev: never a published version
        builtin = " (dev: an unpublished directory)"
    if item.status == "loaded":
        return f"{PREFIX}{ref} loaded{builtin}"
    if item.status == "registered":
        extra = "built-in; " if item.builtin else ("dev: an unpublished directory; " if builtin else "")
        return f"{PREFIX}{ref} registered ({extra}needs runtime context, loaded by the training entrypoint)"
    if item.status == "skipped":
        return f"{PREFIX}{ref} skipped (kind {item.entry.kind}: left to the environment mechanism)"
    if item.status == "shadowed":
        return f"{PREFIX}{ref} shadowed (built-in replaced by the locked package {item.shadowed_by})"
    if item.status == "failed":
        return f"{PREFIX}{ref} failed"
    return f"{PREFIX}{ref} {item.status}"


def hiding_lines(ref: str) -> list[str]:
    """A ``warning :`` line for each patch by plugin *ref* that hides another plugin's patch.

    A replace puts its value above every earlier layer of the target, so what it hides
    never runs and the settings it reads have no effect.
    """
    from . import patching

    lines = []
    for p in patching.patches():
        message = patching.hiding_message(p.record()) if p.plugin == ref else None
        if message:
            lines.append(WARNING + message)
    return lines


def write_status(job_dir: str, phase: str, code, plugin=None, message: str = "") -> None:
    """``status.json``: {phase, code, plugin, message, time} (:mod:`.status` writes it)."""
    try:
        status.write_status(job_dir, phase, code, plugin, message, time=utc_now())
    except OSError as exc:
        say(f"forge-launch: cannot write {status.STATUS_FILE}: {exc}")


def _parse(argv: list[str]):
    cmd = None
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
        if not cmd:
            raise _Usage("nothing after '--'")
    spec = None
    verify_only = False
    bound = None
    plan_out = None
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            raise SystemExit(0)
        if arg == "--verify-only":
            verify_only = True
        elif arg == SPEC_ARG or arg.startswith(SPEC_ARG + "="):
            bound = arg.split("=", 1)[1] if "=" in arg else (rest.pop(0) if rest else "")
            if not is_sha256(bound):
                raise _Usage(f"{SPEC_ARG} needs a sha256 (64 lowercase hex digits), got {bound!r}")
        elif arg == "--plan":
            if not rest:
                raise _Usage("--plan needs a path (or '-' for stdout)")
            plan_out = rest.pop(0)
        elif arg == "--spec":
            if not rest:
                raise _Usage("--spec needs a path")
            spec = rest.pop(0)
        elif arg.startswith("--spec="):
            spec = arg.split("=", 1)[1]
        else:
            raise _Usage(f"unexpected argument {arg!r}")
    if not spec:
        raise _Usage("--spec JOBSPEC is required")
    if verify_only and cmd:
        raise _Usage("--verify-only runs no command; drop '-- CMD ...'")
    if plan_out is not None and verify_only:
        raise _Usage("--plan and --verify-only are two different stops; give one")
    return spec, cmd, verify_only, plan_out, bound


class _Usage(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # First of all: confirm the node entry's nonce, proving this is CPython >= 3.10 (SPEC §9).
    unsupported = confirm_python()
    if unsupported:
        say(f"error: {unsupported}")
        spec_arg = spec_argument(argv)
        if spec_arg and os.path.isdir(os.path.dirname(os.path.abspath(spec_arg))):
            write_status(os.path.dirname(os.path.abspath(spec_arg)), "requires", RequirementError.exit_code, None, unsupported)
        return RequirementError.exit_code
    try:
        spec_arg, cmd, verify_only, plan_out, bound = _parse(argv)
    except _Usage as exc:
        say(f"error: {exc}")
        say("hint: forge-launch --spec JOBSPEC [--verify-only | --plan LEDGER] [-- CMD ...]")
        return 2
    # The binding reaches every process of the job through the environment; one inherited
    # from elsewhere (another job's) never binds this launch.
    if bound:
        os.environ[SPEC_ENV] = bound
    else:
        os.environ.pop(SPEC_ENV, None)
    _drop_launcher_path_entry()
    try:
        return launch(spec_arg, cmd, verify_only=verify_only, argv=argv, plan_out=plan_out)
    finally:
        remove_own_code_dir()  # the job's code directory on this node, made for this launch


def _drop_launcher_path_entry() -> None:
    """Remove the entry Python put first on ``sys.path`` for the launcher itself.

    ``python -m starforge.launch`` puts the directory it was started in there,
    ``forge-launch`` its ``bin`` directory; neither belongs on the trainer's path (a module
    there would shadow the experiment's own).
    """
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return
    first = sys.path[0]
    argv0 = sys.argv[0] if sys.argv else ""
    candidates = {"", os.getcwd()}
    if argv0 and argv0 != "-m" and os.path.exists(argv0):
        candidates.add(os.path.dirname(os.path.abspath(argv0)))
        candidates.add(os.path.dirname(os.path.realpath(argv0)))
    if first in candidates or os.path.abspath(first or os.curdir) in candidates:
        del sys.path[0]


def _fail(job_dir: str | None, failure, job=None) -> int:
    if failure.detail:
        sys.stderr.write(failure.detail)
    say(f"error: {failure.message}")
    if job_dir and os.path.isdir(job_dir):
        write_status(job_dir, failure.phase, failure.code, failure.plugin, failure.message)
    if job is not None:
        job.failure = failure
        job.write_provenance()
    return failure.code


def launch(
    spec_arg: str, cmd: list[str] | None = None, verify_only: bool = False, argv: list[str] | None = None,
    plan_out: str | None = None,
) -> int:
    """The whole launch; returns the exit code.

    *verify_only*: verify every plugin and check its requirements, write ``status.json``
    and a provenance record saying so, and stop (nothing imported, installed or run).
    *plan_out*: the load phase only (:mod:`.ledger`), the ledger written there; the
    entrypoint never runs.
    *argv*: the launcher's own arguments, to start it again from the job's runtime zip
    when the spec was staged by another version (:func:`_same_runtime`).
    """
    from .environment import WORK_DIR_ENV, job_environment, prepare_runtime, work_dir
    from .process_job import load_job
    from .ray_init import watch_ray_init
    from .recipe_imports import install_recipe_finder

    spec_path = os.path.abspath(spec_arg)
    job_dir = os.path.dirname(spec_path)
    linked = linked_job_path(job_dir)
    if linked:  # nothing is written through it either: no status.json
        say(f"error: {linked} is a symbolic link; a job directory and its runtime are never followed through one")
        return VerificationError.exit_code
    moved = _into_job_python(spec_path, job_dir, cmd, argv)  # returns only when this is the job's Python
    if moved is not None:
        return _fail(job_dir, moved)
    os.environ["FORGE_ATTEMPT"] = str(next_attempt(job_dir))
    try:
        job = load_job(job_dir, spec_path, "launcher")
    except SpecError as exc:
        return _fail(job_dir, LaunchFailure(SpecError, None, str(exc)))
    except LaunchFailure as failure:
        if failure.plugin:
            say(f"{PREFIX}{failure.plugin} failed ({_PHASE_WORDS[failure.phase]}, exit {failure.code})")
        return _fail(job_dir, failure)
    spec = job.spec
    refused = _same_runtime(spec.core_version, job_dir, argv)
    if refused is not None:
        return _fail(job_dir, refused)
    # The bootstrap may have booted this very process (a backend exporting the job
    # environment to every process): it is the launcher all the same.
    job.role = "launcher"
    job.mode = "launch"
    job.attempt = attempt_number(os.environ)
    if job.disabled:  # FORGE_DISABLE opts workers out, never the launcher
        job.disabled = hyperparams_and_deferred.registry.disabled = False
        for item in job.items:
            if item.status == "disabled":
                item.status = "planned"

    read_only = _make_job_read_only(job)
    if is_ray_copy(job_dir):
        deletable_when_done(job_dir, read_only)
    # Plugins patch the experiment's own modules too: the staged recipe is importable (first
    # on sys.path, as `python -m` in recipe/ would have it) before any install runs, through
    # a finder that writes no bytecode there; the job runs in its own working directory.
    recipe = os.path.join(job_dir, RECIPE_DIR)
    workdir = work_dir(job_dir)
    os.environ.pop(WORK_DIR_ENV, None)  # this job's; a job started from inside it has its own
    if os.path.isdir(recipe):
        install_recipe_finder(recipe)
        try:
            os.chdir(workdir)
        except OSError as exc:
            return _fail(job_dir, LaunchFailure(SpecError, None, f"cannot enter the job's working directory {workdir}: {exc}"))
        sys.path.insert(0, recipe)

    def on_item(item) -> None:
        if item.status == "failed" and job.failure:
            f = job.failure
            say(f"{PREFIX}{item.ref} failed ({_PHASE_WORDS.get(f.phase, f.phase)}, exit {f.code})")
        else:
            say(plugin_line(item))
            for line in hiding_lines(item.ref):
                say(line)

    if verify_only:
        return _verify_only(job, on_item)
    if plan_out is None and spec.ledger_only and not cmd:
        plan_out = "-"  # forge plan --backend: the ledger comes back through the job's log
    if plan_out is None:
        refused = _record_environment(job)
        if refused is not None:
            return _fail(job_dir, refused, job)
    if plan_out is not None:
        from .ledger import run_plan

        stopped = run_plan(job, on_item, plan_out)
        return _fail(job_dir, stopped, job) if stopped is not None else 0
    from .loader import hold_compiled, keep_compiled

    hold_compiled()  # the plugin code compiled here, kept as one file for the job's other processes
    try:
        job.load_all(on_item)
    except LaunchFailure as failure:
        return _fail(job_dir, failure, job)
    finally:
        keep_compiled()

    try:
        prepare_runtime(job_dir, spec.hyperparams)
    except OSError as exc:
        return _fail(job_dir, LaunchFailure(SpecError, None, f"cannot write the job runtime in {job_dir}: {exc}"), job)
    os.environ.update(job_environment(job_dir, spec_path, spec.id, os.environ))
    if spec.lineage:  # the declared output directories (SPEC §18): made, the first one named
        _prepare_outputs(spec)
    hyperparams_and_deferred.registry.booted = True
    job.write_provenance()

    argv = list(cmd) if cmd else list(spec.entrypoint)
    other_hosts = _ask_other_hosts(job)
    watch_ray_init()  # an entrypoint's own Ray setup hook is chained, not in conflict
    write_status(job_dir, "entrypoint", None, None, "running: " + " ".join(argv))
    code, stopped = run_entrypoint(argv, recipe, workdir)
    _record_end(job, spec_path, workdir, other_hosts)
    if stopped is not None:
        return _fail(job_dir, stopped, job)

    missing = job.deferred_not_installed()
    if missing:  # installed by another process of this attempt (a child, a Ray worker) counts
        elsewhere = _installed_by_other_processes(job)
        missing = [i for i in missing if i.entry.name not in elsewhere]
    for item in missing:
        say(f"{PREFIX}{item.ref} not installed (deferred; the training entrypoint never called install_deferred({item.entry.name!r}))")
    if missing and spec.strict_deferred and code == 0:
        names = ", ".join(i.ref for i in missing)
        never = LaunchFailure(
            DeferredNotInstalledError, missing[0].ref, f"deferred plugin never installed with strict_deferred: {names}"
        )
        return _fail(job_dir, never, job)
    write_status(job_dir, "entrypoint", code, None, "")
    job.write_provenance()
    return code


def _into_job_python(spec_path: str, job_dir: str, cmd: list[str] | None, argv: list[str] | None) -> LaunchFailure | None:
    """Run the launcher under the job's Python (SPEC §14), or say why it cannot.

    The job's Python is the JobSpec's ``python``, else the interpreter the entrypoint
    names, else this one. When it is another interpreter, the launcher starts again under
    it with the job's runtime zip first on ``PYTHONPATH`` (never returns), so that
    ``requires`` is checked, and eager plugins install, where the job trains. A missing or
    pre-3.10 interpreter is an unmet requirement (exit 11). Returns None when this process
    is the job's Python (the ``python  :`` line says which it is and why).
    """
    from .environment import runtime_paths
    from .interpreter import JobPythonError, check_job_python, resolve_job_python, run_proven, same_interpreter

    try:
        spec = read_spec(spec_path, os.environ.get(SPEC_ENV))
    except SpecError:
        return None  # load_job reports it, with the launch's usual status
    except VerificationError as exc:
        return LaunchFailure(VerificationError, None, str(exc))
    entrypoint = list(cmd) if cmd else list(spec.entrypoint)
    recipe = os.path.join(job_dir, RECIPE_DIR)
    python, how = resolve_job_python(spec.python, entrypoint, recipe, sys.executable)
    if how == "default" and os.environ.get("FORGE_PYTHON_FROM") in ("spec", "entrypoint"):
        how = os.environ["FORGE_PYTHON_FROM"]
    if same_interpreter(python, sys.executable):
        say(f"python  : {sys.executable} ({'.'.join(map(str, sys.version_info[:3]))}, {_PYTHON_FROM[how]})")
        return None
    try:
        check_job_python(python, probe=False)
    except JobPythonError as exc:
        return LaunchFailure(RequirementError, None, str(exc))
    if argv is None or os.environ.get("FORGE_PYTHON") == python:
        return LaunchFailure(RequirementError, None, f"the launcher cannot start under the job's Python {python}")
    job_zip = runtime_paths(job_dir)["zip"]
    env = dict(os.environ, FORGE_PYTHON=python, FORGE_PYTHON_FROM=how)
    if os.path.isfile(job_zip):
        env["PYTHONPATH"] = os.pathsep.join([job_zip] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != job_zip])
    # Started as a child that must prove itself CPython >= 3.10 running the launcher.
    try:
        code = run_proven(python, ["-m", "starforge.launch", *argv], env)
    except JobPythonError as exc:
        return LaunchFailure(RequirementError, None, str(exc))
    raise SystemExit(code)


_PYTHON_FROM = {"spec": "forge.yaml python", "entrypoint": "named by the entrypoint", "default": "the backend's default"}


def _same_runtime(staged: str, job_dir: str, argv: list[str] | None) -> LaunchFailure | None:
    """Make sure the starforge running is the one that staged the job; log which runs.

    From the job's runtime zip, or from an installed starforge-core of the version that
    staged the job, the launch goes on (the ``runtime :`` line says which). An installed
    one of another version starts the launcher again with the job's zip first on
    ``PYTHONPATH`` (never returns), or refuses the spec when there is no zip to start from.
    """
    from .. import __version__
    from .environment import runtime_paths
    from .runtime_zip import running_from

    job_zip = runtime_paths(job_dir)["zip"]
    if running_from(job_zip):
        say(f"runtime : starforge-core {__version__} from the job's runtime zip")
        return None
    if not staged or staged == __version__:
        say(f"runtime : starforge-core {__version__} from {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}")
        return None
    if os.path.isfile(job_zip) and argv is not None and not os.environ.get("FORGE_LAUNCH_FROM_ZIP"):
        env = dict(os.environ, FORGE_LAUNCH_FROM_ZIP="1")
        env["PYTHONPATH"] = os.pathsep.join([job_zip] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "starforge.launch", *argv], env)
    return LaunchFailure(
        SpecError, None,
        f"the job was staged by starforge-core {staged}, this launcher is {__version__}"
        + (" and the job's runtime zip did not start" if os.path.isfile(job_zip) else " and the job carries no runtime zip")
        + f"; run it with the job's runtime: PYTHONPATH={job_zip} python3 -m starforge.launch --spec ...",
    )


def _record_environment(job) -> LaunchFailure | None:
    """Record the job's environment fingerprint (provenance ``environment``); for a replay,
    compare it with the one the replayed job recorded: a ``warning :`` line per difference,
    or, when the replay is strict, a refusal (exit 11) before any plugin code runs."""
    from .fingerprint import compare, fingerprint

    spec = job.spec
    targets = sorted({t for p in tuple(spec.plugins) + tuple(spec.recipe_plugins) for t in p.targets})
    job.environment = fingerprint(targets)
    replay = spec.replay or {}
    if not replay:
        return None
    say(f"replay  : of job {replay.get('of')}")
    recorded = replay.get("environment")
    if not recorded:
        say(f"{WARNING}replay of {replay.get('of')}: that job recorded no environment fingerprint; not compared")
        return None
    differences = compare(recorded, job.environment)
    for line in differences:
        say(f"{WARNING}replay of {replay.get('of')}: environment differs: {line}")
    if differences and replay.get("strict"):
        return LaunchFailure(
            RequirementError, None,
            f"replay of {replay.get('of')} with --strict: the environment differs from the one that job ran in "
            f"({'; '.join(differences)})",
        )
    return None


def _prepare_outputs(spec) -> None:
    """Make the job's declared output directories and export the first as ``FORGE_OUTPUT_DIR``;
    one that cannot be made is said, and the job goes on (its end records it as missing)."""
    from .lineage import output_dirs, output_environment

    for declared, path in output_dirs(spec, os.environ):
        if path is None:
            say(f"{WARNING}outputs: {declared} does not name an absolute directory here (a variable unset?)")
            continue
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            say(f"{WARNING}outputs: cannot make {path}: {exc.strerror or exc}")
    os.environ.update(output_environment(spec, os.environ))


def _ask_other_hosts(job):
    """On Ray (the records travel through the log), the question the launcher asks the job's
    other hosts for their outputs manifests (:mod:`.ray_outputs`), asked just before the
    entrypoint shuts Ray down, else when it returns; None elsewhere."""
    from .provenance_log import enabled

    if not enabled() or job.spec.ledger_only:
        return None
    from .ray_init import before_ray_shutdown
    from .ray_outputs import OtherHosts

    other_hosts = OtherHosts(job.attempt, say=say)
    before_ray_shutdown(other_hosts.gather)
    return other_hosts


def _record_end(job, spec_path: str, workdir: str, other_hosts=None) -> None:
    """The end of this attempt on this host (SPEC §18): the outputs manifest and sidecars
    (:mod:`.lineage`); on Ray, where the job directory goes with the job, the manifest also
    travels through the log as frames, and so do those of the job's other hosts
    (*other_hosts*, asked now if the entrypoint left Ray connected). A failure is said,
    never the job's own end."""
    from .lineage import record_attempt_end
    from .provenance_log import emit_outputs, enabled

    try:
        path = record_attempt_end(spec_path, job.job_dir, job.attempt, env=os.environ, work=workdir, spec=job.spec,
                                  node_local_work=enabled())
        if path and enabled():
            with open(path, encoding="utf-8") as f:
                emit_outputs(f.read())
    except Exception as exc:  # noqa: BLE001 - the entrypoint's code stands whatever happens here
        say(f"{WARNING}outputs manifest not recorded: {exc}")
    if other_hosts is not None:
        other_hosts.gather()


def _verify_only(job, on_item) -> int:
    """``--verify-only``: every plugin verified and requirement-checked; nothing else."""
    job.mode = "verify-only"
    try:
        job.verify_all_reporting(on_item)
    except LaunchFailure as failure:
        return _fail(job.job_dir, failure, job)
    for item in job.items:
        if item.status == "planned":
            item.status = "verified"
            builtin = " (built-in)" if item.builtin else ""
            say(f"{PREFIX}{item.ref} verified{builtin}")
        else:
            say(plugin_line(item))
    count = sum(1 for item in job.items if item.status == "verified")
    write_status(job.job_dir, "verify", 0, None, f"verify-only: {count} plugin(s) verified, requirements met")
    job.write_provenance()
    return 0


def _installed_by_other_processes(job) -> set:
    """Names of the deferred plugins a process of this launch attempt recorded as installed."""
    from .provenance import read_records

    names = set()
    for rec in read_records(job.job_dir):
        if rec.get("attempt", 0) != job.attempt or rec.get("job_id") != job.spec.id:
            continue
        for p in rec.get("plugins") or ():
            if isinstance(p, dict) and p.get("installed_later"):
                names.add(p.get("name"))
    return names


def _make_job_read_only(job) -> list[str]:
    """Leave the staged plugin trees read-only (``forge_plugins/`` and the built-ins used); return them."""
    roots = [os.path.join(job.job_dir, PLUGINS_DIR)] + [i.root for i in job.items if i.builtin]
    made = []
    for root in roots:
        if not os.path.isdir(root) or os.path.islink(root):
            continue
        make_read_only(root)
        made.append(root)
    return made


if __name__ == "__main__":
    sys.exit(main())
