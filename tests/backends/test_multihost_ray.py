"""The ray backend on a real two-host Ray cluster: a head host and a worker host, plus the
"laptop" host forge runs on, each in its own network, UTS and mount namespace
(``namespaced_hosts.py``). Ray runs as an ordinary user, as KubeRay pods do; the hosts share
no file system with the laptop (each has its own ``/tmp``, where Ray keeps everything), so
the job's package and its provenance travel through Ray alone. One job checks everything."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from namespaced_hosts import Hosts, closed_ancestors, unavailable

pytestmark = pytest.mark.ray

BIN = Path(sys.executable).parent
NET = "10.214.0"
HEAD, WORKER, LAPTOP, LATE = "rh", "rn1", "rc", "rn2"
# LATE: a worker host whose Ray node is started only while a job runs
IPS = {HEAD: f"{NET}.20", WORKER: f"{NET}.21", LAPTOP: f"{NET}.22", LATE: f"{NET}.23"}
DASHBOARD = f"http://{IPS[HEAD]}:8265"

# The job: an actor and a task on each host (custom resources), the driver on the head.
HOSTS_WORKLOAD = '''\
import json
import os
import socket
import sys

import ray

from workload import algo


def where(kind):
    return {"where": kind, "host": socket.gethostname(), "pid": os.getpid(), "tag": algo.tag(),
            "code": algo.__file__, "runtime": sys.modules["starforge"].__file__}


@ray.remote(num_cpus=0)
class Probe:
    def info(self):
        return where("actor")


@ray.remote(num_cpus=0)
def probe():
    return where("task")


def main():
    ray.init()
    calls = []  # all at once: each needs a worker process of its own, started in parallel
    for host in ("rh", "rn1"):
        actor = Probe.options(resources={"node_" + host: 0.01}).remote()
        calls += [actor.info.remote(), probe.options(resources={"node_" + host: 0.01}).remote()]
    out = ray.get(calls, timeout=120)
    out.append(where("driver"))
    sys.stdout.write("RESULTS " + json.dumps(out) + "\\n")  # one write (Ray's log thread prints here too)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
'''


def need(condition: bool, reason: str) -> None:
    if not condition:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


def _ray_env(home: Path) -> list[str]:
    # Not RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (the loopback recipe): on Linux it makes a
    # worker's `ray start --address` abort; inside the namespaces binding is private anyway.
    return ["env", "-u", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "-u", "RAY_ADDRESS", "-u", "RAY_AUTH_TOKEN",
            "-u", "PYTHONPATH", "RAY_USAGE_STATS_ENABLED=0", "RAY_AUTH_MODE=disabled", f"HOME={home}",
            # a loaded machine (several clusters of a test run at once): wait rather than fail
            "RAY_raylet_start_wait_time_s=180", "RAY_gcs_server_request_timeout_seconds=120",
            # A host whose raylet refuses the head's health checks is dead after 3 checks 1 s apart
            # (3 s, not Ray's 15 s: 5 checks 3 s apart). A slow raylet is not: a check fails
            # only when refused or unanswered for 10 s (Ray's timeout, kept).
            "RAY_health_check_period_ms=1000", "RAY_health_check_failure_threshold=3",
            f"PATH={BIN}:/usr/local/bin:/usr/bin:/bin"]  # fmt: skip


# run on the laptop host: how many Ray nodes the dashboard reports alive
ALIVE_NODES = f"""
import json, urllib.request
try:
    with urllib.request.urlopen("{DASHBOARD}/api/v0/nodes?limit=100", timeout=5) as r:
        nodes = json.load(r)["data"]["result"]["result"]
except (OSError, ValueError, KeyError):
    nodes = []
