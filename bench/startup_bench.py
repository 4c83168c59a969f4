"""Start-up cost: what a job pays for StarForge, side by side with the same work without it.

One run measures four pairs (SPEC §9 "Start-up cost"), each as many interleaved runs of the
StarForge variant and its bare counterpart, alternating which goes first; it prints, per
variant, the median and the spread (quartiles, min-max) of wall and CPU time, and per pair
the median of the paired differences (each StarForge run minus the bare run next to it)
with its quartiles, against the goal:

- ``worker``: a ``multiprocessing`` worker (``spawn``) of a running job whose 20-file eager
  plugin declares ``targets``; the worker imports the target, so the plugin is checked,
  imported and installed in it. Bare: the same spawn from the same trainer with the job's
  variables and bootstrap removed (no StarForge, no plugin). Timed by the trainer itself,
  ``Process.start()`` to ``join()``. Goal: +40 ms.
- ``submit``: ``forge submit EXP`` of a trivial local job (the same plugin, an entrypoint
  with no children), start to exit, against running the entrypoint by hand
  (``python -m app.train`` in the experiment). Goal: +400 ms.
- ``launcher``: the node entry as backends start it (``python <job>/.forge-runtime/
  starforge-runtime.zip --spec <job>/jobspec.json``: verify, requires, import, install,
  the entrypoint), the job's Python being the entry's own, against a bare script doing the
  same imports and ``install`` and running the entrypoint (normal ``__pycache__``).
  Goal: +100 ms.
- ``digest``: ``forge plugin digest DIR`` as a whole process against a whole process that
  reads and hashes the same files with ``hashlib.sha256`` on one core, on 10 x 20 MB and on
  2,000 files (25 KB each), the plugin limits lifted with ``FORGE_MAX_PLUGIN_BYTES`` and
  ``FORGE_MAX_PLUGIN_FILES``. Reported as throughput relative to that pass (higher is
  better). Goals: >= 1.2x and >= 0.5x.

Usage::

    python bench/startup_bench.py [--runs 20] [--only worker,submit,launcher,digest,breakdown] [--keep DIR]

``breakdown`` runs a worker (with the job's code directory, from the runtime zip only, and
bare) and the launcher (node entry and bare script) under ``-X importtime`` and sums the
self times by group: the vendored packaging, StarForge's runtime, the plugin's modules, the
trainer's own, the bootstrap's own work, and the rest.

Run it with the interpreter that has starforge-core installed (``forge`` is the console
script beside it). ``PYTHONDONTWRITEBYTECODE`` is removed from every child's environment
(normal interpreters keep ``__pycache__``), and one warm-up run of each variant comes
first. On a machine shared with other work, wall times include waiting for a CPU: read
the CPU columns and the load averages printed at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

MODULE = '''"""Module {i} of the benchmark plugin."""

import math


def scale_{i}(values, factor={i}.0):
    return [v * factor for v in values]


def norm_{i}(values):
    total = math.fsum(v * v for v in values)
    return math.sqrt(total) if total else 0.0


class Estimator{i}:
    def __init__(self, eps=1e-6):
        self.eps = eps

    def __call__(self, rewards):
        mean = sum(rewards) / len(rewards)
        std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
        return [(r - mean) / (std + self.eps) for r in rewards]
'''

INIT = '''"""Benchmark plugin: 19 modules imported by install, one function patched."""


def install(params):
    import importlib

    from starforge import patching

    for i in range(1, 20):
        importlib.import_module(f"bench_patch.mod{i:02d}")
    scale = params["bench.scale"]
    patching.wrap("app.algo:compute", lambda original, x: original(x) * scale)
'''

PLUGIN_YAML = """\
schema: forge/plugin/v1
name: bench-patch
version: 1.0.0
kind: algorithm
entrypoint: bench_patch:install
load: eager
targets: [app.algo]
requires:
  core: ">=0.1"
  python: ">=3.10"
params:
  bench.scale: {type: float, default: 2.0, description: "multiplier"}
description: "Start-up benchmark plugin: 20 modules, one patch"
"""

FORGE_YAML = """\
schema: forge/job/v1
name: startup-bench
entrypoint: python -m app.train
plugins: [bench/bench-patch@1.0.0]
config:
  bench:
    scale: 2.0
