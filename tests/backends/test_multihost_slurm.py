"""The slurm backend on a real two-host Slurm cluster: a controller, two compute hosts and a
"laptop" host, each in its own network, UTS and mount namespace (its own IP, hostname and
``/tmp``), on one machine (``namespaced_hosts.py``). The job directory is shared (every host
sees the test's temp directory at the same path); each host's ``/tmp``, where the
node-local copy goes, is its own. ``forge`` runs on the laptop host, as a user would."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from namespaced_hosts import Hosts, closed_ancestors, unavailable

pytestmark = pytest.mark.slurm

BIN = Path(sys.executable).parent
NET = "10.213.0"
CTL, N1, N2, LAPTOP = "sfh", "sfn1", "sfn2", "sfl"
# N3, N4: the compute hosts of partition "faults", where the job whose host is killed runs,
# beside the other tests' jobs on N1 and N2
N3, N4 = "sfn3", "sfn4"
IPS = {CTL: f"{NET}.10", N1: f"{NET}.11", N2: f"{NET}.12", LAPTOP: f"{NET}.13", N3: f"{NET}.14", N4: f"{NET}.15"}

# torchrun of a trainer venv (torch, CPU) for the multi-node start: one agent per host, the
# two agents meeting in a c10d rendezvous whose store the first host's agent serves at its
# own address (inside the hosts' namespaces), each agent starting two ranks on its host.
# (through the checkout's link to it: the hosts see the venv where it lies, not a checkout
# under /tmp, which is each host's own)
TORCHRUN = (Path(__file__).resolve().parents[2] / ".venv-trl" / "bin" / "torchrun").resolve()

# The timeouts that decide how soon a killed host's job runs again, as short as Slurm allows
# without mistaking a busy host for a dead one:
# - SlurmdTimeout=10: a host silent this long is DOWN and its job requeued.
# - MessageTimeout=5: a ping to a host whose slurmd is gone fails after this (Slurm retries a
#   refused connection once a second for MessageTimeout, up to 10 s); the host is DOWN after
#   two failed pings, so this, not SlurmdTimeout, set the pace (about 26 s at the default 10).
# - cred_expire=5 (Slurm's smallest): a requeued job is held this long before it may start.
# - sched_interval=1: a held job starts once its hold ends, not at the next periodic pass of
#   the scheduler (every 60 s by default: between 0 and 60 s more, by chance).
# - KillWait=5: a cancelled job's steps get this long between SIGTERM and SIGKILL, the time in
#   which each host's keeper step collects and removes its copy (Slurm's default is 30 s).
CONF = """\
ClusterName=forge2n
SlurmctldHost={ctl}({ctl_ip})
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={base}/munge/munge.sock,cred_expire=5
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={base}/log/jobcomp.txt
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MailProg=/bin/true
StateSaveLocation={base}/state/ctld
SlurmdSpoolDir={base}/state/spool/%n
SlurmctldPidFile={base}/log/slurmctld.pid
SlurmdPidFile={base}/log/slurmd-%n.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd-%n.log
SlurmdTimeout=10
MessageTimeout=5
SchedulerParameters=sched_interval=1
SlurmctldTimeout=10
ReturnToService=2
KillWait=5
MinJobAge=600
NodeName={n1} NodeAddr={n1_ip} NodeHostname={n1} CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName={n2} NodeAddr={n2_ip} NodeHostname={n2} CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName={n3} NodeAddr={n3_ip} NodeHostname={n3} CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName={n4} NodeAddr={n4_ip} NodeHostname={n4} CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={n1},{n2} Default=YES MaxTime=INFINITE State=UP
PartitionName=faults Nodes={n3},{n4} MaxTime=INFINITE State=UP
"""


def need(condition: bool, reason: str) -> None:
    """Skip with *reason* when *condition* is false; under CI (which runs as root) fail instead."""
    if not condition:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@dataclass
class Cluster:
    hosts: Hosts
    base: Path
    conf: Path

    def slurmd_pids(self, host: str) -> list[int]:
        return [p for p in self.hosts.pids(host) if _comm(p) == "slurmd"]

    def start_slurmd(self, host: str) -> None:
        self.hosts.run(host, ["slurmd", "-f", str(self.conf), "-N", host], check=True, env=self.env())

    def env(self, **extra: str) -> dict:
        env = {**os.environ, "SLURM_CONF": str(self.conf), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        env.pop("FORGE_SLURM_STAGING", None)
        # each host's own /tmp, as on a real node (not the suite's TMPDIR, a folder of the machine's /tmp)
        env["TMPDIR"] = "/tmp"
        env.update(extra)
        return env

    def forge(self, *args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
        """``forge ARGS`` on the laptop host."""
        return self.hosts.run(LAPTOP, [str(BIN / "forge"), *args], env=env or self.env(), timeout=timeout)

    def idle_nodes(self, partition: str = "debug") -> int:
        out = self.hosts.run(LAPTOP, ["timeout", "5", "sinfo", "-h", "-N", "-t", "idle", "-p", partition, "-o", "%N"],
                             env=self.env())
        return len(set(out.stdout.split()))


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _wait(what: str, check, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-3000:] if log is not None and log.exists() else ""
    pytest.fail(f"{what} not within {timeout:.0f} s\n{tail}")


@pytest.fixture(scope="module")
def slurm_two_hosts(tmp_path_factory):
    import pwd

    reason = unavailable()
    need(reason is None, reason or "")
    missing = [b for b in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "scontrol", "runuser")
               if not (shutil.which(b) or Path("/usr/sbin", b).exists())]
    need(not missing, f"Slurm/munge binaries missing: {', '.join(missing)} (apt-get install slurm-wlm munge)")
    munge, slurm = pwd.getpwnam("munge"), pwd.getpwnam("slurm")
    base = Path(tempfile.mkdtemp(prefix="sf2n", dir="/tmp"))
    base.chmod(0o755)  # munge and slurm must traverse it
    for sub, owner in (("munge", munge), ("log", slurm), ("state/ctld", slurm),
                       *((f"state/spool/{n}", slurm) for n in (N1, N2, N3, N4))):  # fmt: skip
        (base / sub).mkdir(parents=True)
        os.chown(base / sub, owner.pw_uid, owner.pw_gid)
    os.chown(base / "state", slurm.pw_uid, slurm.pw_gid)
    (base / "munge").chmod(0o755)
    key = base / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    os.chown(key, munge.pw_uid, munge.pw_gid)
    key.chmod(0o400)
    conf = base / "slurm.conf"
    conf.write_text(CONF.format(ctl=CTL, ctl_ip=IPS[CTL], base=base, n1=N1, n2=N2, n3=N3, n4=N4, n1_ip=IPS[N1],
                                n2_ip=IPS[N2], n3_ip=IPS[N3], n4_ip=IPS[N4]))
    # every host sees the state, the tests' temp directories, this Python and the trainer venv
    # torchrun comes from at the same paths
    pythons = [sys.prefix, sys.base_prefix, *([str(TORCHRUN.parents[1])] if TORCHRUN.exists() else [])]
    expose = sorted({str(base), str(tmp_path_factory.getbasetemp()), *map(os.path.realpath, pythons)})
    # ... and an ordinary user reaches them where a folder on the way is closed to others
    hosts = Hosts(base, IPS, {h: expose for h in IPS}, reveal=closed_ancestors(pythons))
    c = Cluster(hosts, base, conf)
    try:
        hosts.up()
        m = base / "munge"
        hosts.run(CTL, ["runuser", "-u", "munge", "--", "munged", f"--socket={m}/munge.sock", f"--key-file={key}",
                        f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed"],
                  check=True)  # fmt: skip
        _wait("munged", lambda: (m / "munged.pid").exists(), 10, m / "munged.log")
        hosts.run(CTL, ["slurmctld", "-i", "-f", str(conf)], check=True, env=c.env())
        ping = lambda: "UP" in hosts.run(LAPTOP, ["timeout", "5", "scontrol", "ping"], env=c.env()).stdout  # noqa: E731
        _wait("slurmctld answering", ping, 30, base / "log" / "slurmctld.log")
        for node in (N1, N2, N3, N4):
            c.start_slurmd(node)
        idle = lambda: c.idle_nodes() == 2 and c.idle_nodes("faults") == 2  # noqa: E731
        _wait("the compute hosts idle", idle, 30, base / "log" / f"slurmd-{N2}.log")
        yield c
    finally:
        # slurmctld's helper slurmscriptd ignores SIGTERM and goes with slurmctld: stopped with it,
        # not before it (else each waited for the whole grace)
        hosts.down(late=("slurmctld", "munged", "slurmscriptd"))
        shutil.rmtree(base, ignore_errors=True)


def _results(log: str) -> list:
    return [json.loads(line[line.index("RESULTS ") + 8:]) for line in log.splitlines() if "RESULTS " in line]


def _records(job_dir: Path) -> list:
    return [json.loads(p.read_text()) for p in sorted((job_dir / "provenance").glob("[!.]*.json"))]


def _submit(cluster: Cluster, exp: Path, *extra: str, env: dict | None = None) -> tuple[dict, str]:
    done = cluster.forge("submit", str(exp), "--json", *extra, env=env)
    assert done.stdout.strip(), done.stderr
    record = json.loads(done.stdout)
    return record, done.stderr


def _show(cluster: Cluster, job_id: str, env: dict | None = None) -> tuple[dict, str]:
    shown = cluster.forge("jobs", "show", job_id, "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    text = cluster.forge("jobs", "show", job_id, env=env)
    return json.loads(shown.stdout), text.stdout


RANKS_PER_HOST = 2
RDZV_ID = "two-hosts"


@pytest.mark.frameworks
def test_both_launch_modes_run_patched_on_both_hosts_each_checking_its_own_copy(slurm_two_hosts, make_experiment):
    cluster = slurm_two_hosts
    need(TORCHRUN.exists(), f"{TORCHRUN.parent.parent.name} is missing (bash .ci/setup creates it)")
    # launch: once, the entrypoint starting one process per host (srun python ...)
    once = make_experiment("srun --ntasks-per-node=1 python -m workload.train", "slurm", {"nodes": 2}, name="once")
    # launch: per-node, the launcher itself on each host, its entrypoint torchrun's multi-node
    # start (the job's Python: the interpreter of torchrun's venv)
    torchrun = (f"{TORCHRUN} --nnodes 2 --nproc-per-node {RANKS_PER_HOST} --rdzv-backend c10d "
                f"--rdzv-endpoint {N1}:29400 --rdzv-id {RDZV_ID} -m workload.train")
    per_node = make_experiment(torchrun, "slurm", {"nodes": 2, "launch": "per-node"}, name="per-node")
    # the two jobs at once (each takes one of the two cores of each host)
    submits = [subprocess.Popen(cluster.hosts.enter(LAPTOP, [str(BIN / "forge"), "submit", str(exp), "--json"]),
                                env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for exp in (once, per_node)]
    try:
        ended = [submit.communicate(timeout=240) for submit in submits]
    finally:
        for submit in submits:
            if submit.poll() is None:
                submit.kill()
                submit.communicate()
    (out, log), (torch_out, torch_log) = ended
    assert out.strip(), log
    record = json.loads(out)
    assert (record["status"], record["exit_code"]) == ("succeeded", 0), log
    results = _results(log)
    assert sorted(r["host"] for r in results) == [N1, N2], log
    for r in results:  # every process on both hosts: the srun task and the child it spawned
        assert r["driver"].startswith("patched:plain:") and r["child"].startswith("patched:plain:"), r
    job_dir = Path(record["dir"])
    records = _records(job_dir)
    verified = sorted(r["host"] for r in records if r["mode"] == "verify-only")
    assert verified == [N1, N2], records  # each host verified its own copy, once: under its own /tmp
    assert all(any(a.startswith("/tmp/starforge-") for a in r["argv"]) for r in records if r["mode"] == "verify-only")
    patched = {(r["host"], r["pid"]) for r in records if any(p["status"] == "applied" for p in r["patches"])}
    assert {r["host"] for r in results} == {h for h, _ in patched}
    # Both hosts' copies (both jobs') were private (/tmp is each host's own) and are gone after the jobs.
    for host in (N1, N2):
        assert not list(cluster.hosts.node_tmp(host).glob("starforge-*")), host
    details, text = _show(cluster, record["id"])
    prov = details["provenance"]
    assert set(prov["per_host"]) == {N1, N2} and prov["missing_hosts"] == [], prov
    assert prov["expected_hosts"] == [N1, N2]
    for host in (N1, N2):
        assert f"  host    : {host}: " in text, text
        assert prov["per_host"][host]["patched"] >= 2, prov["per_host"]  # the srun task and its child
    # each host said it removed its node-local copy
    assert details["node_cleanup"]["attempts"] == [
        {"attempt": 0, "prepared": [N1, N2], "removed": [N1, N2], "not_removed": [], "removed_later_by": {}}]
    assert f"  cleanup : attempt 0: node-local copy removed on {N1}, {N2}" in text, text

    # torchrun: ranks 0-3 of one world, two on each host, numbered by the rendezvous
    assert torch_out.strip(), torch_log
    record = json.loads(torch_out)
    assert (record["status"], record["exit_code"]) == ("succeeded", 0), torch_log
    results = _results(torch_log)
    ranks = sorted((r["rank"][0], r["host"], r["rank"][1], r["rank"][2], r["agent"][0]) for r in results)
    first, second = sorted((N1, N2), key=lambda h: min(r[0] for r in ranks if r[1] == h))
    assert ranks == [("0", first, "0", "4", "0"), ("1", first, "1", "4", "0"),
                     ("2", second, "0", "4", "1"), ("3", second, "1", "4", "1")], torch_log
    for r in results:  # every rank on both hosts, and the process each rank spawned
        assert r["agent"][1] == RDZV_ID and r["agent"][2] in (N1, IPS[N1]), r  # started by torchrun's agent
        assert r["driver"].startswith("patched:plain:") and r["child"].startswith("patched:plain:"), r
    records = _records(Path(record["dir"]))
    launchers = sorted((r["host"], r["mode"]) for r in records if r["role"] == "launcher")
    assert launchers == [(N1, "launch"), (N1, "verify-only"), (N2, "launch"), (N2, "verify-only")], launchers
    pythons = {r["environment"]["python"]["executable"] for r in records if r["role"] == "launcher" and r["mode"] == "launch"}
    assert pythons == {os.path.join(os.path.dirname(os.path.realpath(TORCHRUN)), "python")}, pythons  # torchrun's venv
    per_host = _show(cluster, record["id"])[0]["provenance"]["per_host"]
    assert all(per_host[h]["patched"] >= 4 for h in (N1, N2)), per_host  # two ranks and their children per host


SHIM = """#!/bin/sh
# python3 of this test: on {host}, after the prepare step, change the plugin in this host's
# node-local copy before the launcher starts (the run step's first argument is the copy's zip).
case " $* " in
  *" --verify-only "*) ;;
  *) if [ "$(hostname)" = {host} ]; then
       f="$(dirname "$(dirname "$1")")/forge_plugins/mark-worker/mark_worker.py"
       chmod u+w "$f" && echo "CHANGED_ON_ONE_HOST = 1" >> "$f"
     fi ;;
