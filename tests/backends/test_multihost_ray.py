"""The ray backend on a real two-host Ray cluster: a head host and a worker host, plus the
"laptop" host forge runs on, each in its own network, UTS and mount namespace
(``namespaced_hosts.py``). Ray runs as an ordinary user, as KubeRay pods do; the hosts share
no file system with the laptop (each has its own ``/tmp``, where Ray keeps everything), so
the job's package and its provenance travel through Ray alone. One job checks everything
that job can; a second one, on a second worker host that joins after the first was killed,
checks what needs a worker host alive when the job ends (its outputs manifest)."""

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

from starforge.cluster.provenance_log import MARKER

pytestmark = pytest.mark.ray

BIN = Path(sys.executable).parent
NET = "10.214.0"
HEAD, WORKER, LAPTOP, SECOND = "rh", "rn1", "rc", "rn2"
IPS = {HEAD: f"{NET}.20", WORKER: f"{NET}.21", LAPTOP: f"{NET}.22", SECOND: f"{NET}.23"}
DASHBOARD = f"http://{IPS[HEAD]}:8265"

# The job, which checks everything at once: the worker host's Ray node starts only once the job
# runs; an actor and a task are placed on each host (custom resources), the driver on the head;
# then the worker host is killed under its actor, which may restart once, on the head.
WORKLOAD = '''\
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
            "code": algo.__file__, "runtime": sys.modules["starforge"].__file__}


@ray.remote(num_cpus=0, max_restarts=1)
class Probe:
    def info(self):
        return where("actor")


@ray.remote(num_cpus=0)
def probe():
    return where("task")


def mark(name):  # a file in the head's /tmp, which the test watches
    open("/tmp/" + name, "w").close()


def main():
    ray.init()
    mark("job-running")  # the test starts the worker host's Ray node now
    deadline = time.monotonic() + 240
    worker = []
    while not worker and time.monotonic() < deadline:
        worker = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "node_rn1" in n["Resources"]]
        time.sleep(0.2)
    on_head = Probe.options(resources={"node_rh": 0.01}).remote()
    # "survivor": the head and the worker host have it; first on the worker host
    survivor = Probe.options(resources={"survivor": 0.01},
                             scheduling_strategy=NodeAffinitySchedulingStrategy(worker[0], soft=True)).remote()
    # all at once: each needs a worker process of its own, started in parallel
    calls = [on_head.info.remote(), survivor.info.remote()]
    calls += [probe.options(resources={"node_" + host: 0.01}).remote() for host in ("rh", "rn1")]
    out = ray.get(calls, timeout=120)
    mark("placed")  # the test kills the worker host now: the survivor comes back on the head
    while time.monotonic() < deadline:
        try:
            again = ray.get(survivor.info.remote(), timeout=30)
        except ray.exceptions.RayError:  # its host is gone, it is restarting
            time.sleep(0.5)
            continue
        if again["host"] != "rn1":
            out.append(dict(again, where="restarted"))
            break
        time.sleep(0.5)
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

# run on the laptop host: the pids of the worker host's processes whose provenance record,
# with a patch applied, is in a running job's log (as Ray forwarded it to the driver), read by
# the laptop's own reader of those frames
WORKER_RECORDS = f"""
import json, sys, urllib.request
from starforge.jobs.log_provenance import frames
pids = set()
try:
    with urllib.request.urlopen("{DASHBOARD}/api/jobs/", timeout=5) as r:
        running = [j["submission_id"] for j in json.load(r) if j.get("status") == "RUNNING"]
    for job in running:
        with urllib.request.urlopen("{DASHBOARD}/api/jobs/" + job + "/logs", timeout=5) as r:
            log = json.load(r)["logs"]
        for _, record in frames(log):
            if isinstance(record, dict) and record.get("host") == "{WORKER}" and any(
                    p.get("status") == "applied" for p in record.get("patches", [])):
                pids.add(record.get("pid"))
except (OSError, ValueError, KeyError, AttributeError) as exc:  # (a failed wait shows the last one)
    print(repr(exc), file=sys.stderr)
print(len(pids))
"""


# run on the laptop host: the lines of the running jobs' logs (a failed wait prints them), each
# cut short after its frame's start
JOB_LOG_TAILS = f"""
import json, urllib.request
with urllib.request.urlopen("{DASHBOARD}/api/jobs/", timeout=30) as r:
    running = [j["submission_id"] for j in json.load(r) if j.get("status") == "RUNNING"]
for job in running:
    with urllib.request.urlopen("{DASHBOARD}/api/jobs/" + job + "/logs", timeout=30) as r:
        log = json.load(r)["logs"]
    print(job, len(log.splitlines()), "lines")
    for line in log.splitlines():
        at = line.find("{MARKER}")
        print((line[:at + 40] if at >= 0 else line)[:200])
"""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.fixture(scope="module")
def ray_two_hosts(tmp_path_factory, other_user):
    """The head host's Ray node, up; ``hosts.join(WORKER)`` starts the worker host's."""
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
    hosts = Hosts(base, IPS, {HEAD: python_in_tmp, WORKER: python_in_tmp, SECOND: python_in_tmp, LAPTOP: laptop_sees},
                  reveal=closed_ancestors(python_paths))
    try:
        hosts.up()
        as_user = ["runuser", "-u", other_user.name, "--", *_ray_env(home), str(BIN / "ray"), "start"]
        common = ["--num-cpus", "1", "--object-store-memory", "100000000", "--temp-dir", "/tmp/ray",
                  "--disable-usage-stats"]  # fmt: skip

        def start(name: str, host: str, args: list) -> None:
            started = hosts.run(host, [*as_user, *args, *common], timeout=240)
            if started.returncode != 0:
                pytest.fail(f"ray start ({name}) failed ({started.returncode}):\n{(started.stdout + started.stderr)[-3000:]}")

        def join(host: str) -> None:  # a worker host's Ray node, started on *host* once the head is up
            start("worker", host, ["--address", f"{IPS[HEAD]}:6379", "--node-ip-address", IPS[host],
                                   "--resources", json.dumps({f"node_{host}": 1, "survivor": 1})])

        hosts.join = join
        # "survivor": where an actor that must outlive the worker host may run
        start("head", HEAD, ["--head", "--node-ip-address", IPS[HEAD], "--port", "6379", "--dashboard-host", IPS[HEAD],
                             "--dashboard-port", "8265", "--include-dashboard", "true", "--resources", '{"node_rh": 1, "survivor": 1}'])
        wait_for(hosts, "the head's Ray node alive", ALIVE_NODES, "1")
        yield hosts
    finally:
        # raylets and agents before gcs_server: all at once, gcs_server hangs on SIGTERM
        hosts.down(late=("gcs_server",))
        shutil.rmtree(base, ignore_errors=True)


def frames_seen(lines: list[str]) -> list:
    """For each line holding a provenance frame: its beginning, the record's host, pid, patch
    statuses and written time (what a failed check about them prints)."""
    import base64

    seen = []
    for line in lines:
        at = line.find(MARKER)
        if at >= 0:
            payload = re.match(r"[A-Za-z0-9+/=]*", line[at + len(MARKER):])[0]
            try:
                record = json.loads(base64.b64decode(payload))
                seen.append((line[:at][-60:], record["host"], record["pid"],
                             [p.get("status") for p in record.get("patches", [])], record.get("written")))
            except ValueError as exc:
                seen.append((line[:at][-60:], "undecodable", str(exc)))
    return seen


def worker_lines_shown(hosts: Hosts, env: dict, job_id: str, job_dir: str, prov: dict, log: str) -> str:
    """What a failed check of the worker host's records prints: what the laptop read, the worker
    host's lines of the log as followed (length, start, where frames begin), every frame of that
    log, every frame of the log as read again now, and the records the laptop kept."""
    lines = [line for line in log.splitlines() if f"ip={IPS[WORKER]})" in line]
    shown = [f"{len(line)} {line[:100]!r} frames at {[m.start() for m in re.finditer(re.escape(MARKER), line)]}"
             for line in lines]
    again = hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "logs", job_id], env=env).stdout
    records = [(r.get("host"), r.get("pid"), [p.get("status") for p in r.get("patches", [])], r.get("written"))
               for r in map(json.loads, map(Path.read_text, sorted((Path(job_dir) / "provenance").glob("[!.]*.json"))))]
    return "\n".join([json.dumps(prov.get("per_host")), json.dumps(prov.get("from_log")), *shown,
                      "frames followed:", *map(repr, frames_seen(log.splitlines())),
                      f"frames read again ({len(again)} characters, followed {len(log)}):",
                      *map(repr, frames_seen(again.splitlines())), f"records kept: {records!r}"])


def wait_for(hosts: Hosts, what: str, script: str, expected: str, timeout: float = 120, explain=None) -> None:
    """Run *script* on the laptop host until it prints *expected*; *explain()*, if given, says
    more in the failure."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ran = hosts.run(LAPTOP, [str(BIN / "python"), "-c", script], timeout=30)
        seen = ran.stdout.strip()
        if seen == expected:
            return
        time.sleep(0.5)
    more = explain() if explain else ""
    pytest.fail(f"{what}: not within {timeout:.0f} s (last seen {seen!r}, {ran.stderr[-500:]!r})\n{more}")


def worker_host_state(hosts: Hosts) -> str:
    """What the worker host's processes and Ray's logs there hold (a failed wait prints it)."""
    lines = [f"processes: {[' '.join(Path(a).name for a in _cmdline(pid).split()[:3]) for pid in hosts.pids(WORKER)]}"]
    shown = hosts.run(LAPTOP, [str(BIN / "python"), "-c", JOB_LOG_TAILS], timeout=30)
    lines.append(f"the running jobs' logs: {shown.stdout[-6000:]} {shown.stderr[-500:]}")
    # (not session_latest: a link to the host's own /tmp, elsewhere from here)
    logs = hosts.node_tmp(WORKER) / "ray"
    for path in [*sorted(logs.glob("session_2*/logs/worker-*.out")), *logs.glob("session_2*/logs/log_monitor.*")]:
        text = path.read_text(errors="replace").splitlines()
        frames = frames_seen(text)
        lines.append(f"{path.name}: {len(text)} lines, frames {frames}, last {[t[:160] for t in text[-6:]]}")
    return "\n".join(lines)


def test_one_job_on_two_hosts_runs_patched_everywhere_through_a_late_join_and_a_killed_host(
        ray_two_hosts, make_experiment, other_user):
    hosts = ray_two_hosts
    exp = make_experiment("python -m workload.ray_hosts", "ray", {"address": DASHBOARD}, name="two-hosts")
    (exp / "workload" / "ray_hosts.py").write_text(WORKLOAD)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for var in ("FORGE_RAY_ADDRESS", "FORGE_RAY_TOKEN", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    # What a code-directory sweep on the worker host must take or leave: a directory of the
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
    submit = subprocess.Popen(hosts.enter(LAPTOP, [str(BIN / "forge"), "submit", str(exp), "--json",
                                                   "--set", "mark.label=per-job"]),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def reached(name: str) -> None:  # the job wrote /tmp/<name> on the head
            mark = hosts.node_tmp(HEAD) / name
            deadline = time.monotonic() + 180
            while not mark.exists() and submit.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert mark.exists(), submit.communicate(timeout=60) if submit.poll() is not None else f"no {name}"

        reached("job-running")
        hosts.join(WORKER)  # the worker host joins a running job
        reached("placed")
        # The job's first process on the worker host swept what no process uses any more.
        left = {p.name for p in worker_tmp.glob("forge-code-*")}
        assert "forge-code-deadone1" not in left, left
        assert {"forge-code-another", "forge-code-link"} <= left and (worker_tmp / "linked-target").is_dir(), left
        # Once the records of the worker host's actor and task have reached the job's log, the
        # worker host dies: every process on it but the namespace holder, at once.
        wait_for(hosts, "the worker host's records in the job's log", WORKER_RECORDS, "2",
                 explain=lambda: worker_host_state(hosts))
        for pid in hosts.pids(WORKER):
            if pid != hosts.holders[WORKER]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        out, log = submit.communicate(timeout=420)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.communicate()
    assert out.strip(), log
    record = json.loads(out)
    assert (record["status"], record["exit_code"]) == ("succeeded", 0), log
    results = json.loads(next(line for line in log.splitlines() if line.startswith("RESULTS "))[8:])
    placed = sorted((r["where"], r["host"]) for r in results)
    assert placed == [("actor", HEAD), ("actor", WORKER), ("driver", HEAD), ("restarted", HEAD), ("task", HEAD),
                      ("task", WORKER)], placed
    for r in results:  # patched everywhere, with the job's params; again after the restart
        assert r["tag"] == f"per-job:plain:{r['pid']}", r
    [first] = [r for r in results if r["where"] == "actor" and r["host"] == WORKER]
    [restarted] = [r for r in results if r["where"] == "restarted"]
    assert restarted["pid"] != first["pid"]
    # The worker host, which joined once the job ran, got the package from Ray (its own /tmp,
    # Ray's working_dir), as the test user.
    assert first["code"].startswith("/tmp/ray/"), first
    assert hosts.run(WORKER, ["test", "-e", str(exp)]).returncode == 1  # the laptop's files are not there
    # No node entry ran on the worker host: the job's first process there made the job's code
    # directory in that host's own /tmp (not under Ray's session directory), as the test user,
    # and every process of the job there ran the runtime compiled in it. The head's, made by
    # the node entry, went with the launcher.
    [runtime] = {r["runtime"] for r in results if r["host"] == WORKER}
    assert re.fullmatch(r"/tmp/forge-code-\w{8}/runtime-code\.zip/starforge/__init__\.pyc", runtime), runtime
    code = worker_tmp / runtime.split("/")[2]
    assert (code.stat().st_uid, stat.S_IMODE(code.stat().st_mode)) == (other_user.uid, 0o700)
    assert not list(hosts.node_tmp(HEAD).glob("forge-code-*"))
    # Every process of the job on the worker host is gone (the host was killed): a sweep there,
    # what the next launch or first process of the same user runs, removes the job's code
    # directory (and leaves the other user's and the link).
    sweep = "from starforge.cluster.codedir import sweep_dead_code_dirs; print(sweep_dead_code_dirs('/tmp'))"
    swept = hosts.run(WORKER, ["runuser", "-u", other_user.name, "--", str(BIN / "python"), "-c", sweep])
    assert (swept.stdout.strip(), code.exists()) == ("1", False), swept.stderr
    unpacked = list(worker_tmp.glob("ray/session_*/runtime_resources/working_dir_files/*/jobspec.json"))
    assert unpacked and all(p.stat().st_uid == other_user.uid for p in unpacked), unpacked
    # Ray deletes its copies of the job with a plain rmtree, as the user it runs as: the head's
    # (where the launcher kept the plugin folders read-only while the job ran, and gave them
    # back when it ended) and the worker host's (where no process of the job takes them) go.
    remove = ("import glob, shutil\n"
              "found = glob.glob('/tmp/ray/session_2*/runtime_resources/working_dir_files/starforge_*/')\n"
              "for d in found:\n"
              "    shutil.rmtree(d)\n"
              "print(len(found), len(glob.glob('/tmp/ray/session_2*/runtime_resources/working_dir_files/starforge_*/')))\n")
    for host in (HEAD, WORKER):
        removed = hosts.run(host, ["runuser", "-u", other_user.name, "--", str(BIN / "python"), "-c", remove])
        assert (removed.returncode, removed.stdout.split()[1:]) == (0, ["0"]), (host, removed.stderr[-3000:].splitlines()[-3:])
        assert int(removed.stdout.split()[0]) >= 1, (host, removed.stdout)

    shown = hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "show", record["id"], "--json"], env=env)
    prov = json.loads(shown.stdout)["provenance"]
    assert set(prov["per_host"]) == {HEAD, WORKER}, prov
    assert prov["per_host"][WORKER]["patched"] >= 2, worker_lines_shown(hosts, env, record["id"], record["dir"], prov, log)
    assert prov["per_host"][HEAD]["roles"]["launcher"] == 1, prov
    assert prov["per_host"][HEAD]["patched"] >= 4, prov  # the driver, an actor, a task, the restarted actor
    assert prov["reported_via"] == ["job log"] and prov["from_log"]["refused"] == {}, prov["from_log"]
    text = hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "show", record["id"]], env=env).stdout
    assert f"  host    : {WORKER}: " in text and "reported by the job itself, through its log" in text, text


# The second job: a task on the second worker host writes a file into that host's copy of
# work/ (its working directory is Ray's copy of the job package there), then the driver shuts
# Ray down, which ends the job's workers with SIGKILL.
OUTPUTS_WORKLOAD = '''\
import os
import socket