backend: local
"""

TRAIN = "from app import algo\nassert algo.compute(1) == {expected}, algo.compute(1)\n"

WORK = '''import sys


def run(expected):
    from app import algo  # the plugin's target: a StarForge worker installs the plugin here

    if algo.compute(1) != expected:
        sys.exit(3)
'''

# The trainer of the worker pair: spawns workers with and without the job's environment,
# interleaved, and prints one JSON line of (wall, cpu) per variant.
SPAWNER = '''import json, multiprocessing, os, resource, sys, time

from app import work


def one(env, expected):
    os.environ.clear()
    os.environ.update(env)
    ctx = multiprocessing.get_context("spawn")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = ctx.Process(target=work.run, args=(expected,))
    p.start()
    p.join()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.exitcode != 0:
        raise SystemExit(f"worker failed with {p.exitcode}")
    return wall * 1000, (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def breakdown():
    """-X importtime of one worker of each kind, as one JSON line of raw reports."""
    import subprocess
    code_dir = dict(os.environ)
    # a code directory not on this node: passed over (the job directory's pointer is not read)
    zip_only = dict(os.environ, FORGE_CODE_DIR=os.path.join(os.environ["FORGE_JOB_DIR"], "no-code-dir-here"))
    bare = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    boot = os.path.join(os.environ["FORGE_JOB_DIR"], ".forge-runtime")
    bare["PYTHONPATH"] = os.pathsep.join(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                         if p and not p.startswith(boot) and "forge-code-" not in p)
    variants = (("worker, code directory", code_dir, 4), ("worker, runtime zip only", zip_only, 4), ("bare worker", bare, 2))
    out = {name: [] for name, _, _ in variants}
    for _ in range(5):  # interleaved, as the timed pairs
        for name, env, expected in variants:
            argv = [sys.executable, "-X", "importtime", "-c", f"from app import work; work.run({expected})"]
            out[name].append(subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stderr)
    print("BREAKDOWN " + json.dumps(out), flush=True)


if __name__ == "__main__" and sys.argv[1:] == ["breakdown"]:
    breakdown()
elif __name__ == "__main__":  # (a spawned worker imports this module as __mp_main__)
    STARFORGE = dict(os.environ)
    BARE = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    boot = os.path.join(os.environ["FORGE_JOB_DIR"], ".forge-runtime")
    BARE["PYTHONPATH"] = os.pathsep.join(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                         if p and not p.startswith(boot))
    runs = int(sys.argv[1])
    out = {"worker": [], "bare worker": []}
    one(STARFORGE, 4), one(BARE, 2)  # warm-up
    for i in range(runs):
        order = [("worker", STARFORGE, 4), ("bare worker", BARE, 2)]
        for name, env, expected in (order if i % 2 == 0 else order[::-1]):
            out[name].append(one(env, expected))
    os.environ.clear()
    os.environ.update(STARFORGE)
    print("SPAWN " + json.dumps(out), flush=True)
'''

BARE_LAUNCH = '''import os, runpy, sys, types
root, recipe = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
os.chdir(recipe)
sys.path.insert(0, recipe)
import bench_patch
bench_patch.install(types.MappingProxyType({"bench.scale": 2.0}))
sys.argv = ["app.train"]
runpy.run_module("app.train", run_name="__main__", alter_sys=True)
'''

HASHLIB_PASS = '''import hashlib, os, sys
for folder, _, names in os.walk(sys.argv[1]):
    for name in names:
        with open(os.path.join(folder, name), "rb") as f:
            hashlib.sha256(f.read()).hexdigest()
'''

GOALS = {"worker": 40.0, "submit": 400.0, "launcher": 100.0}
DIGEST_GOALS = {"10 x 20 MB": 1.2, "2,000 files": 0.5}


def run(argv, env, cwd, check=True) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall ms, CPU ms of the process and its waited-for children, result) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise SystemExit(f"{argv} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall * 1000, cpu * 1000, proc


def quartiles(values: list) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[1], q[2]


def pairs(variants: dict, runs: int, cwd: str) -> dict:
    """Run each variant *runs* times, interleaved (the order alternates); {name: [(wall, cpu)]}."""
    names = list(variants)
    for name in names:  # warm-up: __pycache__ of the interpreter and site-packages
        run(*variants[name], cwd)
    out: dict = {name: [] for name in names}
    for i in range(runs):
        for name in (names if i % 2 == 0 else names[::-1]):
            wall, cpu, _ = run(*variants[name], cwd)
            out[name].append((wall, cpu))
    return out


def report_pair(title: str, results: dict, starforge: str, bare: str, goal: float) -> dict:
    print(f"\n[{title}] {len(results[starforge])} interleaved pairs; ms")
    print(f"  {'variant':14s} {'wall median':>11s} {'wall q1-q3':>15s} {'wall min-max':>15s} {'cpu median':>10s} {'cpu q1-q3':>15s}")
    for name in (starforge, bare):
        walls = [w for w, _ in results[name]]
        cpus = [c for _, c in results[name]]
        q1, q2, q3 = quartiles(walls)
        c1, c2, c3 = quartiles(cpus)
        print(f"  {name:14s} {q2:11.1f} {q1:7.1f}-{q3:<7.1f} {min(walls):7.1f}-{max(walls):<7.1f} {c2:10.1f} {c1:7.1f}-{c3:<7.1f}")
    dw = [a[0] - b[0] for a, b in zip(results[starforge], results[bare])]
    dc = [a[1] - b[1] for a, b in zip(results[starforge], results[bare])]
    w1, w2, w3 = quartiles(dw)
    c1, c2, c3 = quartiles(dc)
    verdict = "ok" if w2 <= goal else "MISSED"
    print(f"  StarForge - bare, paired: wall {w2:+.1f} (q1-q3 {w1:+.1f} to {w3:+.1f}), "
          f"cpu {c2:+.1f} (q1-q3 {c1:+.1f} to {c3:+.1f}); goal wall <= +{goal:g}: {verdict}")
    return {"wall_ms": w2, "wall_q1": w1, "wall_q3": w3, "cpu_ms": c2, "goal_ms": goal, "ok": verdict == "ok"}


def forge_cmd() -> list:
    script = Path(sys.executable).with_name("forge")
    return [str(script)] if script.exists() else [sys.executable, "-m", "starforge"]


def setup(base: Path, env: dict) -> tuple[Path, Path]:
    """Publish the plugin, write and lock the experiment; (experiment, plugin copy for bare runs)."""
    plugin = base / "bench-patch"
    (plugin / "bench_patch").mkdir(parents=True)
    (plugin / "plugin.yaml").write_text(PLUGIN_YAML)
    (plugin / "bench_patch" / "__init__.py").write_text(INIT)
    for i in range(1, 20):
        (plugin / "bench_patch" / f"mod{i:02d}.py").write_text(MODULE.format(i=i))
    exp = base / "exp"
    (exp / "app").mkdir(parents=True)
    (exp / "forge.yaml").write_text(FORGE_YAML)
    (exp / "app" / "__init__.py").write_text("")
    (exp / "app" / "algo.py").write_text("def compute(x):\n    return x + 1\n")
    (exp / "app" / "work.py").write_text(WORK)
    (exp / "app" / "spawner.py").write_text(SPAWNER)
    (exp / "app" / "train.py").write_text(TRAIN.format(expected=4))
    forge = forge_cmd()
    subprocess.run([*forge, "plugin", "publish", str(plugin)], env=env, check=True, capture_output=True)
    subprocess.run([*forge, "lock", str(exp)], env=env, check=True, capture_output=True)
    return exp, plugin


def latest_job(exp: Path) -> Path:
    jobs = sorted((exp / ".forge" / "jobs").iterdir(), key=lambda p: p.stat().st_mtime)
    return jobs[-1]


def bench_submit(exp: Path, env: dict, runs: int) -> dict:
    # By hand, the trainer alone runs unpatched: compute(1) is 2 there.
    by_hand_env = dict(env, BENCH_BY_HAND="1")
    (exp / "app" / "train.py").write_text(
        "import os\nfrom app import algo\nexpected = 2 if os.environ.get('BENCH_BY_HAND') else 4\n"
        "assert algo.compute(1) == expected, algo.compute(1)\n")
    variants = {
        "forge submit": ([*forge_cmd(), "-q", "submit", str(exp)], env),
        "by hand": ([sys.executable, "-m", "app.train"], by_hand_env),
    }
    results = pairs(variants, runs, str(exp))
    return report_pair("submit: forge submit of a trivial local job vs its entrypoint by hand", results,
                       "forge submit", "by hand", GOALS["submit"])


def bench_worker(job: Path, env: dict, runs: int) -> dict:
    entry = [sys.executable, str(job / ".forge-runtime" / "starforge-runtime.zip"), "--spec", str(job / "jobspec.json"),
             "--", "python", "-m", "app.spawner", str(runs)]
    _, _, proc = run(entry, env, str(job))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("SPAWN "))
    results = json.loads(line[len("SPAWN "):])
    return report_pair("worker: a spawned multiprocessing worker importing the plugin's target, in a running job", results,
                       "worker", "bare worker", GOALS["worker"])


def bench_launcher(job: Path, plugin: Path, base: Path, env: dict, runs: int) -> dict:
    bare_plugin = base / "bare-plugin"
    if not bare_plugin.exists():
        shutil.copytree(plugin, bare_plugin)
    (base / "bare_launch.py").write_text(BARE_LAUNCH)
    variants = {
        "node entry": ([sys.executable, str(job / ".forge-runtime" / "starforge-runtime.zip"),
                        "--spec", str(job / "jobspec.json")], env),
        "bare script": ([sys.executable, str(base / "bare_launch.py"), str(bare_plugin), str(job / "recipe")], env),
    }
    results = pairs(variants, runs, str(job))
    return report_pair("launcher: the node entry (verify, requires, import, install, entrypoint) vs a bare script",
                       results, "node entry", "bare script", GOALS["launcher"])


def make_tree(root: Path, count: int, size: int, per_dir: int) -> int:
    seed = os.urandom(1 << 20)
    for i in range(count):
        folder = root / f"pkg{i // per_dir:03d}" / f"sub{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"file{i:05d}.bin", "wb") as f:
            left = size
            while left:
                chunk = seed[(i * 7919) % 1024:][:left] or seed[:left]
                f.write(chunk)
                left -= len(chunk)
    return count * size


def bench_digest(base: Path, env: dict, runs: int) -> dict:
    denv = dict(env, FORGE_MAX_PLUGIN_BYTES=str(1 << 30), FORGE_MAX_PLUGIN_FILES="100000")
    (base / "hashlib_pass.py").write_text(HASHLIB_PASS)
    out = {}
    for label, count, size, per_dir in (("10 x 20 MB", 10, 20_000_000, 10), ("2,000 files", 2_000, 25_000, 50)):
        tree = base / ("tree-" + label.replace(" ", "").replace(",", ""))
        total = make_tree(tree, count, size, per_dir)
        variants = {
            "forge digest": ([*forge_cmd(), "plugin", "digest", str(tree)], denv),
            "hashlib 1 core": ([sys.executable, str(base / "hashlib_pass.py"), str(tree)], denv),
        }
        results = pairs(variants, runs, str(base))
        print(f"\n[digest: {label}, {total / 1e6:.0f} MB] {runs} interleaved pairs; whole processes; ms")
        print(f"  {'variant':14s} {'wall median':>11s} {'wall q1-q3':>15s} {'cpu median':>10s}  MB/s (wall)")
        for name in variants:
            walls = [w for w, _ in results[name]]
            q1, q2, q3 = quartiles(walls)
            cpu = statistics.median(c for _, c in results[name])
            print(f"  {name:14s} {q2:11.1f} {q1:7.1f}-{q3:<7.1f} {cpu:10.1f}  {total / 1e3 / q2:8.0f}")
        ratios = [b[0] / a[0] for a, b in zip(results["forge digest"], results["hashlib 1 core"])]
        r1, r2, r3 = quartiles(ratios)
        goal = DIGEST_GOALS[label]
        verdict = "ok" if r2 >= goal else "MISSED"
        print(f"  forge digest throughput / hashlib one core, paired: {r2:.2f}x (q1-q3 {r1:.2f}x to {r3:.2f}x); "
              f"goal >= {goal}x: {verdict}")
        out[label] = {"ratio": r2, "q1": r1, "q3": r3, "goal": goal, "ok": verdict == "ok"}
    return out


GROUPS = (("packaging (vendored)", "starforge.cluster._vendor"), ("StarForge runtime", "starforge"),
          ("the plugin's 20 modules", "bench_patch"),
          ("the trainer's modules (a worker installs the plugin in its target's import)", "app"))


def importtime_groups(report: str) -> dict:
    """Self time (ms) of ``-X importtime`` lines, summed by group; ``sitecustomize`` (the
    bootstrap: what boot_process does besides importing) and the rest separately."""
    out: dict = {}
    for line in report.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _, name = line[len("import time:"):].split("|")
        name = name.strip()
        group = "stdlib, site, other"
        if name == "sitecustomize":
            group = "bootstrap (boot_process: verify, requires, install, provenance)"
        for label, prefix in GROUPS:
            if name == prefix or name.startswith(prefix + "."):
                group = label
                break
        out[group] = out.get(group, 0.0) + int(self_us) / 1000
    return out


def print_breakdown(title: str, reports: dict) -> None:
    print(f"\n[breakdown: {title}] -X importtime self time by group, median of {len(next(iter(reports.values())))} runs; ms")
    groups: list = []
    medians = {}
    for name, runs in reports.items():
        per = [importtime_groups(r) for r in runs]
        keys = sorted({k for p in per for k in p})
        medians[name] = {k: statistics.median(p.get(k, 0.0) for p in per) for k in keys}
        groups += [k for k in keys if k not in groups]
    names = list(reports)
    print("  " + f"{'group':78s}" + "".join(f"{n[:26]:>27s}" for n in names))
    for g in groups:
        print("  " + f"{g:78s}" + "".join(f"{medians[n].get(g, 0.0):27.1f}" for n in names))
    print("  " + f"{'total':78s}" + "".join(f"{sum(medians[n].values()):27.1f}" for n in names))


def bench_breakdown(job: Path, plugin: Path, base: Path, env: dict) -> None:
    entry = [sys.executable, str(job / ".forge-runtime" / "starforge-runtime.zip"), "--spec", str(job / "jobspec.json")]
    _, _, proc = run([*entry, "--", "python", "-m", "app.spawner", "breakdown"], env, str(job))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("BREAKDOWN "))
    print_breakdown("a worker importing the target, in a running job", json.loads(line[len("BREAKDOWN "):]))
    bare_plugin = base / "bare-plugin"
    if not bare_plugin.exists():
        shutil.copytree(plugin, bare_plugin)
    (base / "bare_launch.py").write_text(BARE_LAUNCH)
    timed_env = dict(env, PYTHONPROFILEIMPORTTIME="1")
    reports: dict = {"node entry": [], "bare script": []}
    for _ in range(5):
        reports["node entry"].append(run(entry, timed_env, str(job))[2].stderr)
        reports["bare script"].append(run([sys.executable, str(base / "bare_launch.py"), str(bare_plugin), str(job / "recipe")],
                                          timed_env, str(job))[2].stderr)
    print_breakdown("the launcher on the node", reports)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="interleaved pairs per measurement (default 20)")
    ap.add_argument("--only", default="worker,submit,launcher,digest,breakdown",
                    help="comma-separated subset (breakdown: where a worker's and the launcher's start-up goes)")
    ap.add_argument("--keep", metavar="DIR", help="build in DIR and keep it (default: a temporary directory)")
    args = ap.parse_args()
    only = set(args.only.split(","))
    print("command: python bench/startup_bench.py " + " ".join(sys.argv[1:]))
    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd() + os.sep) else sys.executable
    print(f"python {sys.version.split()[0]} ({python}), {os.cpu_count()} CPUs, commit {commit()}, "
          f"load average at start {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(textwrap.fill("Each pair runs interleaved; 'paired' figures are the median (and quartiles) of the "
                        "differences between neighbouring runs. Wall time includes waiting for a CPU on a busy "
                        "machine; CPU time is user+system of the process and the children it waited for.", 100))
    base = Path(args.keep or tempfile.mkdtemp(prefix="forge-startup-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FORGE_") and k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    env.update(FORGE_HOME=str(base / "home"), FORGE_OWNER="bench", NO_COLOR="1")
    summary: dict = {}
    try:
        exp, plugin = setup(base, env)
        if only & {"submit", "worker", "launcher", "breakdown"}:
            # One staged job for the worker and launcher pairs (the submit pair stages more).
            run([*forge_cmd(), "-q", "submit", str(exp)], env, str(exp))
            job = latest_job(exp)
        if "worker" in only:
            summary["worker"] = bench_worker(job, env, args.runs)
        if "launcher" in only:
            summary["launcher"] = bench_launcher(job, plugin, base, env, args.runs)
        if "submit" in only:
            summary["submit"] = bench_submit(exp, env, args.runs)
        if "digest" in only:
            summary["digest"] = bench_digest(base, env, args.runs)
        if "breakdown" in only:
            bench_breakdown(job, plugin, base, env)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\nload average at end {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print("SUMMARY " + json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