esac
exec {python} "$@"
"""


def test_a_plugin_changed_in_one_hosts_copy_after_prepare_stops_the_job_naming_that_host(slurm_two_hosts, make_experiment, tmp_path):
    cluster = slurm_two_hosts
    shim_dir = tmp_path / "shim"
    shim_dir.mkdir()
    shim = shim_dir / "python3"
    shim.write_text(SHIM.format(host=N2, python=os.path.realpath(BIN / "python3")))
    shim.chmod(0o755)
    exp = make_experiment("python -m workload.train", "slurm", {"nodes": 2, "launch": "per-node"}, name="changed")
    env = cluster.env(PATH=f"{shim_dir}{os.pathsep}{cluster.env()['PATH']}")
    record, log = _submit(cluster, exp, env=env)
    assert (record["status"], record["exit_code"]) == ("failed", 10), log
    assert f"error: {N2}: the launcher on this host exited 10" in log, log
    assert "mark_worker.py" in log  # the mismatch names the changed file
    assert f"error: {N1}: the launcher" not in log  # the other host's copy was intact (its launcher was ended by srun)


def _leftovers(cluster) -> str:
    """The node-local copies still on each host, and the end of each host's slurmd log."""
    lines = []
    for host in (N1, N2):
        for copy in cluster.hosts.node_tmp(host).glob("starforge-*"):  # what is left in it
            lines.append(f"{host}: {copy.name}: {sorted(str(p.relative_to(copy)) for p in copy.rglob('*'))[:40]}")
        log = cluster.base / "log" / f"slurmd-{host}.log"
        lines += log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
    return "\n".join(lines)


