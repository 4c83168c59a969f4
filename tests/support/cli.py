"""Run ``forge`` the way a test needs it.

``forge(*args, env=, cwd=)`` runs the command line's own code (``starforge.cli.main.main``)
inside the test process: the arguments, the environment and the working directory the
command sees are the ones given, its stdout and stderr are captured at the file-descriptor
level (so what a child process it starts writes there is captured too), and its exit
(``SystemExit``) becomes the return code. It costs no interpreter start and no imports: use
it where a test checks what forge prints, writes and exits with.

``forge_process(...)`` starts ``python -m starforge`` as a process of its own. Use it where
the test is about the process itself: signals, the environment its children inherit,
start-up imports, the credential shielding of ``/proc/<pid>``, the umask, a job process
that must outlive or be killed with forge.

Everything ``forge`` changes in this process is put back after each in-process call (the
environment, C's environment included, the working directory, the umask, signal
dispositions, whether the process is dumpable, the credential shield's once-per-process
mark, ``sys.path``, the standard streams, warning filters); ``check_restored`` says what
was not, and tests/test_support_cli.py holds the runner to that.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4  # prctl(2)
SHIELD_MARK = "_shielded"  # starforge.state.credentials: set once the process shielded its credentials
FORGE = str(Path(sys.executable).parent / "forge")
DEFAULT_TIMEOUT = 120.0


class InProcessTimeout(BaseException):
    """The in-process command ran longer than its timeout (a BaseException: forge's own
    ``except Exception`` must not turn it into an exit code)."""


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def dumpable() -> int | None:
    """``prctl(PR_GET_DUMPABLE)`` of this process (None where there is no prctl)."""
    try:
        return int(_libc().prctl(PR_GET_DUMPABLE, 0, 0, 0, 0))
    except (OSError, AttributeError):
        return None


def _signals() -> list:
    return [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]


def c_environ() -> dict:
    """The C library's environment of this process (what a child started without ``env=`` gets)."""
    libc = ctypes.CDLL(None)
    environ = ctypes.POINTER(ctypes.c_char_p).in_dll(libc, "environ")
    out, index = {}, 0
    while environ[index] is not None:
        name, _, value = environ[index].partition(b"=")
        out[os.fsdecode(name)] = os.fsdecode(value)
        index += 1
    return out


def process_state() -> dict:
    """What a command run in this process could change and must leave as it found it."""
    from starforge.state import credentials

    umask = os.umask(0)
    os.umask(umask)
    handlers = {}
    for sig in _signals():
        try:
            handlers[sig] = signal.getsignal(sig)
        except (OSError, ValueError):
            pass
    return {
        "environ": dict(os.environ),
        "c_environ": c_environ(),
        "cwd": os.getcwd(),
        "umask": umask,
        "signals": handlers,
        "dumpable": dumpable(),
        "shield_mark": getattr(credentials, SHIELD_MARK),
        "sys.path": list(sys.path),
        "streams": (sys.stdin, sys.stdout, sys.stderr),
        "argv": list(sys.argv),
        "tempfile.tempdir": tempfile.tempdir,
    }


def restore(state: dict) -> None:
    from starforge.state import credentials

    if dict(os.environ) != state["environ"] or c_environ() != state["c_environ"]:
        os.environ.clear()  # unsetenv for each name: C's environment follows os.environ again
        os.environ.update(state["environ"])
    os.chdir(state["cwd"])
    os.umask(state["umask"])
    for sig, handler in state["signals"].items():
        if signal.getsignal(sig) is not handler and handler is not None:
            signal.signal(sig, handler)
    if state["dumpable"] is not None and dumpable() != state["dumpable"]:
        _libc().prctl(PR_SET_DUMPABLE, state["dumpable"], 0, 0, 0)
    setattr(credentials, SHIELD_MARK, state["shield_mark"])
    sys.path[:] = state["sys.path"]
    sys.stdin, sys.stdout, sys.stderr = state["streams"]
    sys.argv[:] = state["argv"]
    tempfile.tempdir = state["tempfile.tempdir"]


