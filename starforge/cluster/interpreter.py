# The job's Python (SPEC §14): which interpreter trains, worked out on the node.
#
# This module's main() is also the runtime zip's entry (``python3 starforge-runtime.zip
# --spec jobspec.json``, through node_entry.py): started under whatever ``python3`` the
# node has, it resolves the job's Python, makes the job's code directory on this node
# (codedir.py: the runtime compiled once for the job), and runs the launcher from there:
# in this very process when the job's Python is this interpreter (no second interpreter
# start), else by re-executing ``<job python> -m starforge.launch`` with the code
# directory and the zip first on PYTHONPATH. It therefore parses and runs on old
# interpreters (no f-strings, no annotations, no walrus): a node whose python is older
# than 3.10 gets a clean exit 11 and a status.json, never a SyntaxError.
#
# Standard library only.
"""Resolve the job's Python from the JobSpec, the entrypoint and the backend default.

>>> resolve_job_python(None, ["/opt/venv/bin/python", "-m", "trainer"], "/job/recipe", "/usr/bin/python3")
('/opt/venv/bin/python', 'entrypoint')
>>> resolve_job_python(None, ["python", "-m", "trainer"], "/job/recipe", "/usr/bin/python3")
('/usr/bin/python3', 'default')
"""

import json
import os
import re
import sys

try:
    from .binding import SPEC_ARG, mismatch_message, sha256_bytes
    from .codedir import (
        CODE_DIR_ENV,
        CODE_ZIP,
        UnsafeFolderError,
        code_dir_refusal,
        make_code_dir,
        modules_to_compile,
        remove_on_signals,
        remove_own_code_dir,
        write_pointer,
    )
    from .jobdir_layout import BOOTSTRAP_DIR, RECIPE_DIR, RUNTIME_DIR, RUNTIME_ZIP
    from .status import REQUIRES_EXIT, SPEC_EXIT, VERIFY_EXIT, write_status
except ImportError:  # not imported as a module: node_entry.py ran the modules it imports in this namespace
    pass

MIN_VERSION = (3, 10)

_PYTHON_NAME = re.compile(r"^python[0-9.]*$")
# The `#!/bin/sh` wrapper that pip (distlib) and conda write when the interpreter path is
# too long for a kernel shebang, or relocatable:
#   '''exec' /very/long/path/bin/python "$0" "$@"
#   '''exec' "$(dirname -- "$(realpath -- "$0")")"/'python3' "$0" "$@"
_EXEC_WRAPPER = re.compile(r"""^'''exec' (?P<cmd>.+?) "\$0" "\$@"\s*$""")
_RELOCATABLE = re.compile(r"""^"\$\(dirname -- "\$\(realpath -- "\$0"\)"\)"/'?(?P<name>[^'"/]+)'?$""")


class JobPythonError(Exception):
    """The job's Python cannot be used (missing, not executable, too old)."""


def is_python_name(name):
    """``python``, ``python3``, ``python3.11``: ``python[0-9.]*`` in full."""
    return bool(_PYTHON_NAME.match(name))


def which(name, path=None):
    """*name* looked up on PATH as ``execvp`` would (no resolution of symlinks)."""
    if "/" in name:
        return name if _executable(name) else None
    for folder in (path if path is not None else os.environ.get("PATH", os.defpath)).split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if _executable(candidate):
            return candidate
    return None


def _executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def shebang_python(script, path=None):
    """The Python interpreter a console script runs under, or None if it is not one.

    Reads the script's first lines as the kernel and installers write them:
    ``#!/opt/venv/bin/python3``, ``#!/usr/bin/env python3`` (looked up on PATH), and the
    ``#!/bin/sh`` + ``'''exec' … "$0" "$@"`` wrapper (absolute or relocatable, next to
    the script's real location). A venv's ``python`` is never resolved through
    ``realpath``: that would drop the venv.
    """
    try:
        with open(script, "rb") as f:
            head = f.read(2048)
    except (IOError, OSError):
        return None
    if not head.startswith(b"#!"):
        return None
    lines = head.decode("utf-8", "replace").splitlines()
    words = lines[0][2:].strip().split()
    if not words:
        return None
    interpreter, args = words[0], words[1:]
    if os.path.basename(interpreter) == "env":
        args = [a for a in args if not a.startswith("-")]  # env -S python3 -u
        if args and is_python_name(args[0]):
            return which(args[0], path)
        return None
    if is_python_name(os.path.basename(interpreter)):
        if not os.path.isabs(interpreter):  # relocatable: relative to the script's folder
            interpreter = os.path.join(os.path.dirname(os.path.abspath(script)), interpreter)
        return interpreter
    if os.path.basename(interpreter) == "sh" and len(lines) > 1:
        match = _EXEC_WRAPPER.match(lines[1])
        if match:
            return _wrapper_python(match.group("cmd"), script)
    return None


