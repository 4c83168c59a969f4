"""Running an entrypoint as a child process, with the launcher's signals passed on to it.

Standard library only.
"""

from __future__ import annotations

import os
import sys

from .errors import LaunchFailure


def run_child(argv: list[str]):
    """Run a non-Python entrypoint (or one needing its own interpreter) as a child process.

    The child gets the job environment; SIGTERM, SIGINT and SIGHUP sent to the launcher are
    passed on to it. Returns its exit code, 128+N when a signal N ended it, as shells do.
    """
    import signal
    import subprocess

    # The handlers go in before the child starts: a signal that arrives while it starts (the
    # child may already be running its first lines) is held and passed on once it exists,
    # instead of ending the launcher and leaving the child running on its own.
    child = None
    pending: list = []

    def forward(signum, frame) -> None:
        if child is None:
            pending.append(signum)
            return
        try:
            child.send_signal(signum)
        except OSError:
            pass

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup'd stays nohup'd
            previous[signum] = signal.signal(signum, forward)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            child = subprocess.Popen(argv, env=dict(os.environ))
        except OSError as exc:
            code = 126 if isinstance(exc, PermissionError) else 127
            return code, LaunchFailure.entrypoint(code, f"cannot run {argv[0]!r}: {exc}")
        for signum in pending:
            forward(signum, None)
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return (128 - code if code < 0 else code), None