@contextlib.contextmanager
def unshielded():
    """The block runs in a process not yet shielded (dumpable, the shield's mark unset), as a
    fresh ``forge`` process starts; afterwards the process is as it was (a library call of
    an earlier test may have shielded it)."""
    from starforge.state import credentials

    state = process_state()
    try:
        if state["dumpable"] is not None:
            _libc().prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        setattr(credentials, SHIELD_MARK, False)
        yield
    finally:
        restore(state)


def check_restored(before: dict, after: dict) -> list:
    """The names of what differs between two :func:`process_state` snapshots."""
    return [key for key in before if before[key] != after[key]]


@contextlib.contextmanager
def _captured_fds():
    """fd 1 and 2 (and ``sys.stdout``/``sys.stderr`` on them, buffered as a piped process's
    are) go to two temp files; yields ``[stdout bytes, stderr bytes]``, filled on exit."""
    result = [b"", b""]
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    try:
        os.dup2(files[0].fileno(), 1)
        os.dup2(files[1].fileno(), 2)
        # as CPython sets them up for a pipe under a UTF-8 locale: stdout block-buffered
        # (surrogateescape), stderr line-buffered (backslashreplace)
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8",
                                      errors="surrogateescape")
        sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
        try:
            yield result
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        for index, f in enumerate(files):
            f.seek(0)
            result[index] = f.read()
            f.close()


@contextlib.contextmanager
def _deadline(seconds: float | None, args):
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum, frame):
        raise InProcessTimeout(f"forge {' '.join(map(str, args))} did not end within {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def forge(*args, env: dict | None = None, cwd=None, input: str | bytes | None = None,
          timeout: float | None = DEFAULT_TIMEOUT, text: bool = True) -> subprocess.CompletedProcess:
    """``forge ARGS`` run in this process, as ``subprocess.run(..., capture_output=True)`` would
    report it (*env*: the whole environment the command sees, default this one's)."""
    from starforge.cli.main import main

    args = [os.fspath(a) for a in args]
    state = process_state()
    threads = set(threading.enumerate())
    code: object = 0
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        tempfile.tempdir = None  # worked out again from TMPDIR, as in a fresh process
        raw = input.encode() if isinstance(input, str) else (input or b"")
        sys.stdin = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", errors="surrogateescape")
        sys.argv[:] = [FORGE, *args]
        with warnings.catch_warnings(), _captured_fds() as captured, _deadline(timeout, args):
            try:
                code = main(args)
            except SystemExit as exc:
                code = exc.code
            if code is None:
                code = 0
            elif not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
    finally:
        restore(state)
    left = [t for t in threading.enumerate() if t not in threads and t.is_alive()]
    for thread in left:
        thread.join(timeout=5)
    left = [t.name for t in left if t.is_alive()]
    assert not left, f"forge {' '.join(args)} left threads running in the test process: {left}"
    out, err = captured
    if text:
        out, err = out.decode("utf-8"), err.decode("utf-8")
    return subprocess.CompletedProcess([FORGE, *args], int(code), out, err)  # type: ignore[arg-type]


def forge_process(*args, env: dict | None = None, cwd=None, input: str | bytes | None = None,
                  timeout: float | None = DEFAULT_TIMEOUT, text: bool = True) -> subprocess.CompletedProcess:
    """``python -m starforge ARGS`` as a process of its own (same arguments and result as :func:`forge`)."""
    if text and isinstance(input, bytes):
        input = input.decode()
    return subprocess.run([sys.executable, "-m", "starforge", *map(os.fspath, args)], env=env, cwd=cwd, input=input,
                          capture_output=True, text=text, timeout=timeout)


def run_cli(capsys, *args) -> tuple:
    """``forge *args`` as a plain call of ``main`` in this process, its output read from
    pytest's *capsys*: ``(exit code, stdout, stderr)``. Nothing is isolated or put back, as
    :func:`forge` does: for the commands that change no process state (``plugin check``, ``init``)."""
    from starforge.cli.main import main

    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err
