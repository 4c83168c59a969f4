"""Real cluster engines for the backend tests, bound to 127.0.0.1 only.

- ``ray_head``: one Ray head for the whole session (``ray start --head`` in its own
  session; stopped by signalling exactly the processes of that session, never ``ray stop``,
  which would kill every Ray process on the host).
- ``slurm_cluster``: munged (own key and socket) + slurmctld + slurmd for a one-node
  cluster whose node is this machine's short hostname at 127.0.0.1; state, spool and logs
  in a temp dir owned by the ``slurm`` user. Stopped by the PIDs the daemons wrote.

A missing binary fails the test when ``CI`` is set and skips it otherwise. The functions
they share with other tests are in tests/support (processes, users, the test workload).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.need import need
from support.processes import descendants, free_port, is_loopback, listeners, session_pids, terminate
from support.users import ordinary_user
from support.workload import MARK_PLUGIN, locked_experiment, write_tree

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
        # A worker that forge's binding check refuses (tests/backends/test_binding.py) exits before
        # it registers, and the raylet holds that worker's start slot for this long (Ray's default
        # 60 s): the next test's job waited it out (57 s of test_credentials' Ray job). A worker of
        # this one-host cluster registers within a few seconds even under load.
        RAY_worker_register_timeout_seconds="20",
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


@pytest.fixture
def slurm_job_env(slurm_env, monkeypatch):
    """Jobs inherit the submitting environment (sbatch --export=ALL): the venv's python3 first on
    PATH, and no FORGE_SLURM_STAGING of the user's."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("FORGE_SLURM_STAGING", raising=False)
    return slurm_env


@pytest.fixture(scope="session")
def sockets():
    """Helpers to inspect the listeners of processes: ``listeners(pids)``, ``is_loopback(addr)``."""
    from types import SimpleNamespace

    return SimpleNamespace(listeners=listeners, is_loopback=is_loopback)


# -- a real experiment: a published plugin, a recipe, a lock --------------------------------


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
