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
import stat
import sys
import time

USAGE = """usage: forge-launch --spec JOBSPEC [--verify-only] [-- CMD ...]

Verify and install a job's plugins, then run its training entrypoint.

  --spec JOBSPEC   the job's jobspec.json; its directory is the job directory
  --verify-only    verify every plugin and check its requirements, then stop:
                   nothing is imported or installed and no entrypoint runs
  -- CMD ...       run CMD instead of the spec's entrypoint
  -h, --help       show this help

example:
  forge-launch --spec /jobs/qwen3b-grpo-opsd-0001/jobspec.json
  forge-launch --spec jobspec.json -- python -m toy_grpo.train --steps 10
  forge-launch --spec jobspec.json --verify-only
"""

PREFIX = "plugin  : "
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
    if item.status == "loaded":
        return f"{PREFIX}{ref} loaded{builtin}"
    if item.status == "registered":
        extra = "built-in; " if item.builtin else ""
        return f"{PREFIX}{ref} registered ({extra}needs runtime context, loaded by the training entrypoint)"
    if item.status == "skipped":
        return f"{PREFIX}{ref} skipped (kind {item.entry.kind}: left to the environment mechanism)"
    if item.status == "shadowed":
        return f"{PREFIX}{ref} shadowed (built-in replaced by the locked package {item.shadowed_by})"
    if item.status == "failed":
        return f"{PREFIX}{ref} failed"
    return f"{PREFIX}{ref} {item.status}"