def _wrapper_python(cmd, script):
    relocatable = _RELOCATABLE.match(cmd)
    if relocatable:
        folder = os.path.dirname(os.path.realpath(script))  # the script's realpath, as the wrapper does
        candidate = os.path.join(folder, relocatable.group("name"))
    else:
        candidate = cmd.strip("'\"")
    if is_python_name(os.path.basename(candidate)):
        return candidate
    return None


def entrypoint_python(argv, cwd, path=None):
    """The interpreter the entrypoint names, or None when it names none.

    A path (``/opt/venv/bin/python -m trainer``, ``../env/bin/python3 t.py``, also after
    ``env VAR=1``) names one; so does a Python console script (``torchrun …``) through its
    shebang. A bare ``python`` or ``python3`` names none in particular: it means the job's
    Python (``python:``, else the backend's default), as ``python -m toy_grpo.train`` does
    in the quickstart.
    """
    argv = list(argv)
    while argv and os.path.basename(argv[0]) == "env":  # env [-u NAME] [NAME=value]... CMD
        rest = argv[1:]
        while rest and (rest[0].startswith("-") or "=" in rest[0]):
            if rest[0] in ("-u", "--unset") and len(rest) > 1:
                rest = rest[1:]
            rest = rest[1:]
        argv = rest
    if not argv:
        return None
    command = argv[0]
    if "/" in command and not os.path.isabs(command):
        command = os.path.normpath(os.path.join(cwd, command))
    if is_python_name(os.path.basename(command)):
        return command if "/" in argv[0] else None
    found = which(command, path)
    if found is None:
        return None
    return shebang_python(found, path)


def resolve_job_python(spec_python, argv, cwd, default, path=None):
    """``(interpreter, how)``: the JobSpec's ``python``, else the entrypoint's, else *default*.

    *how* is ``"spec"``, ``"entrypoint"`` or ``"default"`` (for the log and provenance).
    A ``python`` of the JobSpec may be a path (relative to the recipe directory *cwd*) or a
    command name looked up on PATH; ``$VAR`` is expanded from the node's environment.
    """
    if spec_python:
        value = os.path.expandvars(spec_python)
        if "/" in value:
            return (value if os.path.isabs(value) else os.path.normpath(os.path.join(cwd, value))), "spec"
        return (which(value, path) or value), "spec"
    named = entrypoint_python(argv, cwd, path)
    if named:
        return named, "entrypoint"
    return default, "default"


def runs_in_job_python(argv, cwd, job_python, path=None):
    """Whether a ``python …`` entrypoint runs in the job's Python (in the launcher's process).

    A bare ``python``/``python3`` does; a path does when it is the job's Python itself.
    """
    if not argv or not is_python_name(os.path.basename(argv[0])):
        return False
    if "/" not in argv[0]:
        return True
    command = argv[0] if os.path.isabs(argv[0]) else os.path.normpath(os.path.join(cwd, argv[0]))
    return same_interpreter(command, job_python)


def same_interpreter(a, b):
    """Whether two interpreter paths are one: equal absolute paths, or the same file with
    the same parent folder (a venv's ``bin/python`` is not its base ``python3``)."""
    a, b = os.path.abspath(a), os.path.abspath(b)
    if a == b:
        return True
    try:
        return os.path.samefile(a, b) and os.path.samefile(os.path.dirname(a), os.path.dirname(b))
    except OSError:
        return False


