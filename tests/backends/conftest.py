"""Real cluster engines for the backend tests, bound to 127.0.0.1 only.

- ``ray_head``: one Ray head for the whole session (``ray start --head`` in its own
  session; stopped by signalling exactly the processes of that session, never ``ray stop``,
  which would kill every Ray process on the host).
- ``slurm_cluster``: munged (own key and socket) + slurmctld + slurmd for a one-node
  cluster whose node is this machine's short hostname at 127.0.0.1; state, spool and logs
  in a temp dir owned by the ``slurm`` user. Stopped by the PIDs the daemons wrote.

A missing binary fails the test when ``CI`` is set and skips it otherwise.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def need(condition: bool, reason: str) -> None:
    """Fail (under CI) or skip (elsewhere) the test when *condition* is false."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


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


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        fields = _stat_fields(pid)
        if fields and fields[0] != "Z":
            out.append(pid)
    return out


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


# -- Ray -------------------------------------------------------------------------------


@dataclass
class RayHead:
    address: str  # dashboard / Jobs API URL
    gcs_address: str
    temp_dir: Path
    sid: int
    token: str  # the head runs with RAY_AUTH_MODE=token
    env: dict = field(default_factory=dict)

    def pids(self) -> list[int]:
        """Every process of this cluster: its session, plus what left it (Ray starts job
        entrypoints in sessions of their own, as children of processes of this one)."""
        return descendants(session_pids(self.sid))


def _ray_bin() -> str | None:
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else shutil.which("ray")


@pytest.fixture(scope="session")
def ray_head():
    ray = _ray_bin()
    need(ray is not None, "the 'ray' command is not installed (pip install '.[ray]')")
    temp_dir = Path(tempfile.mkdtemp(prefix="sfray", dir="/tmp"))  # Ray's socket paths must stay short
    gcs_port, dash_port, client_port, agent_port = (free_port() for _ in range(4))
    env = dict(os.environ)
    env.update(
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # else --node-ip-address 127.0.0.1 is replaced
        RAY_USAGE_STATS_ENABLED="0",
        # The raylet's registration may take longer than Ray's default wait on a loaded machine
        # (several test runs at once): wait, rather than fail every Ray test of the run.
        RAY_raylet_start_wait_time_s="180",
        # Token auth, explicitly: Ray turns it on by itself when ~/.ray/auth_token exists,
        # so the tests pin the mode and the token rather than depend on the home directory.
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=secrets.token_hex(32),
        # The job entrypoints resolve `python3` (the node entry's default) and `python` through the head's PATH.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    for var in ("RAY_ADDRESS", "FORGE_RAY_ADDRESS", "PYTHONPATH", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    cmd = [
        ray, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(gcs_port),
        "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash_port),
        "--ray-client-server-port", str(client_port), "--dashboard-agent-listen-port", str(agent_port),
        "--include-dashboard", "true", "--num-cpus", "2", "--temp-dir", str(temp_dir),
        "--disable-usage-stats", "--object-store-memory", "200000000",
    ]  # fmt: skip
    # A new session: every process of this cluster inherits its session id (or is a child
    # of one that does), which is how teardown finds them, and nothing else.
    proc = subprocess.Popen(
        cmd, env=env, cwd=temp_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    head = RayHead(
        address=f"http://127.0.0.1:{dash_port}", gcs_address=f"127.0.0.1:{gcs_port}", temp_dir=temp_dir, sid=proc.pid,
        token=env["RAY_AUTH_TOKEN"], env=env,
    )
    try:
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            pytest.fail(f"ray start failed ({proc.returncode}):\n{out[-4000:]}")
        _wait_http(f"{head.address}/api/version", 90, temp_dir, head.token)
        yield head
    finally:
        terminate(head.pids())
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_http(url: str, timeout: float, log_dir: Path | None = None, token: str | None = None) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            response = httpx.get(url, timeout=2, trust_env=False, headers=headers)
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}: {response.text[:200]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.3)
    tail = ""
    if log_dir is not None:
        for log in sorted(log_dir.glob("session_2*/logs/dashboard.*")):
            tail += f"\n--- {log.name}\n" + log.read_text(errors="replace")[-2000:]
    pytest.fail(f"{url} did not answer within {timeout:.0f} s: {last}{tail}")


@pytest.fixture
def ray_client(ray_head, monkeypatch):
    """This test's forge talks to the session head: FORGE_RAY_ADDRESS and FORGE_RAY_TOKEN set."""
    monkeypatch.setenv("FORGE_RAY_ADDRESS", ray_head.address)
    monkeypatch.setenv("FORGE_RAY_TOKEN", ray_head.token)
    for var in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(var, raising=False)
    return ray_head


