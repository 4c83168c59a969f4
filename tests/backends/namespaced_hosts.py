"""Several "hosts" on one machine for the multi-host tests.

Each host is one holder process in its own network, UTS and mount namespace: its own IP on
a private /24 that exists only inside these namespaces, its own hostname, its own ``/tmp``
(paths under ``/tmp`` that every host must see are bound back in first). The hosts are
joined by a bridge inside a "switch" namespace of its own: the root namespace gets no
interface, address or route, and no namespace has a default route. Everything "on a host"
runs through ``nsenter -t <holder> -n -u -m``. Everything is stopped by PID: the processes
``ip netns pids`` lists in these namespaces, then the holders; then the namespaces go.

Needs root, ``ip`` (iproute2), ``nsenter``/``unshare`` (util-linux) and the veth and bridge
drivers; :func:`unavailable` says why not, for a clean skip.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

# bash run by a holder: its namespaces are the host; it mounts what the host needs and sleeps.
# A fresh sysfs for the host's network namespace, with /sys/fs/cgroup moved back over it
# (slurmd refuses to start without the cgroup mounts); /etc/hosts of the cluster; a node-local
# /tmp with the shared paths under /tmp bound back in at the same place.
HOLDER = r"""set -eu
h=$1 base=$2 nt=$3 expose=$4 reveal=$5
exec 3>"$base/run/$h.holder.tmp"  # opened now: $base may be hidden once /tmp is the host's own
hostname "$h"
# a directory closed to other users (e.g. /root holding the Python install) is replaced on
# this host by a stand-in that others may traverse, holding only the given children
for spec in $reveal; do
  dir=${spec%%=*}; kids=${spec#*=}; stand="$base/nodes/$h/reveal$dir"
  mkdir -p "$stand"; chmod 711 "$stand"
  for kid in $(echo "$kids" | tr , ' '); do mkdir -p "$stand/$kid"; mount --bind "$dir/$kid" "$stand/$kid"; done
  mount --rbind "$stand" "$dir"
done
mkdir -p "$base/nodes/$h/cg"
mount --rbind /sys/fs/cgroup "$base/nodes/$h/cg"
mount -t sysfs "sysfs-$h" /sys
mount --move "$base/nodes/$h/cg" /sys/fs/cgroup
mount --bind "$base/etc/hosts" /etc/hosts
mount -t tmpfs -o size=256m,mode=1777 "shm-$h" /dev/shm
for p in $expose; do
  case "$p" in /tmp/*) r=${p#/tmp/}; mkdir -p "$nt/$r"; mount --bind "$p" "$nt/$r";; esac
done
mount --rbind "$nt" /tmp
echo $$ >&3; exec 3>&-
exec -a "netns-holder-$h" sleep infinity
"""


def closed_ancestors(paths: list[str]) -> dict[str, list]:
    """``{dir: [child, ...]}``: the directories on the way to *paths* that other users cannot
    traverse, with the children of each the paths go through (for ``Hosts(reveal=...)``)."""
    out: dict[str, list] = {}
    for path in paths:
        parts = Path(os.path.realpath(path)).parts
        for i in range(1, len(parts) - 1):
            d = os.path.join(*parts[: i + 1])
            if not os.stat(d).st_mode & 0o001:
                kids = out.setdefault(d, [])
                if parts[i + 1] not in kids:
                    kids.append(parts[i + 1])
                break  # one closed directory per path (what a root-installed Python has)
    return out


def unavailable() -> str | None:
    """Why hosts in namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "hosts in network namespaces need root"
    for tool in ("ip", "nsenter", "unshare", "setsid"):
        if shutil.which(tool) is None:
            return f"'{tool}' is missing (apt-get install iproute2 util-linux)"
    probe = f"sfprobe{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    try:
        link = subprocess.run(["ip", "-n", probe, "link", "add", "br0", "type", "bridge"], capture_output=True, text=True)
        if link.returncode != 0:
            return f"no bridge in a network namespace: {link.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def stop_pids(pids: list[int], grace: float) -> None:
    """SIGTERM *pids*, SIGKILL what is left after *grace* seconds (zombies count as gone)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            if _alive(pid):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not any(_alive(p) for p in pids):
            return


class Hosts:
    """Hosts in namespaces, by hostname; ``up()`` makes them, ``down()`` removes everything."""

    def __init__(self, base: Path, hosts: dict[str, str], expose: dict[str, list], tag: str = "",
                 reveal: dict[str, list] | None = None) -> None:
        self.base = Path(base)
        self.ips = dict(hosts)  # hostname -> IP on the private /24
        # host -> the paths under /tmp it sees at the same place (its /tmp is otherwise its own)
        self.expose = {h: [str(p) for p in expose.get(h, ())] for h in hosts}
        # closed directory -> the children other users may reach through it on every host
        self.reveal = dict(reveal or {})
        self.tag = tag or secrets.token_hex(3)  # namespace names are this machine's; hostnames are the hosts'
        self.switch = f"sf{self.tag}-sw"
        self.netns = {h: f"sf{self.tag}-{h}" for h in hosts}
        self.holders: dict[str, int] = {}

    # -- up --------------------------------------------------------------------------------

    def up(self) -> "Hosts":
        (self.base / "run").mkdir(parents=True, exist_ok=True)
        (self.base / "etc").mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost"] + [f"{ip} {h}" for h, ip in self.ips.items()]
        (self.base / "etc" / "hosts").write_text("\n".join(lines) + "\n")
        self._ip("netns", "add", self.switch)
        self._ip("-n", self.switch, "link", "set", "lo", "up")
        self._ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        self._ip("-n", self.switch, "link", "set", "br0", "up")
        for i, (h, ip) in enumerate(self.ips.items()):
            ns = self.netns[h]
            self._ip("netns", "add", ns)
            self._ip("-n", self.switch, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            self._ip("-n", self.switch, "link", "set", f"v{i}", "master", "br0", "up")
            self._ip("-n", ns, "link", "set", "lo", "up")
            self._ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            self._ip("-n", ns, "link", "set", "eth0", "up")
        for h in self.ips:
            self._start_holder(h)
        return self

    def _ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)

    def _start_holder(self, h: str) -> None:
        nt = self.node_tmp(h)
        nt.mkdir(parents=True, exist_ok=True)
        nt.chmod(0o1777)
        log = open(self.base / "run" / f"holder-{h}.log", "ab")
        subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.netns[h]}", "unshare", "--uts", "--mount", "--propagation", "private",
             "--", "bash", "-c", HOLDER, "holder", h, str(self.base), str(nt), " ".join(self.expose[h]),
             " ".join(f"{d}={','.join(kids)}" for d, kids in self.reveal.items())],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        log.close()
        pid_file = self.base / "run" / f"{h}.holder.tmp"  # written once the host is set up
        deadline = time.monotonic() + 10
        while not (pid_file.exists() and pid_file.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not (pid_file.exists() and pid_file.read_text().endswith("\n")):
            raise RuntimeError(f"host {h} did not come up: {(self.base / 'run' / f'holder-{h}.log').read_text()}")
        self.holders[h] = int(pid_file.read_text())

    # -- use ------------------------------------------------------------------------------

    def node_tmp(self, h: str) -> Path:
        """Host *h*'s ``/tmp``, as seen from the root namespace."""
        return self.base / "nodes" / h / "tmp"

    def enter(self, h: str, argv: list[str]) -> list[str]:
        """*argv* as a command run on host *h*."""
        return ["nsenter", "-t", str(self.holders[h]), "-n", "-u", "-m", "--wd=/", "--", *argv]

    def run(self, h: str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 120)
        return subprocess.run(self.enter(h, argv), **kwargs)

    def pids(self, h: str) -> list[int]:
        """The live processes in host *h*'s network namespace (its holder too)."""
        out = subprocess.run(["ip", "netns", "pids", self.netns[h]], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split() if p.isdigit() and _alive(int(p))]

    # -- down -----------------------------------------------------------------------------

    def down(self, late: tuple = (), grace: float = 3.0) -> None:
        """Stop every process on the hosts by PID (those whose command line holds one of *late*
        after the others), then the holders, then delete the namespaces."""
        everything = {h: self.pids(h) for h in self.ips}
        holders = set(self.holders.values())
        rest = [p for pids in everything.values() for p in pids if p not in holders]
        last = [p for p in rest if any(word in _cmdline(p) for word in late)]
        stop_pids([p for p in rest if p not in last], grace)
        stop_pids(last, grace)
        stop_pids(sorted(holders), grace)
        for ns in [*self.netns.values(), self.switch]:
            if Path("/run/netns", ns).exists():
                for pid in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
                    stop_pids([int(pid)], 1.0)
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