def python_version(interpreter):
    """``(major, minor)`` of *interpreter*; this one's without starting a process."""
    if same_interpreter(interpreter, sys.executable):
        return tuple(sys.version_info[:2])
    import subprocess

    probe = "import sys; sys.stdout.write('%d.%d' % sys.version_info[:2])"
    try:
        out = subprocess.check_output([interpreter, "-S", "-E", "-c", probe], stderr=subprocess.STDOUT)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise JobPythonError("the job's Python %s cannot run: %s" % (interpreter, exc))
    text = out.decode("ascii", "replace").strip()
    try:
        major, minor = text.split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise JobPythonError("the job's Python %s did not report its version (got %r)" % (interpreter, text[:80]))


def check_job_python(interpreter, probe=True):
    """Refuse a missing, non-executable or (with *probe*, asking it) too old job's Python."""
    if "$" in interpreter:
        raise JobPythonError("the job's Python %s names an environment variable not set on this node" % interpreter)
    if not os.path.exists(interpreter):
        raise JobPythonError("the job's Python %s does not exist on this node" % interpreter)
    if not _executable(interpreter):
        raise JobPythonError("the job's Python %s is not executable" % interpreter)
    if not probe:
        return None
    version = python_version(interpreter)
    if version < MIN_VERSION:
        raise JobPythonError(
            "the job's Python %s is %d.%d; the StarForge launcher needs Python %d.%d or newer"
            % ((interpreter,) + tuple(version) + MIN_VERSION)
        )
    return version


# -- proving the job's Python (SPEC §9) --------------------------------------------------
#
# A version probe proves nothing: anything executable can print "3.11". What must be true
# is that the process the job runs is CPython >= 3.10 running our launcher. Where the
# job's Python is the entry's own interpreter, the entry asks itself (no process started).
# Otherwise the entry starts the launcher under it as a child, handing it a per-run nonce
# and a pipe (FORGE_PYTHON_PROOF=<fd>:<nonce>); the launcher, first thing, checks its own
# interpreter and writes the nonce back. No nonce by the time the pipe closes: exit 11.

PROOF_ENV = "FORGE_PYTHON_PROOF"


def supported_here():
    """Whether this interpreter is CPython >= 3.10, by its own word (no process started)."""
    implementation = getattr(sys, "implementation", None)
    return getattr(implementation, "name", "") == "cpython" and tuple(sys.version_info[:2]) >= MIN_VERSION


def describe_here():
    implementation = getattr(sys, "implementation", None)
    return "%s %d.%d" % (getattr(implementation, "name", "unknown"), sys.version_info[0], sys.version_info[1])


def unsupported_message(interpreter):
    return "the job's Python %s is %s; the StarForge launcher needs CPython %d.%d or newer" % (
        (interpreter, describe_here()) + MIN_VERSION)


def confirm_python():
    """In the launcher: answer the entry's proof request; a message when this interpreter is
    not CPython >= 3.10 (then nothing is confirmed), else None. The pipe never leaks to the
    job's processes."""
    value = os.environ.pop(PROOF_ENV, None)
    if not value:
        return None
    fd_text, _, nonce = value.partition(":")
    try:
        fd = int(fd_text)
    except ValueError:
        return None
    try:
        if not supported_here():
            return unsupported_message(sys.executable)
        os.write(fd, nonce.encode("ascii"))
        return None
    except OSError:
        return None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass


def run_proven(interpreter, args, env):
    """Run ``[interpreter] + args`` (the launcher) as a child that must prove it is CPython
    >= 3.10 running the launcher; return its exit code (128+N for signal N).

    Raises :class:`JobPythonError` when it never confirmed (whatever it exited with). Only
    then is the interpreter probed, to say why. SIGTERM, SIGINT and SIGHUP are passed on.
    """
    import binascii
    import signal
    import subprocess

    nonce = binascii.hexlify(os.urandom(16)).decode("ascii")
    read_end, write_end = os.pipe()
    env = dict(env)
    env[PROOF_ENV] = "%d:%s" % (write_end, nonce)
    # The handlers go in before the child starts: a signal that arrives while it starts is
    # held and passed on once it exists, instead of ending this entry and leaving the
    # launcher running on its own.
    started = []
    pending = []

    def forward(signum, frame):
        if not started:
            pending.append(signum)
            return
        try:
            started[0].send_signal(signum)
        except OSError:
            pass

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous[signum] = signal.signal(signum, forward)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            child = subprocess.Popen([interpreter] + list(args), env=env, pass_fds=(write_end,))
        except OSError as exc:
            os.close(read_end)
            os.close(write_end)
            raise JobPythonError("the job's Python %s cannot run: %s" % (interpreter, exc))
        os.close(write_end)
        started.append(child)
        for signum in pending:
            forward(signum, None)
        got = b""
        while len(got) < 256:
            chunk = os.read(read_end, 256)
            if not chunk:
                break
            got += chunk
        os.close(read_end)
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if got != nonce.encode("ascii"):
        raise JobPythonError(_unproven_message(interpreter))
    return 128 - code if code < 0 else code