print(sum(1 for n in nodes if n.get("state") == "ALIVE"))
"""


@pytest.fixture(scope="module")
def ray_two_hosts(tmp_path_factory, other_user):
    reason = unavailable()
    need(reason is None, reason or "")
    need((BIN / "ray").exists(), "the 'ray' command is not installed (pip install '.[ray]')")
    base = Path(tempfile.mkdtemp(prefix="sfr2n", dir="/tmp"))
    base.chmod(0o755)
    home = base / "home"
    home.mkdir()
    os.chown(home, other_user.uid, -1)
    # the Ray hosts see only their own /tmp, and this Python: installed on every host, as on a
    # real cluster (kept visible where it lies under /tmp, e.g. a checkout cloned there;
    # revealed to the test user where a directory on its way is closed)
    python_paths = [sys.prefix, sys.base_prefix]
    python_in_tmp = sorted({os.path.realpath(p) for p in python_paths if os.path.realpath(p).startswith("/tmp/")})
    laptop_sees = [str(base), str(tmp_path_factory.getbasetemp()), *python_in_tmp]
    hosts = Hosts(base, IPS, {HEAD: python_in_tmp, WORKER: python_in_tmp, LATE: python_in_tmp, LAPTOP: laptop_sees},
                  reveal=closed_ancestors(python_paths))
    try:
        hosts.up()
        as_user = ["runuser", "-u", other_user.name, "--", *_ray_env(home), str(BIN / "ray"), "start"]
        common = ["--num-cpus", "1", "--object-store-memory", "100000000", "--temp-dir", "/tmp/ray",
                  "--disable-usage-stats"]  # fmt: skip
        # the worker host joins once the head is up (earlier, it finds no head node in the GCS)
        def start(name: str, host: str, args: list) -> None:
            started = hosts.run(host, [*as_user, *args, *common], timeout=240)
            if started.returncode != 0:
                pytest.fail(f"ray start ({name}) failed ({started.returncode}):\n{(started.stdout + started.stderr)[-3000:]}")

        # "survivor": where an actor that must outlive the worker host may run (not the late host)
        def join(host: str) -> None:  # a worker host's Ray node, started on *host*
            resources = {f"node_{host}": 1, **({"survivor": 1} if host == WORKER else {})}
            start("worker", host, ["--address", f"{IPS[HEAD]}:6379", "--node-ip-address", IPS[host],
                                   "--resources", json.dumps(resources)])

        hosts.join = join
        start("head", HEAD, ["--head", "--node-ip-address", IPS[HEAD], "--port", "6379", "--dashboard-host", IPS[HEAD],
                             "--dashboard-port", "8265", "--include-dashboard", "true", "--resources", '{"node_rh": 1, "survivor": 1}'])
        join(WORKER)
        deadline = time.monotonic() + 120
        probe = [str(BIN / "python"), "-c", ALIVE_NODES]
        while time.monotonic() < deadline:
            seen = hosts.run(LAPTOP, probe, timeout=30).stdout.strip()
            if seen == "2":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the Ray cluster did not reach 2 alive nodes (saw {seen!r})")
        yield hosts
    finally:
        # raylets and agents before gcs_server: all at once, gcs_server hangs on SIGTERM
        hosts.down(late=("gcs_server",))
        shutil.rmtree(base, ignore_errors=True)


def test_one_job_patched_on_both_hosts_with_its_params_package_and_provenance_through_ray(
        ray_two_hosts, make_experiment, other_user):
    hosts = ray_two_hosts
    exp = make_experiment("python -m workload.ray_hosts", "ray", {"address": DASHBOARD}, name="two-hosts")
    (exp / "workload" / "ray_hosts.py").write_text(HOSTS_WORKLOAD)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for var in ("FORGE_RAY_ADDRESS", "FORGE_RAY_TOKEN", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    done = hosts.run(LAPTOP, [str(BIN / "forge"), "submit", str(exp), "--json", "--set", "mark.label=per-job"],
                     env=env, timeout=300)
    assert done.stdout.strip(), done.stderr
    record = json.loads(done.stdout)
    log = done.stderr
    assert (record["status"], record["exit_code"]) == ("succeeded", 0), log
    results = json.loads(next(line for line in log.splitlines() if line.startswith("RESULTS "))[8:])
    placed = sorted((r["where"], r["host"]) for r in results)
    assert placed == [("actor", HEAD), ("actor", WORKER), ("driver", HEAD), ("task", HEAD), ("task", WORKER)], placed
    for r in results:  # patched everywhere, with the job's params
        assert r["tag"] == f"per-job:plain:{r['pid']}", r
    # The worker host got the package from Ray (its own /tmp, Ray's working_dir), as the test user.
    on_worker = next(r for r in results if r["host"] == WORKER)
    assert on_worker["code"].startswith("/tmp/ray/"), on_worker
    assert hosts.run(WORKER, ["test", "-e", str(exp)]).returncode == 1  # the laptop's files are not there
    # No node entry ran on the worker host: the job's first process there made the job's code
    # directory in that host's own /tmp (not under Ray's session directory), as the test user,
    # and every process of the job there ran the runtime compiled in it. The head's, made by
    # the node entry, went with the launcher.
    [runtime] = {r["runtime"] for r in results if r["host"] == WORKER}
    assert re.fullmatch(r"/tmp/forge-code-\w{8}/runtime-code\.zip/starforge/__init__\.pyc", runtime), runtime
    code = hosts.node_tmp(WORKER) / runtime.split("/")[2]
    assert (code.stat().st_uid, stat.S_IMODE(code.stat().st_mode)) == (other_user.uid, 0o700)
    assert not list(hosts.node_tmp(HEAD).glob("forge-code-*"))
    unpacked = list(hosts.node_tmp(WORKER).glob("ray/session_*/runtime_resources/working_dir_files/*/jobspec.json"))
    assert unpacked and all(p.stat().st_uid == other_user.uid for p in unpacked), unpacked

    shown = hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "show", record["id"], "--json"], env=env)
    prov = json.loads(shown.stdout)["provenance"]
    assert set(prov["per_host"]) == {HEAD, WORKER}, prov
    assert prov["per_host"][WORKER]["patched"] >= 2 and prov["per_host"][HEAD]["roles"]["launcher"] == 1, prov
    assert prov["reported_via"] == ["job log"] and prov["from_log"]["refused"] == {}, prov["from_log"]
    text = hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "show", record["id"]], env=env).stdout
    assert f"  host    : {WORKER}: " in text and "reported by the job itself, through its log" in text, text


# The job of the fault test: an actor that may restart once, first on the worker host; the
# worker host is killed under it; then a task needing a host that joins only now.
FAULTS_WORKLOAD = '''\
import json
import os
import socket
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from workload import algo


def where(kind):
    return {"where": kind, "host": socket.gethostname(), "pid": os.getpid(), "tag": algo.tag(),
            "runtime": sys.modules["starforge"].__file__}


@ray.remote(num_cpus=0, max_restarts=1, resources={"survivor": 0.01})
class Survivor:
    def info(self):
        return where("actor")


@ray.remote(num_cpus=0)
def probe():
    return where("task")


def main():
    ray.init()
    [worker] = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "node_rn1" in n["Resources"]]
    actor = Survivor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(worker, soft=True)).remote()
    out = [ray.get(actor.info.remote(), timeout=120)]
    open("/tmp/survivor-ready", "w").close()  # tells the test (on the head's /tmp) where the actor ran
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # the worker host is killed now: the actor comes back elsewhere
        try:
            again = ray.get(actor.info.remote(), timeout=30)
        except ray.exceptions.RayError:  # the actor's host is gone, it is restarting
            time.sleep(0.5)
            continue
        if again["host"] != "rn1":
            out.append(again)
            break
        time.sleep(0.5)
    out.append(ray.get(probe.options(resources={"node_rn2": 0.01}).remote(), timeout=240))  # the host joining late
    out.append(where("driver"))
    sys.stdout.write("RESULTS " + json.dumps(out) + "\\n")  # one write (Ray's log thread prints here too)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
'''


def test_a_killed_worker_host_a_restarted_actor_and_a_late_host_all_run_patched(ray_two_hosts, make_experiment, other_user):
    hosts = ray_two_hosts
    exp = make_experiment("python -m workload.ray_faults", "ray", {"address": DASHBOARD}, name="faults")
    (exp / "workload" / "ray_faults.py").write_text(FAULTS_WORKLOAD)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for var in ("FORGE_RAY_ADDRESS", "FORGE_RAY_TOKEN", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    # What a code-directory sweep on the worker host must leave or take: a directory of the
    # test user whose process is gone (taken), one of another user (left), a link to one of
    # the test user's (left, not followed).
    node = f"{WORKER}+{os.stat('/proc/self/ns/pid').st_ino}"
    worker_tmp = hosts.node_tmp(WORKER)
    key = json.dumps({"schema": "forge/code-dir/v1", "pid": 2 ** 22 + 1, "node": node})
    for name, uid in (("forge-code-deadone1", other_user.uid), ("forge-code-another", 0), ("linked-target", other_user.uid)):
        (worker_tmp / name).mkdir(mode=0o700)
        (worker_tmp / name / "forge-code.json").write_text(key)
        for p in (worker_tmp / name, worker_tmp / name / "forge-code.json"):
            os.chown(p, uid, -1)
    (worker_tmp / "forge-code-link").symlink_to("/tmp/linked-target")
    os.lchown(worker_tmp / "forge-code-link", other_user.uid, -1)
    # with the last job's, if one ran: its processes are gone too
    earlier = {p.name for p in worker_tmp.glob("forge-code-*") if not p.is_symlink() and p.stat().st_uid == other_user.uid}
    submit = subprocess.Popen(hosts.enter(LAPTOP, [str(BIN / "forge"), "submit", str(exp), "--json",
                                                   "--set", "mark.label=restarted"]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = hosts.node_tmp(HEAD) / "survivor-ready"
        deadline = time.monotonic() + 180
        while not ready.exists() and submit.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready.exists(), submit.communicate(timeout=60) if submit.poll() is not None else "no actor on the worker host"
        ready.unlink()
        # The job's first process on the worker host swept what no process uses any more.
        left = {p.name for p in worker_tmp.glob("forge-code-*")}
        assert not (earlier & left), (earlier, left)
        assert {"forge-code-another", "forge-code-link"} <= left and (worker_tmp / "linked-target").is_dir(), left
        # The worker host dies: every process on it but the namespace holder, at once; a new
        # worker host joins.
        for pid in hosts.pids(WORKER):
            if pid != hosts.holders[WORKER]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        hosts.join(LATE)
        out, log = submit.communicate(timeout=420)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.communicate()
    record = json.loads(out)
    assert (record["status"], record["exit_code"]) == ("succeeded", 0), log
    first, restarted, late, driver = json.loads(next(line for line in log.splitlines() if line.startswith("RESULTS "))[8:])
    assert (first["host"], restarted["host"], late["host"], driver["host"]) == (WORKER, HEAD, LATE, HEAD), log
    assert restarted["pid"] != first["pid"]
    for r in (first, restarted, late, driver):  # patched again after the restart, and on the late host
        assert r["tag"] == f"restarted:plain:{r['pid']}", r
    # the late host got the package through Ray and made the job's code directory in its own /tmp
    assert re.fullmatch(r"/tmp/forge-code-\w{8}/runtime-code\.zip/starforge/__init__\.pyc", late["runtime"]), late
    assert (hosts.node_tmp(LATE) / late["runtime"].split("/")[2]).is_dir()
    prov = json.loads(hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "show", record["id"], "--json"], env=env).stdout)
    assert {HEAD, LATE} <= set(prov["provenance"]["per_host"]), prov["provenance"]