# -- Slurm -----------------------------------------------------------------------------


@dataclass
class SlurmCluster:
    conf: Path
    root: Path
    node: str
    pid_files: list

    @property
    def env(self) -> dict:
        return {"SLURM_CONF": str(self.conf)}

    def pids(self) -> list[int]:
        out = []
        for f in self.pid_files:
            try:
                out.append(int(Path(f).read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                pass
        return out


SLURM_CONF = """\
ClusterName=forgetest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=slurm
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock
CredType=cred/munge
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/log/slurmctld.pid
SlurmdPidFile={root}/log/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ReturnToService=2
MpiDefault=none
MinJobAge=600
NodeName={node} NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def _wait_file(path: Path, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return
        time.sleep(0.1)
    tail = log.read_text()[-3000:] if log.exists() else "(no log)"
    pytest.fail(f"{what} did not start within {timeout:.0f} s:\n{tail}")


@pytest.fixture(scope="session")
def slurm_cluster():
    binaries = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo", "runuser")
    missing = [b for b in binaries if not (shutil.which(b) or Path("/usr/sbin", b).exists())]
    need(not missing, f"Slurm/munge binaries missing: {', '.join(missing)} (apt-get install slurm-wlm munge)")
    need(os.geteuid() == 0, "starting munged and slurmd needs root")
    import pwd

    try:
        munge_user, slurm_user = pwd.getpwnam("munge"), pwd.getpwnam("slurm")
    except KeyError as exc:
        need(False, f"system user missing: {exc}")

    def sbin(name: str) -> str:
        return shutil.which(name) or f"/usr/sbin/{name}"

    node = socket.gethostname().split(".")[0]
    root = Path(tempfile.mkdtemp(prefix="sfslurm", dir="/tmp"))
    root.chmod(0o755)  # slurmctld runs as user slurm and must reach its state dir
    for sub, owner in (("munge", munge_user), ("state", slurm_user), ("log", slurm_user), ("spool", None)):
        (root / sub).mkdir()
        if owner is not None:
            os.chown(root / sub, owner.pw_uid, owner.pw_gid)
    (root / "munge").chmod(0o755)  # munged wants its socket's directory searchable by all
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    os.chown(key, munge_user.pw_uid, munge_user.pw_gid)
    key.chmod(0o400)
    conf = root / "slurm.conf"
    conf.write_text(
        SLURM_CONF.format(node=node, root=root, ctld_port=free_port(), slurmd_port=free_port())
    )
    cluster = SlurmCluster(
        conf=conf,
        root=root,
        node=node,
        pid_files=[root / "munge" / "munged.pid", root / "log" / "slurmctld.pid", root / "log" / "slurmd.pid"],
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        m = root / "munge"
        subprocess.run(
            ["runuser", "-u", "munge", "--", sbin("munged"), f"--socket={m}/munge.sock", f"--key-file={key}",
             f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"],
            check=True, timeout=30, env=env,
        )  # fmt: skip
        _wait_file(m / "munged.pid", 10, "munged", m / "munged.log")
        subprocess.run([sbin("slurmctld"), "-f", str(conf), "-i"], check=True, timeout=30, env=env)
        _wait_file(root / "log" / "slurmctld.pid", 15, "slurmctld", root / "log" / "slurmctld.log")
        subprocess.run([sbin("slurmd"), "-f", str(conf)], check=True, timeout=30, env=env)
        _wait_file(root / "log" / "slurmd.pid", 15, "slurmd", root / "log" / "slurmd.log")
        deadline = time.monotonic() + 30
        state = ""
        while time.monotonic() < deadline:
            r = subprocess.run(
                ["timeout", "5", "sinfo", "-h", "-N", "-o", "%t"], env=env, capture_output=True, text=True
            )
            state = r.stdout.strip()
            if state.startswith("idle"):
                break
            time.sleep(0.3)
        else:
            pytest.fail(f"slurm node not idle within 30 s (state {state!r})")
        yield cluster
    finally:
        terminate(cluster.pids())
        shutil.rmtree(root, ignore_errors=True)


def ordinary_user(name: str):
    """An ordinary Unix user *name* (made with ``useradd`` when missing) and a runner:
    ``user.run("mkdir", path)`` runs a command as that user (``runuser``)."""
    import pwd
    from types import SimpleNamespace

    need(os.geteuid() == 0 and shutil.which("runuser") is not None, "acting as another user needs root and runuser")
    try:
        pwd.getpwnam(name)
    except KeyError:  # another test process may be adding it at the same moment: then it exists after
        made = subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], capture_output=True, text=True)
        try:
            pwd.getpwnam(name)
        except KeyError:
            pytest.fail(f"useradd {name} failed: {made.stderr.strip()}")
    entry = pwd.getpwnam(name)

    def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["runuser", "-u", name, "--", *argv], capture_output=True, text=True, check=check, timeout=60)

    return SimpleNamespace(name=name, uid=entry.pw_uid, run=run)


@pytest.fixture(scope="session")
def other_user():
    """A second Unix user, ``sfother`` (see :func:`ordinary_user`)."""
    return ordinary_user("sfother")


@pytest.fixture(scope="session")
def third_user():
    """Another ordinary user, ``sfthird``, for what two ordinary users do at once."""
    return ordinary_user("sfthird")


@pytest.fixture
def slurm_env(slurm_cluster, monkeypatch):
    """The Slurm client commands of this test talk to the test cluster."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster


@pytest.fixture(scope="session")
def sockets():
    """Helpers to inspect the listeners of processes: ``listeners(pids)``, ``is_loopback(addr)``."""
    from types import SimpleNamespace

    return SimpleNamespace(listeners=listeners, is_loopback=is_loopback)


# -- a real experiment: a published plugin, a recipe, a lock --------------------------------

MARK_PLUGIN = {
    "plugin.yaml": """\
schema: forge/plugin/v1
name: mark-worker
version: 1.0.0
kind: algorithm
entrypoint: mark_worker:install
targets: [workload.algo]
requires:
  core: ">=0.1"
params:
  mark.label: {type: str, default: patched, description: "prefix the patched function adds"}
description: "Prefix workload.algo.tag() with mark.label, in every process of the job"
""",
    "mark_worker.py": '''\
"""mark-worker: prefix workload.algo.tag() with params["mark.label"]."""

from starforge import patching


def install(params):
    label = params.get("mark.label", "patched")

    def tagged(original):
        return label + ":" + original()

    patching.wrap("workload.algo:tag", tagged, when_imported=True)
''',
}

WORKLOAD = {
    "workload/__init__.py": "",
    "workload/algo.py": '''\
import os


def tag():
    return "plain:%d" % os.getpid()
''',
    # Prints which credential and user variables the job's process can see.
    "workload/show_env.py": '''\
import json
import os

NAMES = ["FORGE_REGISTRY_USER", "FORGE_REGISTRY_PASSWORD", "FORGE_KEY_PASSPHRASE", "FORGE_RAY_TOKEN", "WANDB_API_KEY", "HF_TOKEN"]
print("ENV " + json.dumps({n: os.environ.get(n) for n in NAMES}), flush=True)
''',
    # A Ray job: the entrypoint, two tasks and an actor all call the patched function.
    "workload/ray_train.py": '''\
import json
import os
import sys

import ray

from workload import algo


@ray.remote
def task():
    from workload import algo

    return {"where": "task", "tag": algo.tag(), "pid": os.getpid(), "own_hook": os.environ.get("WORKLOAD_HOOK_RAN"),
            "runtime": sys.modules["starforge"].__file__}


@ray.remote
class Actor:
    def tag(self):
        from workload import algo

        return {"where": "actor", "tag": algo.tag(), "pid": os.getpid(), "own_hook": os.environ.get("WORKLOAD_HOOK_RAN"),
                "runtime": sys.modules["starforge"].__file__}


def main():
    kwargs = {}
    if "--own-hook" in sys.argv:
        kwargs["runtime_env"] = {"worker_process_setup_hook": "workload.hooks.mark_process"}
    ray.init(**kwargs)
    results = ray.get([task.remote(), task.remote()])
    actor = Actor.remote()
    results.append(ray.get(actor.tag.remote()))
    # the launcher left the plugin folders read-only for the job
    plugins = os.stat(os.path.join(os.environ["FORGE_JOB_DIR"], "forge_plugins")).st_mode & 0o777
    results.append({"where": "driver", "tag": algo.tag(), "pid": os.getpid(), "own_hook": None, "plugins_mode": plugins})
    # one write: Ray's thread printing the workers' lines into this log could otherwise land
    # between print's two writes (the text, then its newline)
    sys.stdout.write("RESULTS " + json.dumps(results) + "\\n")
    sys.stdout.flush()
    ok = all(r["tag"].startswith("patched:") for r in results)
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
''',
    "workload/hooks.py": '''\
import os


def mark_process():
    os.environ["WORKLOAD_HOOK_RAN"] = str(os.getpid())
''',
    # A plain job (Slurm): the entrypoint and a spawned child process call the patched function.
    "workload/train.py": '''\
import json
import multiprocessing
import os
import socket
import sys

from workload import algo


def child(q):
    from workload import algo

    q.put(algo.tag())


def main():
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    child_tag = q.get(timeout=60)
    p.join()
    slurm = {k: os.environ.get(k) for k in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_NODEID", "SLURM_PROCID")}
    out = {
        "driver": algo.tag(),
        "child": child_tag,
        "host": socket.gethostname(),
        "slurm": slurm,
        "cwd": os.getcwd(),
        "cwd_mode": oct(os.stat(os.getcwd()).st_mode & 0o777),
        "job_dir": os.environ.get("FORGE_JOB_DIR"),
        "job_dir_mode": oct(os.stat(os.environ["FORGE_JOB_DIR"]).st_mode & 0o777),
        "job_dir_uid": os.stat(os.environ["FORGE_JOB_DIR"]).st_uid,
        # where a torchrun-style launcher started this process as one rank of several
        "rank": [os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")],
        # what torchrun's agent adds: the rank of this host's agent, the rendezvous it joined
        "agent": [os.environ.get(k) for k in ("GROUP_RANK", "TORCHELASTIC_RUN_ID", "MASTER_ADDR")],
    }
    # one write: the ranks of one host share this output, and under an unbuffered stdout a
    # print() writes the text and its newline separately, so another rank's line could land between
    sys.stdout.write("RESULTS " + json.dumps(out) + "\\n")
    sys.stdout.flush()
    code = int(os.environ.get("WORKLOAD_EXIT", "0"))
    sys.exit(code if code else (0 if out["driver"].startswith("patched:") and out["child"].startswith("patched:") else 3))


if __name__ == "__main__":
    main()
''',
}


def write_tree(root: Path, files: dict) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture(scope="session")
def plugin_registry(tmp_path_factory):
    """A directory registry holding ``tester/mark-worker@1.0.0``."""
    from starforge.registry.factory import open_registry
    from starforge.registry.publish import publish_plugin

    root = tmp_path_factory.mktemp("backend-registry")
    src = tmp_path_factory.mktemp("mark-worker-src") / "mark-worker"
    write_tree(src, MARK_PLUGIN)
    publish_plugin(src, open_registry(str(root / "registry")), "tester")
    return str(root / "registry")


@pytest.fixture
def forge_home(tmp_path, monkeypatch):
    """Per-test user state (cache, jobs store) under tmp_path."""
    home = tmp_path / "forge-home"
    monkeypatch.setenv("FORGE_HOME", str(home))
    monkeypatch.delenv("FORGE_REGISTRY", raising=False)
    monkeypatch.delenv("FORGE_JOBS_DIR", raising=False)
    return home


def locked_experiment(root: Path, registry: str, entrypoint: str, backend: str, settings: dict | None = None,
                      name: str = "backend-test") -> Path:
    """An experiment at *root* running the test workload with ``tester/mark-worker@1.0.0``,
    locked against *registry* (``FORGE_HOME`` says where forge's cache is)."""
    import yaml

    from starforge.experiment.config import load_experiment
    from starforge.experiment.lock import lock_experiment
    from starforge.registry.factory import open_registry

    write_tree(root, WORKLOAD)
    doc = {
        "schema": "forge/job/v1",
        "name": name,
        "entrypoint": entrypoint,
        "plugins": ["tester/mark-worker@1.0.0"],
        "config": {"mark": {"label": "patched"}},
        "backend": backend,
        "registry": registry,
    }
    if settings:
        doc[backend] = settings
    (root / "forge.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    lock_experiment(load_experiment(root), open_registry(registry))
    return root


@pytest.fixture(scope="session")
def experiment_at():
    """:func:`locked_experiment`, for a fixture wider than one test (``make_experiment`` is per test)."""
    return locked_experiment


@pytest.fixture
def make_experiment(tmp_path, plugin_registry, forge_home):
    """``make(entrypoint, backend, settings) -> experiment dir``, locked against the test registry."""

    def make(entrypoint: str, backend: str, settings: dict | None = None, name: str = "backend-test") -> Path:
        return locked_experiment(tmp_path / name, plugin_registry, entrypoint, backend, settings, name)

    return make


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on."""
    return free_port()