def _unproven_message(interpreter):
    """Why *interpreter* did not confirm: too old when a probe says so, else not CPython."""
    try:
        version = python_version(interpreter)
    except JobPythonError:
        version = None
    if version is not None and tuple(version) < MIN_VERSION:
        return "the job's Python %s is %d.%d; the StarForge launcher needs Python %d.%d or newer" % (
            (interpreter,) + tuple(version) + MIN_VERSION)
    return ("the job's Python %s did not prove to be CPython %d.%d or newer running the StarForge launcher "
            "(it never confirmed the entry's nonce)" % ((interpreter,) + MIN_VERSION))


def spec_binding_refusal(spec_path, data, argv):
    """Why the JobSpec bytes *data* are not the ones bound by ``--spec-sha256`` in *argv*, or None.

    The check of :mod:`.binding`, made before the JobSpec names the interpreter to start.
    """
    expected = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == SPEC_ARG and i + 1 < len(argv):
            expected = argv[i + 1]
        elif arg.startswith(SPEC_ARG + "="):
            expected = arg[len(SPEC_ARG + "="):]
    if not expected:
        return None
    got = sha256_bytes(data)
    if got == expected:
        return None
    return mismatch_message("the JobSpec", spec_path, got, expected)


def linked_job_path(job_dir):
    """The job directory or its ``.forge-runtime`` (or ``bootstrap`` in it) when one is a symlink, else None."""
    for path in (job_dir, os.path.join(job_dir, RUNTIME_DIR), os.path.join(job_dir, RUNTIME_DIR, BOOTSTRAP_DIR)):
        if os.path.islink(path):
            return path
    return None


def _write_status(job_dir, code, message, phase="requires"):
    """status.json as the launcher writes it, for a job that could not start its launcher."""
    try:
        write_status(job_dir, phase, code, None, message)
    except (IOError, OSError):
        pass


def spec_argument(argv):
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--spec" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--spec="):
            return arg[len("--spec="):]
    return None


