"""What a job's worker asks of the file system, counted with strace: on a shared file system
every open, stat and directory read is a request to its metadata server, once per process.

- A local job's worker checks the plugin tree's listing (one ``lstat`` per file: nothing added,
  linked or replaced since the launcher verified it) and opens only the files it imports:
  a plugin of 200 files costs it one call per file more than one of 2 files, and nothing
  else.
- A Slurm job's worker, after the prepare step, touches the shared job directory exactly as
  a bare worker started in the same working directory does: it reads no plugin or runtime
  file there (it runs from the node-local copy).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from support.experiment import submit_and_wait
from support.need import need
from support.workload import MARK_PLUGIN, WORKLOAD, write_tree

from starforge.experiment.config import load_experiment
from starforge.experiment.lock import lock_experiment
from starforge.registry.factory import open_registry
from starforge.registry.publish import publish_plugin

BIN = Path(sys.executable).parent


# The job: one worker with the job's environment and one bare (no FORGE_* variable, the
# bootstrap off PYTHONPATH), both doing the same import, each under strace.
FILE_CALLS = '''\
import json
import os
import subprocess
import sys

out = os.environ.get("WORKLOAD_TRACE_DIR")  # unset: the whole job is traced from outside
code = "from workload import algo; print(algo.tag())"
job_env = dict(os.environ)
bootstrap = os.path.join(".forge-runtime", "bootstrap")
bare_env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
bare_env["PYTHONPATH"] = os.pathsep.join(p for p in os.environ["PYTHONPATH"].split(os.pathsep) if bootstrap not in p)
tags = {}
for name, env in (("worker", job_env), ("bare", bare_env)):
    argv = [sys.executable, "-c", code, "probe-" + name]
    if out:
        argv = ["strace", "-f", "-qq", "-s", "256", "-e", "trace=%file,getdents64", "-o", os.path.join(out, name + ".trace"), *argv]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    tags[name] = done.stdout.strip() or done.stderr[-2000:]
print("RESULTS " + json.dumps({"tags": tags, "cwd": os.getcwd()}), flush=True)
'''

PATH_ARG = re.compile(r'^(\d+)\s+(\w+)\((?:AT_FDCWD, |\d+, )?"([^"]*)"')


def file_calls(trace: Path, cwd: str) -> list[tuple[str, str]]:
    """``(call, absolute path)`` of every traced call that names a path, in order (not those
    on an open descriptor, ``fstatat(fd, "")``)."""
    out = []
    for line in trace.read_text().splitlines():
        m = PATH_ARG.match(line)
        if m and m.group(3):
            out.append((m.group(2), os.path.normpath(os.path.join(cwd, m.group(3)))))
    return out


@pytest.fixture
def strace():
    need(shutil.which("strace") is not None, "strace is not installed (apt-get install strace)")


def experiment(root: Path, registry: str, version: str, backend: str, settings: dict | None = None) -> Path:
    write_tree(root, WORKLOAD)
    (root / "workload" / "file_calls.py").write_text(FILE_CALLS)
    doc = {"schema": "forge/job/v1", "name": root.name, "entrypoint": "python -m workload.file_calls",
           "plugins": [f"tester/mark-worker@{version}"], "config": {"mark": {"label": "patched"}},
           "backend": backend, "registry": registry, **({backend: settings} if settings else {})}  # fmt: skip
    (root / "forge.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    lock_experiment(load_experiment(root), open_registry(registry))
    return root


def run(exp: Path, traces: Path | None, backend: str, monkeypatch, started=None) -> tuple[dict, str]:
    if traces is not None:
        traces.mkdir(mode=0o755)
        monkeypatch.setenv("WORKLOAD_TRACE_DIR", str(traces))
    _, record, log = submit_and_wait(exp, backend)
    assert (record.status, record.exit_code) == ("succeeded", 0), log
    [line] = [ln for ln in log.splitlines() if ln.startswith("RESULTS ")]
    result = json.loads(line[len("RESULTS "):])
    assert result["tags"]["worker"].startswith("patched:") and result["tags"]["bare"].startswith("plain:"), result
    return result, record.dir


def test_a_local_workers_file_calls_do_not_grow_with_the_plugins_file_count(strace, forge_home, tmp_path, monkeypatch):
    registry = str(tmp_path / "registry")
    for version, extra in (("1.0.0", 0), ("1.0.1", 198)):  # 2 and 200 files
        src = tmp_path / f"src-{version}" / "mark-worker"
        write_tree(src, {**MARK_PLUGIN, "plugin.yaml": MARK_PLUGIN["plugin.yaml"].replace("1.0.0", version),
                         **{f"extra/m{i:03d}.py": f"VALUE = {i}\n" for i in range(extra)}})  # fmt: skip
        publish_plugin(src, open_registry(registry), "tester")
    calls = {}
    for version in ("1.0.0", "1.0.1"):
        exp = experiment(tmp_path / f"exp-{version}", registry, version, "local")
        result, job_dir = run(exp, tmp_path / f"traces-{version}", "local", monkeypatch)
        calls[version] = [(c, p.replace(job_dir, "JOB")) for c, p in file_calls(tmp_path / f"traces-{version}" / "worker.trace", result["cwd"])]
    extra = "JOB/forge_plugins/mark-worker/extra"
    outside = {v: Counter(c for c, p in calls[v] if not p.startswith(extra)) for v in calls}
    assert outside["1.0.0"] == outside["1.0.1"], outside
    listing = Counter(c for c, p in calls["1.0.1"] if p.startswith(extra + "/"))
    assert listing == Counter({"newfstatat": 198}), listing  # one lstat per file, no file opened
    assert Counter(c for c, p in calls["1.0.1"] if p == extra) == Counter({"newfstatat": 1, "openat": 1})


def trace_calls(trace: Path):
    """``(pid, call, arguments and result, child pid or None)`` of each call of a ``strace -f``
    trace, in order; the child pid for the calls that start a process."""
    for line in trace.read_text().splitlines():
        m = re.match(r"^(\d+)\s+(\w+)\((.*)", line)
        if not m:
            continue
        pid, call, rest = m.groups()
        child = re.search(r"= (\d+)$", rest) if call in ("clone", "clone3", "fork", "vfork") else None
        yield pid, call, rest, child.group(1) if child else None


def processes(trace: Path) -> dict[str, list]:
    """``{pid: [argv of each exec, in order]}`` and ``{pid: parent pid}`` of a ``strace -f`` trace."""
    execs: dict[str, list] = {}
    parents: dict[str, str] = {}
    for pid, call, rest, child in trace_calls(trace):
        if child:
            parents[child] = pid
        elif call == "execve" and "= -1 " not in rest:  # one that worked (or whose result comes later)
            execs.setdefault(pid, []).append(re.findall(r'"([^"]*)"', rest.split("], ")[0])[1:])
    return {"execs": execs, "parents": parents}


def role(pid: str, procs: dict) -> str:
    """What process *pid* is: ``step/command``, the step of the batch job it belongs to (the
    batch script, or the script an ``srun`` step runs) and the command it (or the nearest
    ancestor that exec'd) runs."""
    chain = []  # the argv of each exec on the way up, nearest first
    while pid:
        chain.extend(reversed(procs["execs"].get(pid, [])))
        pid = procs["parents"].get(pid)
    if not chain:
        return "slurmd/-"
    argv = chain[0]
    command = next((w for w in argv if w.startswith("probe-")), None)
    if command is None and any(w.endswith("workload.file_calls") for w in argv):
        command = "entrypoint"
    if command is None and (any(w.endswith("starforge-runtime.zip") for w in argv[1:2]) or argv[1:3] == ["-m", "starforge.launch"]):
        command = "launcher"
    command = command or (os.path.basename(argv[0]) if argv else "?")
    step = "run"  # an srun step of the launcher itself
    for a in chain:
        if a[:1] and a[0].endswith("bash") and a[1:2] == ["-c"] and len(a) > 2:
            script = a[2]
            step = "prepare" if "runtime_sha" in script else "keeper" if "collect=$3" in script else "collect"
            break
        if a[:1] and os.path.basename(a[0]) == "slurm_script":
            step = "batch"
            break
    return f"{step}/{command}"


@pytest.mark.slurm
def test_a_slurm_worker_touches_the_shared_job_directory_as_a_bare_worker_does(
        strace, slurm_env, forge_home, plugin_registry, tmp_path, monkeypatch, capsys):
    """The whole job (every step, the batch script, the launcher, a worker and a bare worker
    started by the entrypoint in its working directory) is traced from slurmd on."""
    import signal
    import subprocess
    import time

    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")  # the job's python3 (sbatch --export=ALL)
    monkeypatch.delenv("FORGE_SLURM_STAGING", raising=False)
    monkeypatch.delenv("WORKLOAD_TRACE_DIR", raising=False)
    exp = experiment(tmp_path / "exp", plugin_registry, "1.0.0", "slurm", {"staging": str(tmp_path / "shared")})
    slurmd = int((slurm_env.root / "log" / "slurmd.pid").read_text().split()[0])
    trace = tmp_path / "job.trace"
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-s", "256", "-e", "trace=%file,getdents64,clone,clone3,fork,vfork",
                               "-o", str(trace), "-p", str(slurmd)], stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not (trace.exists() and trace.stat().st_size) and tracer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # attached once slurmd's first call is written
        time.sleep(0.3)
        result, job_dir = run(exp, None, "slurm", monkeypatch)
    finally:
        tracer.send_signal(signal.SIGINT)
        tracer.wait(timeout=30)
    shared = os.path.realpath(job_dir)
    cwd = result["cwd"]
    procs = processes(trace)
    calls: dict[str, list] = {}
    cwds: dict[str, str] = {}  # pid -> its working directory, as the trace shows it (chdir, getcwd)
    fds: dict[str, dict] = {}  # pid -> {descriptor: the path it was opened with}
    for pid, call, rest, child in trace_calls(trace):
        if child:
            cwds[child] = cwds.get(pid, "/")
            fds[child] = dict(fds.get(pid, {}))
            continue
        p = re.match(r'(?:(AT_FDCWD|\d+), )?"([^"]*)"', rest)
        if not (p and p.group(2)):
            continue
        base = cwds.get(pid, "/") if p.group(1) in (None, "AT_FDCWD") else fds.get(pid, {}).get(p.group(1), "?")
        path = os.path.normpath(os.path.join(base, p.group(2)))
        if call in ("chdir", "getcwd") and "= -1 " not in rest:
            cwds[pid] = path
        if call in ("open", "openat") and (fd := re.search(r"= (\d+)$", rest)):
            fds.setdefault(pid, {})[fd.group(1)] = path
        # getcwd is answered from the kernel's own cache, never by the file system
        if call != "getcwd" and (path == shared or path.startswith(shared + os.sep)):
            calls.setdefault(role(pid, procs), []).append((call, os.path.relpath(path, shared)))
    with capsys.disabled():  # the counts behind docs/performance.md's model
        print(f"\ncalls naming a path in the shared job directory, by process ({cwd=}):")
        for name, found in sorted(calls.items()):
            print(f"  {name:28s} {len(found):4d}  {dict(Counter(c for c, _ in found))}")
            print(f"  {'':28s}       {dict(Counter(p.split('/')[0] for _, p in found))}")
    worker = [c for name, found in calls.items() if name.endswith("/probe-worker") for c in found]
    bare = [c for name, found in calls.items() if name.endswith("/probe-bare") for c in found]
    assert worker and bare, calls
    assert cwd.startswith(shared + os.sep), cwd  # the job's working directory is on shared storage
    # The worker reads nothing of the job there: no plugin, runtime, JobSpec or recipe file;
    # it looks at its working directory exactly as the bare worker does (which imports the
    # recipe from there); the rest is its provenance records, written as it makes them.
    job_files = ("forge_plugins", ".forge-runtime", "jobspec.json", "recipe")
    assert not [p for _, p in worker if p.split("/")[0] in job_files], worker
    here = os.path.relpath(cwd, shared)
    records = [c for c in worker if c[1].split("/")[0] == "provenance"]
    # Beyond what the bare worker did there, only Python's import system looking the runtime's
    # modules up on sys.path: a stat of the directory (and of a path entry that is not one,
    # resolved in it), never an open, a listing or a file of the job.
    extra = Counter(c for c in worker if c not in records) - Counter(bare)
    assert {c for c, _ in extra} <= {"newfstatat"} and sum(extra.values()) <= 4, (extra, worker, bare)
    assert all(p == here or p.startswith(here + "/") for _, p in extra), extra
    assert {c for c, _ in records} <= {"newfstatat", "openat", "rename"}, records  # its record, written as it is made
    assert [c for c in bare if c[1] != here and not c[1].startswith(here + "/")] == [], bare
