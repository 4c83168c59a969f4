"""Launcher overhead: forge-launch vs a bare script doing the same work unverified.

Both run the same 20-file eager plugin (its ``install`` imports every module and patches
one function) and the same trivial training entrypoint, in fresh interpreters, interleaved
in one run:

- ``bare``: a script that puts the plugin on ``sys.path``, imports it, calls
  ``install(params)`` and runs the entrypoint with ``runpy`` (normal ``__pycache__``);
- ``launch``: ``python -m starforge.launch --spec jobspec.json`` (verify, requires,
  snapshot import, install, status/provenance/runtime files, entrypoint) with an
  installed starforge-core; the plugin's modules are compiled from the verified bytes and
  ``packaging`` checks ``requires`` in every launch (nothing is cached between launches);
- ``launch-zip``: the same launcher run from the job's runtime zip (``PYTHONPATH=<zip>``),
  as a backend starts it where nothing of StarForge is installed: the launcher's own
  modules are compiled from the zip's sources too;
- ``launch-norequires``: the same job without ``requires``;
- ``entry``: the node entry every backend runs, ``python <job>/.forge-runtime/
  starforge-runtime.zip --spec jobspec.json``, under forge's interpreter with no job's
  Python named (the local backend's default): the entry resolves the job's Python (this
  one) and re-executes ``python -m starforge.launch`` from the zip;
- ``entry-other``: the same entry started by the base interpreter's ``python3`` (a node's
  ``python3``, nothing of StarForge installed) for a JobSpec whose ``python`` is a bare
  venv (no starforge-core, no ``packaging``): the entry probes that interpreter's version,
  re-executes the launcher under it from the zip, which runs the job there — the job's
  Python differing from forge's;
- ``python``: ``python -c pass``, for scale;
- ``worker``: ``python -c pass`` started with the job environment (``bootstrap_env``):
  what every other process of the job pays at start-up for this eager plugin.

Usage: ``python bench/launch_bench.py [--runs 40]``; prints medians and the extra cost.

``--plugin-mib N`` adds a data file that the plugin never imports or reads, bringing the
plugin to *N* MiB (16 is the default plugin limit): the launcher reads and hashes it once;
a worker lists it and reads nothing of it. ``--worker-check`` times only a worker's plugin
check, in this process: the whole-tree read every process did before against the listing
and per-file hashes of the imported modules it does now.

``--compare SRC_A SRC_B`` instead measures two copies of the code A/B (e.g. ``git
archive`` of two commits, each directory holding ``starforge/``): each gets a fresh
virtual environment that sees it through a ``.pth`` entry (with a copy of the installed
``packaging``), and ``bare`` and ``launch`` of both run round-robin, so the difference
between the two is not swamped by the machine's drift between separate runs. ``worker``
(``python -c pass`` with the job environment, the bootstrap and runtime zip written by that
copy of the code) is measured A/B the same way.
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
        importlib.import_module(f"bench_patch.mod{{i:02d}}")
    scale = params["bench.scale"]
    patching.wrap("app.algo:compute", lambda original, x: original(x) * scale)
'''

BARE = '''import os, runpy, sys, types
root, recipe = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
os.chdir(recipe)
sys.path.insert(0, recipe)
import bench_patch
bench_patch.install(types.MappingProxyType({"bench.scale": 2}))
sys.argv = ["app.train"]
runpy.run_module("app.train", run_name="__main__", alter_sys=True)
'''


def build(base: Path, plugin_mib: float = 0) -> tuple[Path, Path]:
    from starforge.cluster.digest import digest_of_map, file_map
    from starforge.cluster.jobspec import SCHEMA, JobSpec, write_spec

    job = base / "job"
    plugin = job / "forge_plugins" / "bench-patch"
    (plugin / "bench_patch").mkdir(parents=True)
    (plugin / "bench_patch" / "__init__.py").write_text(INIT.format())
    for i in range(1, 20):
        (plugin / "bench_patch" / f"mod{i:02d}.py").write_text(MODULE.format(i=i))
    if plugin_mib:
        # Data the plugin never touches, up to plugin_mib MiB in all (pseudo-random bytes:
        # what a file system and sha256 see for weights or a dataset shard).
        used = sum(p.stat().st_size for p in plugin.rglob("*.py"))
        size = int(plugin_mib * 2**20) - used
        (plugin / "bench_patch" / "table.bin").write_bytes(os.urandom(size))
    recipe = job / "recipe" / "app"
    recipe.mkdir(parents=True)
    (recipe / "__init__.py").write_text("")
    (recipe / "algo.py").write_text("def compute(x):\n    return x + 1\n")
    (recipe / "train.py").write_text("from app import algo\nassert algo.compute(1) == 4\n")
    files = file_map(plugin)
    assert len(files) == (21 if plugin_mib else 20)
    spec = {
        "schema": SCHEMA, "id": "bench-1", "name": "bench", "created": "2026-01-01T00:00:00Z",
        "entrypoint": ["python", "-m", "app.train"], "hyperparams": {"bench.scale": 2},
        "plugins": [{"owner": "bench", "name": "bench-patch", "version": "1.0.0", "digest": digest_of_map(files),
                     "kind": "algorithm", "load": "eager", "entrypoint": "bench_patch:install",
                     "requires": {"core": ">=0.1"}, "top_level": ["bench_patch"], "files": files}],
        "recipe": {"plugins": []}, "core_version": "0.1.0",
    }
    write_spec(JobSpec.from_dict(spec), job / "jobspec.json")
    # The same job without `requires`: what checking it costs.
    plain = base / "job-no-requires"
    shutil.copytree(job, plain)
    del spec["plugins"][0]["requires"]
    write_spec(JobSpec.from_dict(spec), plain / "jobspec.json")
    # The node entry's jobs: the zip staging writes; one names a bare venv as the job's Python.
    from starforge.cluster.runtime_zip import write_runtime_zip

    venv = base / "bare-venv"
    subprocess.run([os.path.join(sys.base_prefix, "bin", "python3"), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    for name, python in (("job-entry", None), ("job-entry-other", str(venv / "bin" / "python"))):
        entry_job = base / name
        shutil.copytree(job, entry_job, ignore=shutil.ignore_patterns(".forge-runtime"))
        if python:
            with_requires = json.loads((job / "jobspec.json").read_text())
            write_spec(JobSpec.from_dict(dict(with_requires, python=python)), entry_job / "jobspec.json")
        (entry_job / ".forge-runtime").mkdir()
        write_runtime_zip(str(entry_job / ".forge-runtime" / "starforge-runtime.zip"))
    bare_copy = base / "bare-plugin"
    shutil.copytree(plugin, bare_copy)
    (base / "bare.py").write_text(BARE)
    return job, bare_copy


def entry_args(job: Path) -> list:
    """``<job>/.forge-runtime/starforge-runtime.zip --spec <job>/jobspec.json``: how backends start a job."""
    return [str(job / ".forge-runtime" / "starforge-runtime.zip"), "--spec", str(job / "jobspec.json")]


def timed(argv, env, cwd) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+system) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{argv} failed ({proc.returncode}):\n{proc.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu


def compare(sources: list, runs: int, plugin_mib: float = 0) -> int:
    """A/B: ``bare``, ``launch`` and ``worker`` for each source tree, each in its own fresh venv."""
    import packaging

    with tempfile.TemporaryDirectory(prefix="forge-launch-bench-") as tmp:
        base = Path(tmp)
        job, bare_copy = build(base, plugin_mib)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("FORGE_") and k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
        base_python = os.path.join(sys.base_prefix, "bin", "python3")
        variants = {}
        for i, src in enumerate(sources):
            venv = base / f"venv{i}"
            subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True)
            py = str(venv / "bin" / "python")
            site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  check=True, capture_output=True, text=True).stdout.strip()
            shutil.copytree(os.path.dirname(packaging.__file__), os.path.join(site, "packaging"))
            Path(site, "starforge_source.pth").write_text(os.path.abspath(src) + "\n")
            e = dict(env, FORGE_HOME=str(base / f"home{i}"))
            j = base / f"job{i}"
            shutil.copytree(job, j)
            b = base / f"bare-plugin{i}"
            shutil.copytree(bare_copy, b)
            variants[f"bare {i}"] = ([py, str(base / "bare.py"), str(b), str(j / "recipe")], e)
            variants[f"launch {i}"] = ([py, "-m", "starforge.launch", "--spec", str(j / "jobspec.json")], e)
            # The job environment as this copy of the code writes it (bootstrap, runtime zip).
            boot = subprocess.run(
                [py, "-c", "import json, sys; from starforge.launch import bootstrap_env; "
                           "print(json.dumps(bootstrap_env(sys.argv[1])))", str(j)],
                env=e, check=True, capture_output=True, text=True,
            ).stdout
            variants[f"worker {i}"] = ([py, "-c", "pass"], dict(e, **json.loads(boot)))
        for _ in range(2):  # warm: __pycache__, caches, runtime zip
            for argv, e in variants.values():
                timed(argv, e, str(base))
        wall: dict[str, list] = {k: [] for k in variants}
        cpu: dict[str, list] = {k: [] for k in variants}
        for _ in range(runs):
            for name, (argv, e) in variants.items():
                w, c = timed(argv, e, str(base))
                wall[name].append(w * 1000)
                cpu[name].append(c * 1000)
        # The plugin's own share of a worker's start, as its provenance records it (check,
        # import, install): free of the interpreter's and the runtime zip's start-up noise.
        plugin_ms = {i: [rec["plugins"][0]["seconds"] * 1000
                         for rec in map(json.loads, (p.read_text() for p in (base / f"job{i}" / "provenance").glob("*.json")))
                         if rec["role"] == "worker" and rec["plugins"][0].get("seconds") is not None]
                     for i in range(len(sources))}
    med = statistics.median
    size = f", plugin {plugin_mib:g} MiB" if plugin_mib else ""
    print(f"python {sys.version.split()[0]}, {runs} runs each, interleaved{size}; median per process (ms)")
    for i, src in enumerate(sources):
        b, ln, wk = f"bare {i}", f"launch {i}", f"worker {i}"
        print(f"  {src}: bare wall {med(wall[b]):6.2f} cpu {med(cpu[b]):6.2f} | launch wall {med(wall[ln]):6.2f} "
              f"cpu {med(cpu[ln]):6.2f} | overhead wall {med(wall[ln]) - med(wall[b]):+.2f} cpu {med(cpu[ln]) - med(cpu[b]):+.2f}"
              f" | worker wall {med(wall[wk]):6.2f} cpu {med(cpu[wk]):6.2f} (its plugin {med(plugin_ms[i]):6.2f})")
    return 0


def worker_check(runs: int, plugin_mib: float) -> int:
    """The plugin check of a worker's start, in this process, before and after.

    ``whole tree``: what every process did before (``verify_tree``: read and digest every
    file). ``listing + imported``: what a worker does now: the per-file map bound to the
    digest, the listing, and the hash of each module ``install`` imports (all 20).
    """
    from starforge.cluster.digest import HashedFiles, check_bound, check_listing, verify_tree
    from starforge.cluster.jobspec import read_spec

    with tempfile.TemporaryDirectory(prefix="forge-launch-bench-") as tmp:
        job, _ = build(Path(tmp), plugin_mib)
        entry = read_spec(str(job / "jobspec.json")).plugins[0]
        root = str(job / "forge_plugins" / entry.name)
        modules = [rel for rel in entry.files if rel.endswith(".py")]

        def whole() -> None:
            verify_tree(root, entry.tree_digest, entry.files)

        def lazy() -> None:
            check_bound(entry.tree_digest, entry.files)
            check_listing(root, entry.files)
            files = HashedFiles(root, entry.files)
            for rel in modules:
                files[rel]

        times: dict[str, list] = {"whole tree": [], "listing + imported": []}
        for _ in range(runs + 2):
            for name, fn in (("whole tree", whole), ("listing + imported", lazy)):
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1000)
    print(f"python {sys.version.split()[0]}, {runs} runs each, interleaved, plugin {plugin_mib:g} MiB, "
          f"{len(entry.files)} files; median ms of a worker's plugin check")
    for name, values in times.items():
        print(f"  {name:20s} {statistics.median(values[2:]):8.2f} ms")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--compare", nargs="+", metavar="SRC",
                    help="directories holding starforge/ to measure A/B (each in a fresh venv)")
    ap.add_argument("--plugin-mib", type=float, default=0, metavar="N",
                    help="bring the plugin to N MiB with a data file it never reads")
    ap.add_argument("--worker-check", action="store_true",
                    help="time a worker's plugin check in this process: whole tree (before) vs listing + imported files")
    args = ap.parse_args()
    if args.worker_check:
        return worker_check(args.runs, args.plugin_mib)
    if args.compare:
        return compare(args.compare, args.runs, args.plugin_mib)
    with tempfile.TemporaryDirectory(prefix="forge-launch-bench-") as tmp:
        base = Path(tmp)
        job, bare_copy = build(base, args.plugin_mib)
        # Normal interpreters keep __pycache__ for installed code: measure that case.
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("FORGE_") and k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
        env["FORGE_HOME"] = str(base / "home")
        py = sys.executable
        from starforge.launch import bootstrap_env

        worker_env = dict(env, **bootstrap_env(job))
        zip_env = dict(env, PYTHONPATH=str(job / ".forge-runtime" / "starforge-runtime.zip"))
        variants = {
            "python": ([py, "-c", "pass"], env),
            "bare": ([py, str(base / "bare.py"), str(bare_copy), str(job / "recipe")], env),
            "launch": ([py, "-m", "starforge.launch", "--spec", str(job / "jobspec.json")], env),
            "launch-zip": ([py, "-m", "starforge.launch", "--spec", str(job / "jobspec.json")], zip_env),
            "worker": ([py, "-c", "pass"], worker_env),
            "launch-norequires": ([py, "-m", "starforge.launch", "--spec", str(base / "job-no-requires" / "jobspec.json")], env),
            "entry": ([py, *entry_args(base / "job-entry")], env),
            "entry-other": ([os.path.join(sys.base_prefix, "bin", "python3"), *entry_args(base / "job-entry-other")], env),
        }
        for argv, e in variants.values():  # warm: __pycache__ of the interpreter and site-packages
            timed(argv, e, str(base))
        wall: dict[str, list] = {k: [] for k in variants}
        cpu: dict[str, list] = {k: [] for k in variants}
        for _ in range(args.runs):
            for name, (argv, e) in variants.items():
                w, c = timed(argv, e, str(base))
                wall[name].append(w)
                cpu[name].append(c)
    med = {k: statistics.median(v) * 1000 for k, v in wall.items()}
    cmed = {k: statistics.median(v) * 1000 for k, v in cpu.items()}
    print(f"python {sys.version.split()[0]}, {args.runs} runs each, interleaved; median per process")
    for name in variants:
        print(f"  {name:18s} wall {med[name]:7.1f} ms   cpu {cmed[name]:7.1f} ms")
    for label, m in (("wall", med), ("cpu", cmed)):
        print(f"  launcher overhead over bare ({label}): {m['launch'] - m['bare']:+.1f} ms installed, "
              f"{m['launch-zip'] - m['bare']:+.1f} ms from the job's runtime zip, "
              f"{m['launch-norequires'] - m['bare']:+.1f} ms without requires; node entry "
              f"{m['entry'] - m['bare']:+.1f} ms same Python, {m['entry-other'] - m['bare']:+.1f} ms another Python")
    print(json.dumps({"wall_ms": med, "cpu_ms": cmed}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