def write_status(job_dir: str, phase: str, code, plugin=None, message: str = "") -> None:
    """``status.json``: {phase, code, plugin, message, time}, written atomically."""
    data = {
        "phase": phase,
        "code": code,
        "plugin": plugin,
        "message": message,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    from ..jobspec import format_json
    from .runtime import atomic_write

    try:
        atomic_write(os.path.join(job_dir, "status.json"), (format_json(data) + "\n").encode())
    except OSError as exc:
        say(f"forge-launch: cannot write status.json: {exc}")


def _parse(argv: list[str]):
    cmd = None
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
        if not cmd:
            raise _Usage("nothing after '--'")
    spec = None
    verify_only = False
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg in ("-h", "--help"):
            sys.stdout.write(USAGE)
            raise SystemExit(0)
        if arg == "--verify-only":
            verify_only = True
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
    return spec, cmd, verify_only


class _Usage(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        spec_arg, cmd, verify_only = _parse(argv)
    except _Usage as exc:
        say(f"error: {exc}")
        say("hint: forge-launch --spec JOBSPEC [--verify-only] [-- CMD ...]")
        return 2
    _drop_launcher_path_entry()
    code = launch(spec_arg, cmd, verify_only=verify_only)
    return code


def _drop_launcher_path_entry() -> None:
    """Remove the entry Python put first on ``sys.path`` for the launcher itself.

    ``python -m starforge.launch`` puts the directory it was started in there,
    ``forge-launch`` its ``bin`` directory; neither belongs on the trainer's path (a module
    there would shadow the experiment's own).
    """
    if sys.flags.safe_path or not sys.path:
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


def launch(spec_arg: str, cmd: list[str] | None = None, verify_only: bool = False) -> int:
    """The whole launch; returns the exit code.

    *verify_only*: verify every plugin and check its requirements, write ``status.json``
    and a provenance record saying so, and stop (nothing imported, installed or run).
    """
    from ..errors import SpecError
    from . import runtime
    from .environment import job_environment, prepare_runtime

    spec_path = os.path.abspath(spec_arg)
    job_dir = os.path.dirname(spec_path)
    os.environ["FORGE_ATTEMPT"] = str(_next_attempt(job_dir))
    try:
        job = runtime.load_job(job_dir, spec_path, "launcher")
    except SpecError as exc:
        return _fail(job_dir, runtime.LaunchFailure("spec", 2, None, str(exc)))
    except runtime.LaunchFailure as failure:
        if failure.plugin:
            say(f"{PREFIX}{failure.plugin} failed ({_PHASE_WORDS[failure.phase]}, exit {failure.code})")
        return _fail(job_dir, failure)
    spec = job.spec
    # The bootstrap may have booted this very process (a backend exporting the job
    # environment to every process): it is the launcher all the same.
    job.role = "launcher"
    job.mode = "launch"
    job.attempt = runtime.attempt_number(os.environ)
    if job.disabled:  # FORGE_DISABLE opts workers out, never the launcher
        job.disabled = runtime._plugins._registry.disabled = False
        for item in job.items:
            if item.status == "disabled":
                item.status = "planned"

    _make_read_only(job)
    # Plugins patch the experiment's own modules too: the recipe is importable (first on
    # sys.path, as `python -m` in recipe/ would have it) before any install runs.
    recipe = os.path.join(job_dir, "recipe")
    if os.path.isdir(recipe):
        os.chdir(recipe)
        sys.path.insert(0, recipe)

    def on_item(item) -> None:
        if item.status == "failed" and job.failure:
            f = job.failure
            say(f"{PREFIX}{item.ref} failed ({_PHASE_WORDS.get(f.phase, f.phase)}, exit {f.code})")
        else:
            say(plugin_line(item))

    if verify_only:
        return _verify_only(job, on_item)
    try:
        job.load_all(on_item)
    except runtime.LaunchFailure as failure:
        return _fail(job_dir, failure, job)

    try:
        prepare_runtime(job_dir, spec.hyperparams)
    except OSError as exc:
        return _fail(job_dir, runtime.LaunchFailure("spec", 2, None, f"cannot write the job runtime in {job_dir}: {exc}"), job)
    os.environ.update(job_environment(job_dir, spec_path, spec.id, os.environ))
    runtime._plugins._registry.booted = True
    job.write_provenance()

    argv = list(cmd) if cmd else list(spec.entrypoint)
    runtime.watch_ray_init()  # an entrypoint's own Ray setup hook is chained, not in conflict
    write_status(job_dir, "entrypoint", None, None, "running: " + " ".join(argv))
    code, failure = run_entrypoint(argv, recipe)
    if failure is not None:
        return _fail(job_dir, failure, job)

    missing = job.deferred_not_installed()
    if missing:  # installed by another process of this attempt (a child, a Ray worker) counts
        elsewhere = _installed_by_other_processes(job)
        missing = [i for i in missing if i.entry.name not in elsewhere]
    for item in missing:
        say(f"{PREFIX}{item.ref} not installed (deferred; the training entrypoint never called install_deferred({item.entry.name!r}))")
    if missing and spec.strict_deferred and code == 0:
        names = ", ".join(i.ref for i in missing)
        failure = runtime.LaunchFailure(
            "install", 14, missing[0].ref, f"deferred plugin never installed with strict_deferred: {names}"
        )
        return _fail(job_dir, failure, job)
    write_status(job_dir, "entrypoint", code, None, "")
    job.write_provenance()
    return code


def _verify_only(job, on_item) -> int:
    """``--verify-only``: every plugin verified and requirement-checked; nothing else."""
    from . import runtime

    job.mode = "verify-only"
    try:
        job.verify_all()
    except runtime.LaunchFailure as failure:
        for item in job.items:
            if item.status == "failed":
                on_item(item)
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


def run_entrypoint(argv: list[str], recipe: str):
    """Run the entrypoint; return (exit code, LaunchFailure or None).

    ``python [flags] -m mod ...`` and ``python [flags] script ...`` run in this process when
    every flag can be honoured here; anything else runs as a child process.
    """
    from . import runtime

    python = _is_python_name(os.path.basename(argv[0])) or os.path.realpath(argv[0]) == os.path.realpath(sys.executable)
    form = _in_process_form(argv) if python else None
    try:
        os.chdir(recipe)
    except OSError as exc:
        return 2, runtime.LaunchFailure("spec", 2, None, f"cannot enter the job's recipe directory {recipe}: {exc}")
    if form is None:
        return _run_child(argv)
    flags, module, script, args = form
    import runpy

    sys.stdout.flush()
    _apply_flags(flags)
    try:
        if module is not None:
            sys.path[:] = _trainer_sys_path(os.getcwd())
            sys.argv = [module] + list(args)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.path[:] = _trainer_sys_path(os.path.dirname(os.path.realpath(script)))
            sys.argv = [script] + list(args)
            runpy.run_path(script, run_name="__main__")  # argv[0] as python would have it
        return 0, None
    except SystemExit as exc:
        return _exit_code(exc.code), None
    except KeyboardInterrupt:
        import traceback

        traceback.print_exc()
        return 130, None
    except BaseException as exc:
        import traceback

        install = _install_error(exc)
        if install is not None:
            detail = "".join(traceback.format_exception(type(exc), exc, _trim(exc.__traceback__)))
            ref = getattr(install, "plugin", None)
            return 13, runtime.LaunchFailure("install", 13, ref, install.message, detail)
        traceback.print_exception(type(exc), exc, _trim(exc.__traceback__))
        return 1, None
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


# Interpreter options honoured in this process: -u, -B, -W arg, and these -X options.
_X_HONOURED = ("faulthandler", "tracemalloc")


def _in_process_form(argv: list[str]):
    """``(flags, module, script, args)`` when *argv* can run in this interpreter, else None.

    *flags* is a list of ``(letter, value)`` for ``-u``, ``-B``, ``-W arg`` and the ``-X``
    options of :data:`_X_HONOURED`; any other option (``-O``, ``-E``, ``-c`` ...) makes the
    entrypoint a child process, where the real interpreter honours it.
    """
    flags: list = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-"):
            return flags, None, arg, argv[i + 1 :]
        if arg == "-" or arg.startswith("--"):
            return None
        j = 1
        while j < len(arg):
            letter = arg[j]
            if letter in "uB":
                flags.append((letter, None))
                j += 1
                continue
            if letter not in "WXm":
                return None
            value = arg[j + 1 :]
            if not value:
                i += 1
                if i >= len(argv):
                    return None
                value = argv[i]
            if letter == "m":
                return flags, value, None, argv[i + 1 :]
            if letter == "X" and not _x_honoured(value):
                return None
            flags.append((letter, value))
            break
        i += 1
    return None


def _x_honoured(value: str) -> bool:
    name, eq, arg = value.partition("=")
    if name not in _X_HONOURED:
        return False
    if name == "tracemalloc" and eq:
        return arg.isdigit() and 1 <= int(arg) <= 65535
    return not eq


def _apply_flags(flags: list) -> None:
    """Honour the entrypoint's interpreter options in this process."""
    for letter, value in flags:
        if letter == "u":
            _unbuffered()
        elif letter == "B":
            sys.dont_write_bytecode = True
        elif letter == "W":
            import warnings

            sys.warnoptions.append(value)  # multiprocessing passes them on to its children
            warnings._processoptions([value])  # what the interpreter does with -W
        elif letter == "X":
            name, _, arg = value.partition("=")
            sys._xoptions[name] = arg or True
            if name == "faulthandler":
                import faulthandler

                faulthandler.enable()
            elif name == "tracemalloc":
                import tracemalloc

                tracemalloc.start(int(arg) if arg else 1)


def _unbuffered() -> None:
    """``-u``: stdout and stderr written straight through to their file descriptors."""
    import io

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):
            continue
        stream.flush()
        raw = open(fd, "wb", buffering=0, closefd=False)
        setattr(sys, name, io.TextIOWrapper(raw, encoding=stream.encoding, errors=stream.errors, write_through=True))


def _trainer_sys_path(first: str) -> list:
    """``sys.path`` as ``python -m``/``python script`` started with the job environment has it.

    *first* (the working directory, or the script's directory), then the entries of
    ``PYTHONPATH`` (the job's bootstrap and ``recipe/`` first), then the interpreter's own
    (standard library, site-packages); nothing of the launcher's.
    """
    env_entries: list = []
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p:
            p = os.path.abspath(p)
            if p not in env_entries:
                env_entries.append(p)
    rest = [p for p in sys.path if p not in env_entries]
    return [first] + env_entries + rest


def _run_child(argv: list[str]):
    """Run a non-Python entrypoint (or one needing its own interpreter) as a child process.

    The child gets the job environment; SIGTERM, SIGINT and SIGHUP sent to the launcher are
    passed on to it. Returns its exit code, 128+N when a signal N ended it, as shells do.
    """
    import signal
    import subprocess

    from . import runtime

    sys.stdout.flush()
    sys.stderr.flush()
    try:
        child = subprocess.Popen(argv, env=dict(os.environ))
    except OSError as exc:
        code = 126 if isinstance(exc, PermissionError) else 127
        return code, runtime.LaunchFailure("entrypoint", code, None, f"cannot run {argv[0]!r}: {exc}")

    def forward(signum, frame) -> None:
        try:
            child.send_signal(signum)
        except OSError:
            pass

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup'd stays nohup'd
            previous[signum] = signal.signal(signum, forward)
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return (128 - code if code < 0 else code), None


def _is_python_name(name: str) -> bool:
    """``python``, ``python3``, ``python3.11`` ...: ``python[0-9.]*`` in full."""
    return name.startswith("python") and all(c in "0123456789." for c in name[6:])


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, bool):
        return int(code)
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def _install_error(exc: BaseException):
    from ..errors import InstallError

    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, InstallError):
            return exc
        seen.add(id(exc))
        exc = exc.__context__
    return None


