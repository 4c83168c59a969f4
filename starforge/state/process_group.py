"""Plugin code run on the laptop, in a process group of its own that ends with it.

``forge prep`` and ``forge plan`` start plugin code in a child process. Whatever that code
starts (a forked helper, a pool worker, a sleeping grandchild) is in the child's process
group, which these helpers end as a whole once the child is done: nothing the plugin
started outlives the command, and the command does not wait for a process that still
holds its output pipe. A process that leaves the group on purpose (``setsid``) is not
followed: the command stops reading a pipe it holds shortly after the child ended.

Laptop side. Standard library only.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import threading
import time

LINGER = 1.0  # seconds a pipe is still read once the child ended and its group was ended


def end_group(proc: subprocess.Popen) -> None:
    """Kill every process left in *proc*'s process group (started with ``start_new_session``)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def read_until_done(proc: subprocess.Popen, fd: int, on_data, *, done=lambda: False) -> None:
    """Read *fd* (a pipe the child's group writes) into ``on_data(bytes)`` until its end, or
    until ``done()`` says the last thing was read, or until the child has ended and the pipe
    stayed quiet for :data:`LINGER` seconds after its group was ended."""
    ended_at = None
    while not done():
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            on_data(chunk)
            continue
        if proc.poll() is None:
            continue
        if ended_at is None:
            end_group(proc)  # whatever the plugin left behind holds the pipe no more
            ended_at = time.monotonic()
        elif time.monotonic() - ended_at > LINGER:
            return


def run_in_group(argv: list, *, cwd, env: dict) -> tuple[int, bytes]:
    """Run *argv* in a new process group, stdout and stderr together; return its exit code
    and output once it ended, with every process it left in its group ended too."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    assert proc.stdout is not None
    chunks: list = []
    fd = proc.stdout.fileno()
    reader = threading.Thread(target=read_until_done, args=(proc, fd, chunks.append), daemon=True)
    try:
        reader.start()
        code = proc.wait()
    finally:
        end_group(proc)
    reader.join(LINGER + 1)
    if not reader.is_alive():  # else a process that left the group still holds the pipe: left to it
        proc.stdout.close()
    return code, b"".join(chunks)