@pytest.fixture(autouse=True)
def no_copy_left_for_the_next_test(slurm_two_hosts):
    """Each test checks what its own jobs leave on the hosts; a copy one of them left when it
    failed is removed after it, so the next test does not fail on it too."""
    yield
    for host in (N1, N2):
        for copy in slurm_two_hosts.hosts.node_tmp(host).glob("starforge-*"):
            subprocess.run(["chmod", "-R", "u+w", str(copy)], check=False)
            shutil.rmtree(copy, ignore_errors=True)


def _wait_for(what: str, check, timeout: float, detail=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"{what}: not within {timeout:.0f} s\n{detail()}")


SLEEPER = "python -c 'import socket, time; print(\"sleeping on\", socket.gethostname(), flush=True); time.sleep(300)'"
# the same, run in the launcher's process (a script), having first written a checkpoint of its
# host into the job's declared output directory
CHECKPOINTING_SLEEPER = """\
import os, socket, time
host = socket.gethostname()
with open(os.path.join(os.environ["FORGE_OUTPUT_DIR"], host + ".bin"), "wb") as f:
    f.write(host.encode() * 1000)
print("sleeping on", host, flush=True)
time.sleep(300)
"""


def test_cancel_leaves_no_node_local_copy_on_either_host(slurm_two_hosts, make_experiment, tmp_path):
    cluster = slurm_two_hosts
    exp = make_experiment("python sleeper.py", "slurm", {"nodes": 2, "launch": "per-node"}, name="cancelled")
    (exp / "sleeper.py").write_text(CHECKPOINTING_SLEEPER)
    shared = tmp_path / "lustre" / "ckpt"  # the test's temp directory: the same on every host
    with open(exp / "forge.yaml", "a") as f:
        f.write(f"outputs: [{shared}/$FORGE_JOB_ID]\n")
    record, _ = _submit(cluster, exp, "--detach")
    output = Path(record["dir"]) / "slurm" / "output.log"
    both = lambda: output.exists() and {N1, N2} <= set(output.read_text().split())  # noqa: E731
    _wait_for("both hosts running", both, 60)
    for host in (N1, N2):  # each host has its private copy while the job runs
        assert list(cluster.hosts.node_tmp(host).glob("starforge-*")), host
    cancelled = cluster.forge("jobs", "cancel", record["id"], "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    gone = lambda: not any(list(cluster.hosts.node_tmp(h).glob("starforge-*")) for h in (N1, N2))  # noqa: E731
    _wait_for("node-local copies removed on both hosts", gone, 30, lambda: _leftovers(cluster))
    assert json.loads(cluster.forge("jobs", "show", record["id"], "--json").stdout)["status"] == "cancelled"
    # and each host recorded that it did (its keeper step, signalled by the cancel)
    cleaned = lambda: json.loads(cluster.forge("jobs", "show", record["id"], "--json").stdout)["node_cleanup"] == {  # noqa: E731
        "attempts": [{"attempt": 0, "prepared": [N1, N2], "removed": [N1, N2], "not_removed": [], "removed_later_by": {}}]}
    _wait_for("both hosts' cleanup recorded", cleaned, 30, lambda: cluster.forge("jobs", "show", record["id"]).stdout)

    # the end of the cancelled attempt on each host (its keeper step): a manifest per host in the
    # shared job directory, listing the declared directory both hosts wrote into, and its sidecar
    job_dir, ckpt = Path(record["dir"]), shared / record["id"]
    manifests = [json.loads((job_dir / "lineage" / f"outputs-a0-{h}.json").read_text()) for h in (N1, N2)]
    for manifest in manifests:
        assert manifest["recorded_by"] == "collect step"  # the launchers (the trainer's process) were killed
        declared = manifest["dirs"][1]
        assert (declared["path"], sorted(f[0] for f in declared["files"])) == (str(ckpt), [f"{N1}.bin", f"{N2}.bin"])
        assert declared["sidecar"] is True
    entry, = json.loads((ckpt / ".forge-provenance.json").read_text())["jobs"]
    assert (entry["job_id"], entry["backend"], entry["plugins"][0]["ref"]) == (record["id"], "slurm", "tester/mark-worker@1.0.0")
    # from the laptop host: a checkpoint copied elsewhere is traced by content to the job and its hosts
    copy = tmp_path / "copied" / f"{N2}.bin"
    copy.parent.mkdir()
    shutil.copy(ckpt / f"{N2}.bin", copy)
    traced = cluster.forge("trace", str(copy), "--json")
    assert traced.returncode == 0, traced.stderr
    job, = json.loads(traced.stdout)["jobs"]
    assert (job["job_id"], job["source"], job["backend"], job["hosts"]) == (record["id"], "content", "slurm", [N1, N2])
    by_sidecar = json.loads(cluster.forge("trace", str(ckpt / f"{N1}.bin"), "--json").stdout)["jobs"]
    assert [(j["job_id"], j["source"], j["disagreements"]) for j in by_sidecar] == [(record["id"], "sidecar", [])]


# Run by two users' jobs at once on both hosts: what this job's process sees of the other
# job's node-local copy on its host (there is one: each job waits for it, then waits until
# the other job has looked too, so both copies are there while either looks).
COPIES = """\
import glob
import json
import os
import socket
import time

from workload import algo


def wait_for(pattern, deadline):
    while len(glob.glob(pattern)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)


own = os.path.realpath(os.environ["FORGE_JOB_DIR"])
deadline = time.monotonic() + 120
wait_for("/tmp/starforge-*", deadline)
others = {}
for path in glob.glob("/tmp/starforge-*"):
    if os.path.realpath(path) != own:
        st = os.stat(path)
        try:
            os.listdir(path)
            seen = "listed"
        except PermissionError:
            seen = "denied"
        others[path] = [st.st_uid, oct(st.st_mode & 0o777), seen]
print("RESULTS " + json.dumps({"host": socket.gethostname(), "uid": os.getuid(), "own": own,
                               "own_mode": oct(os.stat(own).st_mode & 0o777), "others": others, "tag": algo.tag()}), flush=True)
open("/tmp/looked-%d" % os.getuid(), "w").close()
wait_for("/tmp/looked-*", deadline)
"""


def test_two_users_jobs_on_the_same_hosts_do_not_see_each_others_copies(slurm_two_hosts, make_experiment, other_user,
                                                                         third_user, plugin_registry):
    cluster = slurm_two_hosts
    exp = make_experiment("python -m workload.copies", "slurm", {"nodes": 2, "launch": "per-node"}, name="copies")
    (exp / "workload" / "copies.py").write_text(COPIES)
    # Two ordinary users, each with the experiment (the same, locked), a registry and forge
    # state of their own on the shared file system, submit at once from the laptop host.
    jobs = []
    for user in (other_user, third_user):
        theirs = cluster.base / f"user-{user.name}"
        shutil.copytree(exp, theirs / "copies", ignore=shutil.ignore_patterns(".forge"))
        shutil.copytree(plugin_registry, theirs / "registry")
        config = theirs / "copies" / "forge.yaml"
        config.write_text(config.read_text().replace(plugin_registry, str(theirs / "registry")))
        subprocess.run(["chown", "-R", f"{user.uid}", str(theirs)], check=True)
        env = cluster.env(FORGE_HOME=str(theirs / "forge-home"), HOME=str(theirs), USER=user.name, LOGNAME=user.name)
        argv = ["runuser", "-m", "-u", user.name, "--", str(BIN / "forge"), "submit", str(theirs / "copies"), "--json"]
        jobs.append(subprocess.Popen(cluster.hosts.enter(LAPTOP, argv), env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True))
    try:
        ended = [job.communicate(timeout=240) for job in jobs]
    finally:
        for job in jobs:
            if job.poll() is None:
                job.kill()
        for host in (N1, N2):
            for marker in cluster.hosts.node_tmp(host).glob("looked-*"):
                marker.unlink()
    for out, log in ended:
        assert out.strip(), log
        assert (json.loads(out)["status"], json.loads(out)["exit_code"]) == ("succeeded", 0), log
    for user, peer, (_, log) in ((other_user, third_user, ended[0]), (third_user, other_user, ended[1])):
        results = _results(log)
        assert sorted(r["host"] for r in results) == [N1, N2], results
        for r in results:  # each job ran patched from its own private copy, saw the other's copy there, and could not look in
            assert r["uid"] == user.uid and r["own_mode"] == "0o700" and r["tag"].startswith("patched:plain:"), r
            [(path, (owner, mode, seen))] = r["others"].items()
            assert (owner, mode, seen) == (peer.uid, "0o700", "denied"), r
    for host in (N1, N2):
        assert not list(cluster.hosts.node_tmp(host).glob("starforge-*")), host


# The first attempt sleeps (its host is killed under it); the requeued one ends at once.
ATTEMPTS = ("python -c 'import os, socket, time; print(\"attempt\", os.environ[\"FORGE_ATTEMPT\"], \"on\", "
            "socket.gethostname(), flush=True); time.sleep(0 if os.environ[\"FORGE_ATTEMPT\"] != \"0\" else 300)'")
KILLED_TEST = "test_a_host_killed_mid_job_gets_the_job_requeued_and_both_attempts_recorded"


@dataclass
class Requeued:
    """The fault test's job, run in a thread beside the module's other tests (most of it is
    waiting for Slurm), on the hosts of partition "faults": what it got, or how it failed."""

    env: dict
    exp: Path
    record: dict | None = None
    output: Path | None = None
    error: BaseException | None = None
    thread: object = None  # the threading.Thread running it


def _kill_a_host_under_a_job(cluster: Cluster, job: Requeued) -> None:
    record, _ = _submit(cluster, job.exp, "--detach", env=job.env)
    job.record = record
    output = job.output = Path(record["dir"]) / "slurm" / "output.log"
    _wait_for("attempt 0 on both hosts", lambda: output.exists() and output.read_text().count("attempt 0 on") == 2, 60)
    # the host "crashes": every process on it but the namespace holder dies at once
    holder = cluster.hosts.holders[N4]
    for pid in cluster.hosts.pids(N4):
        if pid != holder:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
    # Slurm notices (SlurmdTimeout=10), requeues the job; the host comes back with its slurmd.
    jid = str(record["backend_ref"]["job_id"])

    def state() -> str:  # Slurm's view of the job (cheap to ask often, unlike a forge command)
        return cluster.hosts.run(LAPTOP, ["timeout", "5", "scontrol", "show", "job", "-o", jid], env=cluster.env()).stdout

    _wait_for("the job requeued", lambda: "Restarts=1" in state(), 90)
    cluster.start_slurmd(N4)
    _wait_for("the host back", lambda: cluster.idle_nodes("faults") == 2, 30)
    ended = lambda: re.search(r"JobState=(COMPLETED|FAILED|NODE_FAIL) ", state())  # noqa: E731
    seen = lambda: state() + (output.read_text() if output.exists() else "")  # noqa: E731
    _wait_for("the second attempt ended", ended, 120, seen)  # a requeued job waits cred_expire (5 s) to start


@pytest.fixture(scope="module", autouse=True)
def requeued(request, slurm_two_hosts, tmp_path_factory, plugin_registry, experiment_at):
    """Starts the fault test's job with the module's first test, when the fault test is selected."""
    import threading

    if not any(item.originalname == KILLED_TEST for item in request.session.items):
        yield None
        return
    root = tmp_path_factory.mktemp("requeued")
    env = slurm_two_hosts.env(FORGE_HOME=str(root / "forge-home"))
    for name in ("FORGE_REGISTRY", "FORGE_OWNER", "FORGE_DEBUG", "FORGE_DISABLE", "FORGE_JOBS_DIR"):
        env.pop(name, None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FORGE_HOME", env["FORGE_HOME"])
        exp = experiment_at(root / "requeued", plugin_registry, ATTEMPTS, "slurm",
                                {"nodes": 2, "launch": "per-node", "partition": "faults"}, "requeued")
    job = Requeued(env, exp)

    def run() -> None:
        try:
            _kill_a_host_under_a_job(slurm_two_hosts, job)
        except BaseException as exc:  # pytest.fail raises a BaseException
            job.error = exc

    thread = threading.Thread(target=run, name="requeued-job", daemon=True)
    thread.start()
    job.thread = thread
    yield job
    thread.join(timeout=330)


def test_a_host_killed_mid_job_gets_the_job_requeued_and_both_attempts_recorded(slurm_two_hosts, requeued):
    cluster, job = slurm_two_hosts, requeued
    job.thread.join(timeout=330)
    assert not job.thread.is_alive(), "the fault test's job did not end within 330 s"
    if job.error is not None:
        raise job.error
    details, text = _show(cluster, job.record["id"], env=job.env)
    assert (details["status"], details["exit_code"]) == ("succeeded", 0), (details, job.output.read_text())
    prov = details["provenance"]
    assert prov["attempts"] == [0, 1], prov
    for host in (N3, N4):  # both hosts verified their copy again in the second attempt
        assert prov["per_host"][host]["attempts"] == [0, 1], prov["per_host"]
    # the killed host could not remove its first copy; the second attempt's prepare did
    for host in (N3, N4):
        assert not list(cluster.hosts.node_tmp(host).glob("starforge-*")), host
    assert "attempts 0, 1" in text, text
    # ... and `forge jobs show` says so: the killed host did not clean up after attempt 0
    # (nothing on it ran any more), and which later prepare removed what it left
    first, second = details["node_cleanup"]["attempts"]
    assert (first["attempt"], N4 in first["not_removed"], first["removed_later_by"].get(N4)) == (0, True, 1), first
    assert (second["attempt"], second["removed"], second["not_removed"]) == (1, [N3, N4], []), second
    assert (f"{N4} did not remove its node-local copy (the host died or was killed before its cleanup ran); "
            f"attempt 1's prepare on {N4} removed it") in text, text


# The recall story's checkpoint steps on two hosts: each host's rank writes its shard of the
# checkpoint into the declared directory on the shared file system.
CHECKPOINT_SHARD = """\
import os, socket
host = socket.gethostname()
with open(os.path.join(os.environ["FORGE_OUTPUT_DIR"], "shard-" + host + ".bin"), "wb") as f:
    f.write(("weights of " + host).encode() * 2000)
"""


def test_the_checkpoints_of_a_yanked_version_run_on_two_hosts_are_audited_and_traced(
        slurm_two_hosts, experiment_at, plugin_registry, forge_home, tmp_path):
    cluster = slurm_two_hosts
    registry = str(tmp_path / "registry")  # a registry of this test's own: the version is yanked there only
    copied = cluster.forge("plugin", "copy", "tester/mark-worker@1.0.0", "--from", plugin_registry, "--to", registry)
    assert copied.returncode == 0, copied.stderr
    exp = experiment_at(tmp_path / "exp", registry, "python shard.py", "slurm", {"nodes": 2, "launch": "per-node"},
                        "shards")
    (exp / "shard.py").write_text(CHECKPOINT_SHARD)
    lustre = tmp_path / "lustre" / "ckpt"  # seen by every host at this path
    with open(exp / "forge.yaml", "a") as f:
        f.write(f"outputs: [{lustre}/$FORGE_JOB_ID]\n")
    record, log = _submit(cluster, exp)
    assert record["status"] == "succeeded", log
    ckpt = lustre / record["id"]
    assert sorted(p.name for p in ckpt.glob("shard-*.bin")) == [f"shard-{N1}.bin", f"shard-{N2}.bin"]
    listed = set()
    for host in (N1, N2):  # each host's launcher listed the shared directory at its own end (its shard at least)
        manifest = json.loads((Path(record["dir"]) / "lineage" / f"outputs-a0-{host}.json").read_text())
        names = {f[0] for f in manifest["dirs"][1]["files"]}
        assert manifest["recorded_by"] == "launcher" and f"shard-{host}.bin" in names, manifest
        listed |= names
    assert listed == {f"shard-{N1}.bin", f"shard-{N2}.bin"}

    reason = "the mark is applied twice"
    yanked = cluster.forge("plugin", "yank", "tester/mark-worker@1.0.0", "--reason", reason, "--registry", registry)
    assert yanked.returncode == 0, yanked.stderr
    audit = cluster.forge("audit", "--json", env=cluster.env(FORGE_REGISTRY=registry))
    assert audit.returncode == 22, audit.stderr
    version, = json.loads(audit.stdout)["versions"]
    job, = version["jobs"]
    assert (version["reason"], job["id"], job["hosts"], job["sidecars"]) == (reason, record["id"], [N1, N2], [str(ckpt)])

    # a shard copied off the cluster is traced by content to the job, its hosts and the yank
    copy = tmp_path / "laptop" / "shard.bin"
    copy.parent.mkdir()
    shutil.copy(ckpt / f"shard-{N2}.bin", copy)
    traced = cluster.forge("trace", str(copy), "--json", env=cluster.env(FORGE_REGISTRY=registry))
    assert traced.returncode == 0, traced.stderr
    found, = json.loads(traced.stdout)["jobs"]
    assert (found["job_id"], found["source"], found["backend"], found["hosts"]) == (record["id"], "content", "slurm", [N1, N2])
    assert [(p["ref"], p["yanked"], p["reason"]) for p in found["plugins"]] == [("tester/mark-worker@1.0.0", True, reason)]
    # a teammate with an empty FORGE_HOME finds it through the sidecar on the shared file system
    teammate = cluster.env(FORGE_HOME=str(tmp_path / "teammate"), FORGE_REGISTRY=registry)
    claim = cluster.forge("trace", str(ckpt / f"shard-{N1}.bin"), env=teammate)
    assert claim.returncode == 0, claim.stderr
    assert f"written by job {record['id']}, by the sidecar" in claim.stdout and "YANKED now" in claim.stdout
