"""The ray backend on a real two-host Ray cluster: a head host and a worker host, plus the
"laptop" host forge runs on, each in its own network, UTS and mount namespace
(``namespaced_hosts.py``). Ray runs as an ordinary user, as KubeRay pods do; the hosts share
no file system with the laptop (each has its own ``/tmp``, where Ray keeps everything), so
the job's package and its provenance travel through Ray alone. One job checks everything."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
from namespaced_hosts import Hosts, closed_ancestors, unavailable

pytestmark = pytest.mark.ray

BIN = Path(sys.executable).parent
NET = "10.214.0"
HEAD, WORKER, LAPTOP = "rh", "rn1", "rc"
IPS = {HEAD: f"{NET}.20", WORKER: f"{NET}.21", LAPTOP: f"{NET}.22"}
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
            "code": algo.__file__}


@ray.remote(num_cpus=0)
class Probe:
    def info(self):
        return where("actor")


@ray.remote(num_cpus=0)
def probe():
    return where("task")


def main():
    ray.init()
    out = []
    for host in ("rh", "rn1"):
        actor = Probe.options(resources={"node_" + host: 0.01}).remote()
        out.append(ray.get(actor.info.remote(), timeout=120))
        out.append(ray.get(probe.options(resources={"node_" + host: 0.01}).remote(), timeout=120))
    out.append(where("driver"))
    print("RESULTS " + json.dumps(out), flush=True)


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
    laptop_sees = [str(base), str(tmp_path_factory.getbasetemp())]
    # the Ray hosts see only their own /tmp (and this Python, for the test user, where it is closed)
    python_paths = [sys.prefix, sys.base_prefix]
    hosts = Hosts(base, IPS, {HEAD: [], WORKER: [], LAPTOP: laptop_sees}, reveal=closed_ancestors(python_paths))
    try:
        hosts.up()
        as_user = ["runuser", "-u", other_user.name, "--", *_ray_env(home), str(BIN / "ray"), "start"]
        common = ["--num-cpus", "1", "--object-store-memory", "100000000", "--temp-dir", "/tmp/ray",
                  "--disable-usage-stats"]  # fmt: skip
        # the worker host joins once the head is up (earlier, it finds no head node in the GCS)
        for name, host, args in (
            ("head", HEAD, ["--head", "--node-ip-address", IPS[HEAD], "--port", "6379", "--dashboard-host", IPS[HEAD],
                            "--dashboard-port", "8265", "--include-dashboard", "true", "--resources", '{"node_rh": 1}']),
            ("worker", WORKER, ["--address", f"{IPS[HEAD]}:6379", "--node-ip-address", IPS[WORKER],
                                "--resources", '{"node_rn1": 1}']),
        ):  # fmt: skip
            started = hosts.run(host, [*as_user, *args, *common], timeout=240)
            if started.returncode != 0:
                pytest.fail(f"ray start ({name}) failed ({started.returncode}):\n{(started.stdout + started.stderr)[-3000:]}")
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
    unpacked = list(hosts.node_tmp(WORKER).glob("ray/session_*/runtime_resources/working_dir_files/*/jobspec.json"))
    assert unpacked and all(p.stat().st_uid == other_user.uid for p in unpacked), unpacked

    shown = hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "show", record["id"], "--json"], env=env)
    prov = json.loads(shown.stdout)["provenance"]
    assert set(prov["per_host"]) == {HEAD, WORKER}, prov
    assert prov["per_host"][WORKER]["patched"] >= 2 and prov["per_host"][HEAD]["roles"]["launcher"] == 1, prov
    assert prov["reported_via"] == ["job log"] and prov["from_log"]["refused"] == {}, prov["from_log"]
    text = hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "show", record["id"]], env=env).stdout
    assert f"  host    : {WORKER}: " in text and "reported by the job itself, through its log" in text, text