import ray


@ray.remote(num_cpus=0)
def write():
    name = "work/written-on-" + socket.gethostname() + ".txt"
    with open(name, "w") as f:
        f.write("from a worker")
    return socket.gethostname(), os.path.abspath(name)


def main():
    ray.init()
    print("WROTE", *ray.get(write.options(resources={"node_rn2": 0.01}).remote(), timeout=120), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
'''


def test_a_file_a_worker_wrote_on_another_host_is_listed_with_that_host(ray_two_hosts, make_experiment):
    hosts = ray_two_hosts
    hosts.join(SECOND)
    wait_for(hosts, "the second worker host's Ray node alive", ALIVE_NODES, "2")  # the head and it (rn1 was killed)
    exp = make_experiment("python -m workload.ray_outputs", "ray", {"address": DASHBOARD}, name="outputs")
    (exp / "workload" / "ray_outputs.py").write_text(OUTPUTS_WORKLOAD)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for var in ("FORGE_RAY_ADDRESS", "FORGE_RAY_TOKEN", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        env.pop(var, None)
    submitted = hosts.run(LAPTOP, [str(BIN / "forge"), "submit", str(exp), "--json"], env=env, timeout=300)
    record = json.loads(submitted.stdout)
    assert (record["status"], record["exit_code"]) == ("succeeded", 0), submitted.stderr
    wrote = next(line for line in submitted.stderr.splitlines() if line.startswith("WROTE "))
    host, path = wrote.split()[1:]
    assert host == SECOND and path.startswith("/tmp/ray/") and path.endswith("/work/written-on-rn2.txt"), wrote
    # The worker host's manifest came back through the job's log, was stored under the name
    # forge makes for that host, and says who recorded it.
    [second] = (Path(record["dir"]) / "lineage").glob(f"outputs-a*-{SECOND}.json")
    assert json.loads(second.read_text())["recorded_by"] == "ray worker host"
    assert not (Path(record["dir"]) / "lineage" / ".from-log.json").exists()  # nothing in the log was refused
    listed = hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "outputs", record["id"], "--json"], env=env)
    outputs = json.loads(listed.stdout)
    assert (outputs["hosts"], outputs["problems"]) == ([HEAD, SECOND], []), outputs
    [row] = [r for r in outputs["files"] if r["path"] == path]
    assert (row["host"], row["size"], row["state"]) == (SECOND, len("from a worker"), "missing"), row  # not on the laptop
    # each host's own copy of work/ (the recipe's files, copied at staging) is listed for each host,
    # though Ray unpacked both copies at the same path
    staged = [r for r in outputs["files"] if r["rel"] == "workload/ray_outputs.py"]
    assert sorted(r["host"] for r in staged) == [HEAD, SECOND] and len({r["path"] for r in staged}) == 1, staged
    text = hosts.run(LAPTOP, [str(BIN / "forge"), "jobs", "outputs", record["id"]], env=env).stdout
    assert f"(hosts: {HEAD}, {SECOND})" in text and path in text, text
