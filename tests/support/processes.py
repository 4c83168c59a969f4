"""The processes and listeners of the clusters the tests start (Ray heads, Slurm daemons):
found by session id or ancestry in ``/proc``, stopped by PID, their sockets listed.

Never ``ray stop`` or a kill by name: other runs on the machine own processes of the same names.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- processes and listeners -----------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name is in parentheses and may contain spaces
    return raw[raw.rindex(")") + 2 :].split()


def session_pids(sid: int) -> list[int]:
    """Live processes whose session id is *sid* (zombies excluded)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields and fields[0] != "Z" and int(fields[3]) == sid:
            out.append(int(entry))
    return out


def descendants(roots: list[int]) -> list[int]:
    """*roots* and every live process below them."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    seen, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo.extend(children.get(pid, []))
    return seen


def is_alive(pid: int) -> bool:
    """Whether *pid* is a live process (a zombie is not)."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def alive(pids: list[int]) -> list[int]:
    """The live processes among *pids*."""
    return [pid for pid in pids if is_alive(pid)]


# A test cluster is thrown away with its temp dir: nothing in it needs an orderly shutdown.
# Ray's raylet and gcs_server take about 10 s to act on SIGTERM, so a longer grace made every
# run 10 s longer per Ray head (charged to whichever test happened to run last).
TEARDOWN_GRACE = 2.0


def terminate(pids: list[int], grace: float = TEARDOWN_GRACE) -> None:
    """SIGTERM *pids*, then SIGKILL whatever is still alive after *grace* seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive(pids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not alive(pids):
            return


def _decode_addr(hex_addr: str) -> str:
    ip_hex, port_hex = hex_addr.split(":")
    raw = bytes.fromhex(ip_hex)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:  # four little-endian 32-bit words
        ip = socket.inet_ntop(socket.AF_INET6, b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
    return f"{ip}:{int(port_hex, 16)}"


def listeners(pids: list[int]) -> list[tuple[int, str, str]]:
    """``(pid, proto, address:port)`` of every listening TCP and bound UDP socket of *pids*."""
    inode_pid = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inode_pid[link[8:-1]] = pid
    found = []
    for proto, state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        try:
            lines = Path(f"/proc/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == state and cols[9] in inode_pid:
                found.append((inode_pid[cols[9]], proto, _decode_addr(cols[1])))
    return found


def is_loopback(addr: str) -> bool:
    host = addr.rsplit(":", 1)[0]
    return host.startswith("127.") or host == "::1" or host.startswith("::ffff:127.")


def kernel_signal_state(signum: int) -> tuple:
    """``(ignored, blocked)``: how the kernel treats *signum* for this process's calling thread,
    from ``/proc/self/status`` (SigIgn, SigBlk) — what a child started now inherits, also when
    the disposition was set outside Python, where ``signal.getsignal`` does not see it."""
    masks = {}
    import threading

    for line in Path(f"/proc/self/task/{threading.get_native_id()}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("SigIgn", "SigBlk"):
            masks[key] = int(value.strip(), 16)
    bit = 1 << (signum - 1)
    return bool(masks.get("SigIgn", 0) & bit), bool(masks.get("SigBlk", 0) & bit)
