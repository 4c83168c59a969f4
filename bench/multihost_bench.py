"""`forge submit --backend ray` against `ray job submit` on a real two-host Ray cluster.

One Ray cluster of two hosts (a head host and a worker host) plus a "laptop" host where both
command lines run, each host in its own network, UTS and mount namespace (the multi-host
tests' ``namespaced_hosts.Hosts``; everything stopped by PID at the end). Both sides ship
the same plugin to the same job:

- ``forge``: ``forge submit`` of an experiment locked to the ``mark-worker`` plugin (the
  backend tests' plugin: it wraps ``workload.algo.tag``), ``backend: ray``;
- ``ray``: ``ray job submit`` the way Ray users ship a patch: the plugin's package in
  ``runtime_env.py_modules``, the workload in ``runtime_env.working_dir``, the patch applied
  by ``runtime_env.worker_process_setup_hook``.

Both packages are cold in every run: each run writes fresh content into the workload (and
the Ray side's plugin package), so neither side finds its package in Ray's cache (forge's
package holds the job's id anyway). The job places one actor on the worker host
(``resources={"node_bn1": ...}``), then a second one (a later worker of the job on that
host); each constructor prints a line carrying its wall-clock time (all hosts share this
machine's clock). Per run the bench records:

- ``start``: just before the command line is started;
- ``accepted``: the job's ``start_time`` in the Ray Jobs API (when the head accepted it);
- ``entry``: when the job's entrypoint command started (Ray's job supervisor starts it:
  forge's launcher, or the plain ``python``), from ``/proc``;
- ``python``: when the driver's process was created, from ``/proc`` (an ``exec`` keeps that
  time: where the entrypoint's first process ends up running the driver, as on both sides
  here, it equals ``entry``, and ``python -> driver`` is all of the entrypoint's start);
- ``driver``: when the job's entrypoint module began (its first line);
- ``worker``: when the actor's worker process on the worker host started, from ``/proc``;
- ``line``: the time in the actor's first line, with the worker process's CPU time then
  (near its age when the worker's start is work, not waiting).

Pairs run interleaved, the order alternating. Printed: the medians of both sides and the two
ratios ``forge / ray`` (median and quartiles of the per-pair ratios) for start -> line and
accepted -> line; goal <= 1.0 for both.

Then (unless ``--no-fileops``) it counts, with ``strace`` attached to the worker host's raylet (and
every process it starts), the file-system calls of the job's first worker processes on the
worker host up to the actor's first line: a bare job (no plugin), the Ray way above, and
forge with a plugin of 1, 20 and 200 files.

Usage (root: the hosts are network namespaces)::

    flock LOCK python bench/multihost_bench.py --pairs 12     # --pairs 0: only the file calls
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "backends"))
from conftest import MARK_PLUGIN, WORKLOAD, write_tree  # noqa: E402
from namespaced_hosts import Hosts, unavailable  # noqa: E402

BIN = Path(sys.executable).parent
NET = "10.215.0"
HEAD, WORKER, LAPTOP = "bh", "bn1", "bc"
IPS = {HEAD: f"{NET}.20", WORKER: f"{NET}.21", LAPTOP: f"{NET}.22"}
DASHBOARD = f"http://{IPS[HEAD]}:8265"

# The job: the actor on the worker host prints its line in its constructor.
BENCH_JOB = '''\
import os
import socket
import sys
import time

T0 = time.time()


def age(pid="self"):
    """Seconds since process *pid* started (its exec or fork), from /proc."""
    with open("/proc/uptime") as f:
        up = float(f.read().split()[0])
    with open("/proc/%s/stat" % pid) as f:
        start = int(f.read().rsplit(")", 1)[1].split()[19])
    return up - start / os.sysconf("SC_CLK_TCK")


def entry_age():
    """Age of the job's entrypoint command: this process's oldest ancestor below Ray's job
    supervisor (forge's launcher, or the shell or python of a plain entrypoint)."""
    pid = os.getpid()
    while True:
        with open("/proc/%d/stat" % pid) as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open("/proc/%d/cmdline" % ppid, "rb") as f:
            if b"JobSupervisor" in f.read() or ppid <= 1:
                return age(pid)
        pid = ppid


DRIVER_AGE, ENTRY_AGE = age(), entry_age()

import ray

from workload import algo

print("BENCH-DRIVER %.6f %.3f %.3f" % (T0, DRIVER_AGE, ENTRY_AGE), flush=True)
MARK = "/nonexistent-bench-mark"


@ray.remote(num_cpus=0)
class Probe:
    def __init__(self, mark):
        os.path.exists(mark)  # a marker in strace's output: the file calls before it are the start-up's
        # the process's CPU time too (kept across exec): near its age when the start is work, not waiting
        print("BENCH-LINE %.6f %s %s %.3f %.3f" % (time.time(), socket.gethostname(), algo.tag(), age(), time.process_time()),
              flush=True)

    def tag(self):
        return algo.tag()


def main():
    ray.init()
    tags = []
    for _ in range(2 if "--two" in sys.argv else 1):  # a second actor: a worker of a job already started there
        probe = Probe.options(resources={"node_bn1": 0.01}).remote(MARK)
        tags.append(ray.get(probe.tag.remote(), timeout=300))
    print("BENCH-TAGS " + " ".join(tags), flush=True)
    sys.exit(0 if all(t.startswith("plain:" if "--plain" in sys.argv else "patched:") for t in tags) else 3)


if __name__ == "__main__":
    main()
'''

# The same patch as mark-worker, as a Ray user writes it: a module shipped in py_modules whose
# function Ray runs in every worker process (worker_process_setup_hook).
RAY_HOOK = '''\
"""Prefix workload.algo.tag() with "patched", in every Ray worker process."""


def setup():
    from workload import algo

    original = algo.tag

    def tag():
        return "patched:" + original()

    algo.tag = tag
'''


def ray_env(home: Path) -> list[str]:
    """The environment of `ray start` on a host (as the multi-host Ray tests start it)."""
    return ["env", "-u", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "-u", "RAY_ADDRESS", "-u", "RAY_AUTH_TOKEN",
            "-u", "PYTHONPATH", "RAY_USAGE_STATS_ENABLED=0", "RAY_AUTH_MODE=disabled", f"HOME={home}",
            "RAY_raylet_start_wait_time_s=180", "RAY_gcs_server_request_timeout_seconds=120",
            f"PATH={BIN}:/usr/local/bin:/usr/bin:/bin"]  # fmt: skip


def start_cluster(base: Path) -> Hosts:
    home = base / "home"
    home.mkdir()
    hosts = Hosts(base, IPS, {HEAD: [], WORKER: [], LAPTOP: [str(base)]}).up()
    common = ["--num-cpus", "1", "--object-store-memory", "100000000", "--temp-dir", "/tmp/ray", "--disable-usage-stats"]
    for host, args in (
        (HEAD, ["--head", "--node-ip-address", IPS[HEAD], "--port", "6379", "--dashboard-host", IPS[HEAD],
                "--dashboard-port", "8265", "--include-dashboard", "true", "--resources", '{"node_bh": 1}']),
        (WORKER, ["--address", f"{IPS[HEAD]}:6379", "--node-ip-address", IPS[WORKER], "--resources", '{"node_bn1": 1}']),
    ):  # fmt: skip
        started = hosts.run(host, [*ray_env(home), str(BIN / "ray"), "start", *args, *common], timeout=240)
        if started.returncode != 0:
            raise SystemExit(f"ray start on {host} failed:\n{(started.stdout + started.stderr)[-3000:]}")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if api(hosts, "nodes") == 2:
            return hosts
        time.sleep(0.5)
    raise SystemExit("the Ray cluster did not reach 2 alive nodes")


# run on the laptop host: a question to the Jobs API, answered as one JSON value
API = """
import json, sys, urllib.request
what, arg = sys.argv[1], sys.argv[2]
base = "%s"
def get(path):
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return json.load(r)
if what == "nodes":
    try:
        nodes = get("/api/v0/nodes?limit=100")["data"]["result"]["result"]
    except (OSError, ValueError, KeyError):
        nodes = []
    print(sum(1 for n in nodes if n.get("state") == "ALIVE"))
elif what == "job":
    print(json.dumps(get("/api/jobs/" + arg)))
elif what == "find":
    jobs = get("/api/jobs/")
    print(json.dumps([j for j in jobs if (j.get("metadata") or {}).get("forge_job_id") == arg]))
elif what == "logs":
    print(json.dumps(get("/api/jobs/" + arg + "/logs")["logs"]))
""" % DASHBOARD


def api(hosts: Hosts, what: str, arg: str = "-"):
    out = hosts.run(LAPTOP, [str(BIN / "python"), "-c", API, what, arg], timeout=60)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout)


def client_env() -> dict:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    for var in ("FORGE_RAY_ADDRESS", "FORGE_RAY_TOKEN", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS",
                "PYTHONPATH"):
        env.pop(var, None)
    return env


def publish(registry: str, src: Path, files: int) -> None:
    """``tester/mark-worker`` with *files* files in all (the extra ones are never imported)."""
    from starforge.registry.factory import open_registry
    from starforge.registry.publish import publish_plugin

    if src.exists():
        return  # published before in this run
    write_tree(src, MARK_PLUGIN)
    for i in range(files - 2):  # plugin.yaml and mark_worker.py are two
        (src / "extra" / f"m{i:03d}.py").parent.mkdir(exist_ok=True)
        (src / "extra" / f"m{i:03d}.py").write_text(f"VALUE = {i}\n")
    yaml = (src / "plugin.yaml").read_text().replace("version: 1.0.0", f"version: 1.0.{files}")
    (src / "plugin.yaml").write_text(yaml)
    publish_plugin(src, open_registry(registry), "tester")


def make_forge_experiment(base: Path, registry: str, files: int, name: str, args: str = "") -> Path:
    import yaml

    from starforge.experiment.config import load_experiment
    from starforge.experiment.lock import lock_experiment
    from starforge.registry.factory import open_registry

    root = base / name
    write_tree(root, WORKLOAD)
    (root / "workload" / "bench_job.py").write_text(BENCH_JOB)
    doc = {"schema": "forge/job/v1", "name": name, "entrypoint": f"python -m workload.bench_job{args}",
           "plugins": [f"tester/mark-worker@1.0.{files}"], "config": {"mark": {"label": "patched"}},
           "backend": "ray", "registry": registry, "ray": {"address": DASHBOARD}}  # fmt: skip
    (root / "forge.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    lock_experiment(load_experiment(root), open_registry(registry))
    return root


def make_ray_side(base: Path) -> tuple[Path, Path]:
    """The Ray user's working directory (the workload) and py_modules package (the patch)."""
    work, plug = base / "ray-work", base / "ray-plugin" / "markhook"
    write_tree(work, {k: v for k, v in WORKLOAD.items() if k.startswith("workload/")})
    (work / "workload" / "bench_job.py").write_text(BENCH_JOB)
    plug.mkdir(parents=True, exist_ok=True)
    (plug / "__init__.py").write_text(RAY_HOOK)
    return work, plug


def freshen(*dirs: Path) -> None:
    """New content in each directory: its package is new to Ray's cache."""
    for d in dirs:
        (d / "bench_nonce.py").write_text(f"NONCE = {secrets.token_hex(16)!r}\n")


def ray_command(work: Path, plug: Path | None, sid: str, args: tuple = ()) -> list[str]:
    runtime_env: dict = {"working_dir": str(work)}
    if plug is not None:
        runtime_env.update(py_modules=[str(plug)], worker_process_setup_hook="markhook.setup")
    return [str(BIN / "ray"), "job", "submit", "--address", DASHBOARD, "--submission-id", sid,
            "--runtime-env-json", json.dumps(runtime_env), "--", "python", "-m", "workload.bench_job", *args]  # fmt: skip


def run_side(hosts: Hosts, side: str, argv: list[str], cwd: Path, expect: str = "patched:") -> dict:
    """Run one command line on the laptop host; return its times (seconds since the epoch)."""
    start = time.time()
    done = subprocess.run(hosts.enter(LAPTOP, ["env", f"--chdir={cwd}", *argv]), env=client_env(),
                          capture_output=True, text=True, timeout=600)
    ended = time.time()
    out = done.stdout + done.stderr
    line = re.search(r"BENCH-LINE (\d+\.\d+) (\S+) (\S+) (\S+)", out)
    driver = re.search(r"BENCH-DRIVER (\d+\.\d+) (\S+) (\S+)", out)
    if done.returncode != 0 or line is None or driver is None:
        raise SystemExit(f"{side}: exit {done.returncode}, no actor line:\n{out[-4000:]}")
    host, tag = line.group(2), line.group(3)
    if host != WORKER or not tag.startswith(expect):
        raise SystemExit(f"{side}: the actor ran on {host} with tag {tag}, not on {WORKER} {expect}\n{out[-3000:]}")
    if side.startswith("forge"):
        [info] = api(hosts, "find", json.loads(done.stdout)["id"])
    else:
        info = api(hosts, "job", argv[argv.index("--submission-id") + 1])
    # entry: when the job's entrypoint command started (forge's launcher, or the plain
    # entrypoint); python: when the driver's interpreter started; driver: when its module began
    # to run; worker: when the actor's worker process started
    t0, driver_age, entry_age = (float(x) for x in driver.groups())
    lines = re.findall(r"BENCH-LINE (\d+\.\d+) \S+ \S+ (\S+) (\S+)", out)
    second = sorted(lines)[1] if len(lines) > 1 else lines[0]  # a later worker of the job on that host
    return {"start": start, "accepted": info["start_time"] / 1000.0, "driver": t0,
            "worker2": float(second[0]) - float(second[1]), "line2": float(second[0]),
            "cpu": float(sorted(lines)[0][2]), "cpu2": float(second[2]),
            "entry": t0 - entry_age, "python": t0 - driver_age,
            "line": float(line.group(1)), "worker": float(line.group(1)) - float(line.group(4)), "ended": ended}  # fmt: skip


def quartiles(values: list) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def bench_pairs(hosts: Hosts, base: Path, pairs: int) -> None:
    registry = str(base / "registry")
    publish(registry, base / "src-2" / "mark-worker", 2)
    exp = make_forge_experiment(base, registry, 2, "forge-exp", " --two")
    work, plug = make_ray_side(base)
    forge = [str(BIN / "forge"), "submit", str(exp), "--json"]
    runs: dict[str, list] = {"forge": [], "ray": []}
    for i in range(pairs + 1):  # the first pair warms the cluster's workers up and is left out
        order = ("forge", "ray") if i % 2 else ("ray", "forge")
        for side in order:
            if side.startswith("forge"):
                freshen(exp / "workload")
                t = run_side(hosts, side, forge, exp)
            else:
                freshen(work / "workload", plug)
                t = run_side(hosts, side, ray_command(work, plug, f"bench-{i}-{secrets.token_hex(3)}", ("--two",)), work)
            if i:
                runs[side].append(t)
            print(f"pair {i} {side}: start->accepted {t['accepted'] - t['start']:.2f} s, accepted->entry "
                  f"{t['entry'] - t['accepted']:.2f} s, entry->python {t['python'] - t['entry']:.2f} s, "
                  f"python->driver {t['driver'] - t['python']:.2f} s, "
                  f"driver->worker {t['worker'] - t['driver']:.2f} s, worker->line {t['line'] - t['worker']:.2f} s, "
                  f"start->line {t['line'] - t['start']:.2f} s", flush=True)  # fmt: skip
    print()
    spans = {"start->accepted": ("start", "accepted"), "accepted->entry": ("accepted", "entry"),
             "entry->python": ("entry", "python"), "python->driver": ("python", "driver"),
             "driver->worker": ("driver", "worker"),
             "worker->line": ("worker", "line"), "2nd actor: worker->line": ("worker2", "line2"),
             "start->line": ("start", "line"), "accepted->line": ("accepted", "line")}
    for name, (a, b) in spans.items():
        f = quartiles([r[b] - r[a] for r in runs["forge"]])
        r = quartiles([x[b] - x[a] for x in runs["ray"]])
        print(f"{name:24s} forge {f[1]:6.2f} s (q1-q3 {f[0]:.2f}-{f[2]:.2f})   ray {r[1]:6.2f} s (q1-q3 {r[0]:.2f}-{r[2]:.2f})")
    for name, key in (("worker's CPU at the line", "cpu"), ("2nd actor: CPU at the line", "cpu2")):
        f = quartiles([r[key] for r in runs["forge"]])
        r = quartiles([x[key] for x in runs["ray"]])
        print(f"{name:24s} forge {f[1]:6.2f} s (q1-q3 {f[0]:.2f}-{f[2]:.2f})   ray {r[1]:6.2f} s (q1-q3 {r[0]:.2f}-{r[2]:.2f})")
    for name, (a, b) in (("start->line", ("start", "line")), ("accepted->line", ("accepted", "line"))):
        ratios = [(f[b] - f[a]) / (r[b] - r[a]) for f, r in zip(runs["forge"], runs["ray"])]
        q1, med, q3 = quartiles(ratios)
        print(f"ratio forge/ray {name:15s} {med:.2f} (q1-q3 {q1:.2f}-{q3:.2f}; min {min(ratios):.2f}, "
              f"max {max(ratios):.2f}; {len(ratios)} pairs; goal <= 1.0)")  # fmt: skip


# strace's syscall names, by what they ask of a file system's metadata
KINDS = {
    "open": ("open", "openat", "openat2", "creat"),
    "stat": ("stat", "lstat", "newfstatat", "statx", "fstatat64", "access", "faccessat", "faccessat2",
             "readlink", "readlinkat", "statfs"),
    "readdir": ("getdents64", "getdents"),
}
LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)")
PATH = re.compile(r'(?:AT_FDCWD, |\d+, )?"([^"]*)"')


def count_calls(trace: Path, mark: str) -> list[dict]:
    """Per process that reached *mark* (an actor's worker): its file calls before the mark,
    by kind, and those naming a path in Ray's unpacked packages (the job's files)."""
    by_pid: dict[str, list] = {}
    marked: list[str] = []
    for raw in trace.read_text(errors="replace").splitlines():
        m = LINE.match(raw)
        if not m:  # a "<... resumed>" line: its call was counted where it started
            continue
        pid, call, rest = m.groups()
        if pid in marked:
            continue
        if mark in rest:
            marked.append(pid)
            continue
        by_pid.setdefault(pid, []).append((call, rest))
    out = []
    for pid in marked:
        calls = by_pid.get(pid, [])
        kinds = {k: sum(1 for c, _ in calls if c in names) for k, names in KINDS.items()}
        kinds["other"] = len(calls) - sum(kinds.values())
        kinds["total"] = len(calls)
        paths = [m.group(1) for _, rest in calls if (m := PATH.match(rest)) and m.group(1)]
        # a relative path is in the worker's working directory: the job's unpacked package
        kinds["job files"] = sum(1 for p in paths if "/runtime_resources/" in p or not p.startswith("/"))
        kinds["plugin files"] = sum(1 for _, rest in calls if "/forge_plugins/" in rest or "/markhook" in rest)
        kinds["failed"] = sum(1 for _, rest in calls if re.search(r"= -1 E", rest))
        out.append(kinds)
    return out


def bench_fileops(hosts: Hosts, base: Path) -> None:
    registry = str(base / "registry")
    work, plug = make_ray_side(base)
    raylet = [p for p in hosts.pids(WORKER) if b"/raylet" in Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0]]
    if len(raylet) != 1 or shutil.which("strace") is None:
        raise SystemExit(f"error: need strace and one raylet on {WORKER} (found {raylet})")
    cases: list[tuple[str, list, Path, str]] = [
        ("bare (no plugin)", ray_command(work, None, "fileops-bare", ("--two", "--plain")), work, "plain:"),
        ("ray: py_modules + hook", ray_command(work, plug, "fileops-ray", ("--two",)), work, "patched:"),
    ]
    for files in (2, 20, 200):
        publish(registry, base / f"src-{files}" / "mark-worker", files)
        exp = make_forge_experiment(base, registry, files, f"fileops-{files}", " --two")
        cases.append((f"forge, plugin of {files} files", [str(BIN / "forge"), "submit", str(exp), "--json"], exp, "patched:"))
    # one warm-up job, untraced: the worker host's first job pays for things no later one does
    freshen(work / "workload")
    run_side(hosts, "warm-up", ray_command(work, None, "fileops-warm", ("--plain",)), work, "plain:")
    print(f"{'job':28s} {'actor':>5s} {'total':>6s} {'open':>5s} {'stat':>5s} {'readdir':>7s} {'other':>5s} "
          f"{'failed':>6s} {'job files':>9s} {'plugin files':>12s}")  # fmt: skip
    for name, argv, cwd, expect in cases:
        freshen(cwd / "workload")
        trace = base / f"trace-{secrets.token_hex(3)}.txt"
        tracer = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=%file,getdents64", "-o", str(trace),
                                   "-p", str(raylet[0])], stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(1.0)  # attached
        try:
            run_side(hosts, name, argv, cwd, expect)
        finally:
            tracer.send_signal(2)
            tracer.wait(timeout=60)
        for i, c in enumerate(count_calls(trace, "/nonexistent-bench-mark"), 1):
            print(f"{name:28s} {i:5d} {c['total']:6d} {c['open']:5d} {c['stat']:5d} {c['readdir']:7d} {c['other']:5d} "
                  f"{c['failed']:6d} {c['job files']:9d} {c['plugin files']:12d}", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--no-fileops", action="store_true", help="leave out the count of the workers' file calls")
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        raise SystemExit(f"error: {reason}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    base = Path(tempfile.mkdtemp(prefix="sfbench", dir="/tmp"))
    base.chmod(0o755)
    os.environ["FORGE_HOME"] = str(base / "forge-home")
    hosts = None
    try:
        t = time.monotonic()
        hosts = start_cluster(base)
        print(f"cluster up in {time.monotonic() - t:.1f} s", flush=True)
        if args.pairs:
            bench_pairs(hosts, base, args.pairs)
        if not args.no_fileops:
            print(flush=True)
            bench_fileops(hosts, base)
    finally:
        if hosts is not None:
            hosts.down(late=("gcs_server",))
        shutil.rmtree(base, ignore_errors=True)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