def _trim(tb):
    """Drop the launcher's and runpy's own frames from the top of a trainer traceback."""
    import runpy

    skip = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}
    while tb is not None and (tb.tb_frame.f_code.co_filename in skip or os.path.abspath(tb.tb_frame.f_code.co_filename) in skip):
        tb = tb.tb_next
    return tb


_CLAIM_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _next_attempt(job_dir: str) -> int:
    """FORGE_ATTEMPT / SLURM_RESTART_COUNT when set, else the next attempt of the job directory.

    Each launch claims its number by creating an empty file named after it in
    ``.forge-runtime/attempts.d/`` (exclusive create: two launchers in one directory never
    get the same number, and there is no file to rewrite — rewriting one through a rename
    cost a tenth of a millisecond or more on every launch). The first launch is 0. A
    directory launched by a release that kept the count in ``.forge-runtime/attempts``
    continues from that count.
    """
    from .runtime import RUNTIME_DIR

    for key in ("FORGE_ATTEMPT", "SLURM_RESTART_COUNT"):
        value = os.environ.get(key, "")
        if value.isdigit():
            return int(value)
    folder = os.path.join(job_dir, RUNTIME_DIR, "attempts.d")
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        names = []
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            pass
    except OSError:
        names = []
    n = max((int(name) for name in names if name.isascii() and name.isdigit()), default=-1) + 1
    if n == 0:
        try:
            with open(os.path.join(job_dir, RUNTIME_DIR, "attempts"), "rb") as f:
                n = int(f.read().strip() or 0)
        except (OSError, ValueError):
            n = 0
    for _ in range(1000):
        try:
            os.close(os.open(os.path.join(folder, str(n)), _CLAIM_FLAGS, 0o644))
        except FileExistsError:
            n += 1  # another launcher claimed it first
            continue
        except OSError:
            pass
        return n
    return n


def _make_read_only(job) -> None:
    """Leave the staged plugin trees read-only (``forge_plugins/`` and the built-ins used)."""
    roots = [os.path.join(job.job_dir, "forge_plugins")] + [i.root for i in job.items if i.builtin]
    for root in roots:
        if not os.path.isdir(root) or os.path.islink(root):
            continue
        _read_only_tree(root)


def _read_only_tree(path: str) -> None:
    """Clear the write bits below *path* (files first, then each directory); symlinks are left alone."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        entries = []
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            _read_only_tree(entry.path)
        elif not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o222:
            try:
                os.chmod(entry.path, stat.S_IMODE(st.st_mode) & ~0o222)
            except OSError:
                pass
    try:
        st = os.lstat(path)
        if st.st_mode & 0o222:
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o222)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