def main(argv=None, zip_path=None, entry_code=None):
    """The node entry: resolve the job's Python and run the launcher under it.

    *zip_path*: the runtime zip this runs from (:mod:`.node_entry`, the zip's ``__main__``);
    *entry_code*: ``{name in the zip: (source bytes, code)}`` of the modules the entry
    compiled from it, reused for the job's code zip.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    spec_arg = spec_argument(argv)
    if spec_arg is None:
        sys.stderr.write("error: usage: python3 %s --spec JOBSPEC [-- CMD ...]\n" % RUNTIME_ZIP)
        return SPEC_EXIT
    spec_path = os.path.abspath(spec_arg)
    job_dir = os.path.dirname(spec_path)
    linked = linked_job_path(job_dir)
    if linked:
        message = "%s is a symbolic link; a job directory and its runtime are never followed through one" % linked
        sys.stderr.write("error: %s\n" % message)
        return VERIFY_EXIT
    try:
        with open(spec_path, "rb") as f:
            data = f.read()
        # The JobSpec names the interpreter to start: bound to what was staged first
        # (SPEC §9; binding.py does the same for the launcher and every other process).
        refused = spec_binding_refusal(spec_path, data, argv)
        if refused:
            sys.stderr.write("error: %s\n" % refused)
            _write_status(job_dir, VERIFY_EXIT, refused, "verify")
            return VERIFY_EXIT
        spec = json.loads(data.decode("utf-8"))
        if not isinstance(spec, dict):
            raise ValueError("not a JSON object")
    except (IOError, OSError, ValueError) as exc:
        sys.stderr.write("error: cannot read the JobSpec %s: %s\n" % (spec_path, exc))
        return SPEC_EXIT
    entrypoint = spec.get("entrypoint") or []
    if "--" in argv:
        entrypoint = argv[argv.index("--") + 1:] or entrypoint
    spec_python = spec.get("python")
    if not isinstance(entrypoint, list) or not isinstance(spec_python, (type(None), str)):
        sys.stderr.write("error: the JobSpec %s has a malformed entrypoint or python\n" % spec_path)
        return SPEC_EXIT
    recipe = os.path.join(job_dir, RECIPE_DIR)
    interpreter, how = resolve_job_python(spec_python, entrypoint, recipe, sys.executable)
    own = same_interpreter(interpreter, sys.executable)
    try:
        if own:  # proven by asking this very interpreter: no process started
            if not supported_here():
                raise JobPythonError(unsupported_message(interpreter))
        else:
            check_job_python(interpreter, probe=False)  # proven below, by the launcher itself
    except JobPythonError as exc:
        message = str(exc)
        sys.stderr.write("error: %s\n" % message)
        _write_status(job_dir, REQUIRES_EXIT, message)
        return REQUIRES_EXIT
    here = zip_path or os.path.dirname(os.path.abspath(__file__))  # the zip
    first = [here]
    os.environ.pop(CODE_DIR_ENV, None)  # only the directory made here, for this launch
    os.environ.pop(PROOF_ENV, None)
    if os.path.isfile(here):
        try:
            # Compiled here when this interpreter is the job's Python (the code is this
            # interpreter's); else unpacked, for the job's Python to compile on import.
            code_dir = make_code_dir(here, job_dir, spec.get("id"), modules_to_compile(spec) if own else (), entry_code)
            # The launcher runs from there: checked as every process of the job checks it.
            refused = code_dir_refusal(code_dir, here, spec.get("id"), job_dir)
            if refused:
                if not os.path.islink(code_dir):
                    import shutil

                    shutil.rmtree(code_dir, ignore_errors=True)
                raise UnsafeFolderError("the job's code directory %s cannot be used: %s" % (code_dir, refused))
        except UnsafeFolderError as exc:  # another user could put their code where the launcher runs from
            message = str(exc)
            sys.stderr.write("error: %s\n" % message)
            sys.stderr.write("hint: set TMPDIR to a folder only you (or root) can write, such as one under your home\n")
            _write_status(job_dir, VERIFY_EXIT, message, "verify")
            return VERIFY_EXIT
        except Exception as exc:  # the zip still runs, compiled in each process as before
            sys.stderr.write("warning : no code directory for this job (%s); every process compiles the runtime\n" % exc)
        else:
            first = [os.path.join(code_dir, CODE_ZIP) if own else code_dir, here]
            os.environ[CODE_DIR_ENV] = code_dir
            remove_on_signals()  # a cancelled job (SIGTERM) leaves no code directory behind
            write_pointer(job_dir, code_dir)  # for the job's processes the entry's environment does not reach
    old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in first]
    os.environ["PYTHONPATH"] = os.pathsep.join(first + old)
    os.environ["FORGE_PYTHON"] = interpreter
    os.environ["FORGE_PYTHON_FROM"] = how
    if own:
        # The job's Python is this interpreter: `-m starforge.launch` runs here, from the
        # job's code zip, without a second interpreter start (it exits with its code).
        import runpy

        sys.path[0:0] = [p for p in first if p not in sys.path[:1]]
        sys.argv[:] = [sys.argv[0] if sys.argv else "starforge.launch"] + argv
        runpy.run_module("starforge.launch", run_name="__main__", alter_sys=True)
        return 0
    # Another interpreter: the launcher runs as a child that must confirm the nonce.
    try:
        return run_proven(interpreter, ["-m", "starforge.launch"] + argv, dict(os.environ))
    except JobPythonError as exc:
        message = str(exc)
        sys.stderr.write("error: %s\n" % message)
        _write_status(job_dir, REQUIRES_EXIT, message)
        return REQUIRES_EXIT
    finally:
        remove_own_code_dir()  # made here, under this pid: the child launcher leaves it


if __name__ == "__main__":  # `python interpreter.py --spec …`: run as the zip's entry runs it, from this folder
    import runpy

    _folder = os.path.dirname(os.path.abspath(__file__))
    sys.exit(runpy.run_path(os.path.join(_folder, "node_entry.py"))["run_from_folder"](_folder))
