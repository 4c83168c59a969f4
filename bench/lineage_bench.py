"""What lineage costs (SPEC §18): the end of an attempt, and the digests made later.

1. **The end of an attempt** (`starforge.cluster.lineage.record_attempt_end`: the outputs
   manifest and the sidecars), with an empty `work/` and one empty declared directory, and
   with 10,000 files in the declared directory: in-process (as the local supervisor runs
   it) and as the Slurm collect step runs it (`python3 -m starforge.cluster.lineage` with the
   runtime on `PYTHONPATH`, against `python3 -c pass`). Goals: +20 ms (empty), 0.5 s
   (10,000 files).
2. **`forge jobs outputs ID --hash` over 2 GB** (8 files of 256 MiB), the digest cache
   emptied before each run, against `sha256sum` of the same files (and, for reference,
   `openssl dgst -sha256`, which uses the CPU's SHA instructions as hashlib does; Debian's
   coreutils `sha256sum` does not). Goal: within 1.2x of `sha256sum`.
3. **`forge trace` of a 1 GB checkpoint copied elsewhere**, against `sha256sum` of the copy:
   with the job's own file already digested (`jobs outputs --hash` ran, or an earlier
   trace: the cache holds it) and with nothing cached (both files read). Goal: within 1.2x.

Runs are interleaved round-robin with the page cache warm; the median and the quartiles of
the runs are printed. Recorded, not gating.

    python bench/lineage_bench.py [--runs N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import starforge
from starforge.cluster.jobspec import JobSpec, example, write_spec
from starforge.cluster.lineage import record_attempt_end
from starforge.jobs.jobrecord import JobRecord
from starforge.jobs.store import JobStore

MIB = 1 << 20


def spread(values: list) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"median {q[1]:.4f} s (q1-q3 {q[0]:.4f} to {q[2]:.4f}, {len(values)} runs)"


def interleaved(fns: dict, runs: int) -> dict:
    times: dict = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def job_dir(root: Path, declared: Path) -> Path:
    job = root / "job"
    (job / "work").mkdir(parents=True)
    declared.mkdir(parents=True, exist_ok=True)
    write_spec(JobSpec.from_dict(dict(example(), lineage={"outputs": [str(declared)]})), job / "jobspec.json")
    return job


def fill(root: Path, files: int) -> None:
    for i in range(files):
        d = root / f"shard{i // 100:03d}"
        d.mkdir(exist_ok=True)
        (d / f"f{i:05d}.bin").write_bytes(b"x" * 64)


def big_file(path: Path, size: int, seed: int) -> None:
    block = os.urandom(MIB)
    with open(path, "wb") as f:
        for i in range(size // MIB):
            f.write(block[seed % 251:] + block[: seed % 251] if i % 2 else block)


def end_of_attempt(base: Path, runs: int) -> None:
    runtime = base / "runtime"
    runtime.mkdir()
    (runtime / "starforge").symlink_to(Path(starforge.__file__).parent)
    for label, files in (("empty work/ and declared directory", 0), ("10,000 files", 10_000)):
        root = base / f"attempt-{files}"
        job = job_dir(root, root / "ckpt")
        fill(root / "ckpt", files)
        spec = str(job / "jobspec.json")
        env = dict(os.environ, PYTHONPATH=str(runtime))
        collect = [sys.executable, "-m", "starforge.cluster.lineage", "--spec", spec, "--job-dir", str(job), "--attempt", "0"]
        times = interleaved({
            "in-process (the launcher)": lambda: record_attempt_end(spec, str(job), attempt=0, host="bench", env={}),
            "collect step": lambda: subprocess.run(collect, env=env, check=True),
            "python3 -c pass": lambda: subprocess.run([sys.executable, "-c", "pass"], env=env, check=True),
        }, runs)
        added = [a - b for a, b in zip(times["collect step"], times["python3 -c pass"])]
        print(f"end of attempt, {label}:")
        print(f"  in-process, as the launcher records it: {spread(times['in-process (the launcher)'])}")
        print(f"  a process of its own over python3 -c pass (the Slurm collect step after a killed launcher): {spread(added)}")


def forge(home: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env["FORGE_HOME"] = str(home)
    subprocess.run([sys.executable, "-m", "starforge", *args], env=env, check=True, stdout=subprocess.DEVNULL)


def recorded_job(base: Path, files: list) -> tuple:
    """A job whose declared directory holds *files* (already there), recorded as its attempt's end did."""
    home = base / "home"
    job = base / "job"
    (job / "work").mkdir(parents=True)
    spec = JobSpec.from_dict(dict(example(), lineage={"outputs": [str(files[0].parent)]}))
    write_spec(spec, job / "jobspec.json")
    record_attempt_end(str(job / "jobspec.json"), str(job), attempt=0, host="bench", env={})
    JobStore(home / "jobs").save(JobRecord(id=spec.id, name=spec.name, backend="local", status="succeeded", dir=str(job),
                                           created=spec.created, plugins=[], params={}))
    return home, spec.id


def outputs_hash(base: Path, runs: int) -> None:
    ckpt = base / "outputs-2g" / "ckpt"
    ckpt.mkdir(parents=True)
    files = [ckpt / f"shard-{i}.bin" for i in range(8)]
    for i, f in enumerate(files):
        big_file(f, 256 * MIB, i)
    home, job_id = recorded_job(base / "outputs-2g", files)
    cache = home / "cache" / "output-digests.json"
    sums = ["sha256sum", *map(str, files)]
    subprocess.run(sums, check=True, stdout=subprocess.DEVNULL)  # warm the page cache
    times = interleaved({
        "forge jobs outputs --hash": lambda: (cache.unlink(missing_ok=True), forge(home, "jobs", "outputs", job_id, "--hash")),
        "sha256sum": lambda: subprocess.run(sums, check=True, stdout=subprocess.DEVNULL),
        "openssl dgst -sha256": lambda: subprocess.run(["openssl", "dgst", "-sha256", *map(str, files)], check=True,
                                                      stdout=subprocess.DEVNULL),
    }, runs)
    report("forge jobs outputs --hash over 2 GB (8 x 256 MiB), cache emptied before each run:", times,
           ["forge jobs outputs --hash"], "  / {ref}")


def trace_checkpoint(base: Path, runs: int) -> None:
    root = base / "trace-1g"
    (root / "ckpt").mkdir(parents=True)
    original = root / "ckpt" / "model.safetensors"
    big_file(original, 1024 * MIB, 7)
    home, _ = recorded_job(root, [original])
    copy = root / "elsewhere" / "model.safetensors"
    copy.parent.mkdir()
    shutil.copyfile(original, copy)
    cache = home / "cache" / "output-digests.json"
    subprocess.run(["sha256sum", str(original), str(copy)], check=True, stdout=subprocess.DEVNULL)
    forge(home, "trace", str(copy))
    warm = json.loads(cache.read_text())
    own = {k: v for k, v in warm.items() if str(original) in k}  # the job's file, digested once

    def with_cache(entries: dict) -> None:
        cache.write_text(json.dumps(entries))

    times = interleaved({
        "trace, job's digest cached": lambda: (with_cache(own), forge(home, "trace", str(copy))),
        "trace, nothing cached": lambda: (cache.unlink(missing_ok=True), forge(home, "trace", str(copy))),
        "sha256sum": lambda: subprocess.run(["sha256sum", str(copy)], check=True, stdout=subprocess.DEVNULL),
        "openssl dgst -sha256": lambda: subprocess.run(["openssl", "dgst", "-sha256", str(copy)], check=True,
                                                      stdout=subprocess.DEVNULL),
    }, runs)
    report("forge trace of a 1 GiB checkpoint copied elsewhere:", times,
           ["trace, job's digest cached", "trace, nothing cached"], "  {name} / {ref}")


def report(title: str, times: dict, subjects: list, label: str) -> None:
    """Print each variant's spread, then each subject's per-run ratio to sha256sum and openssl."""
    print(title)
    for name, values in times.items():
        print(f"  {name}: {spread(values)}")
    for name in subjects:
        for ref in ("sha256sum", "openssl dgst -sha256"):
            ratio = [a / b for a, b in zip(times[name], times[ref])]
            shown = label.format(name=name, ref=ref)
            print(f"{shown}: median {statistics.median(ratio):.3f}x (min {min(ratio):.3f}x, max {max(ratio):.3f}x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it")
    parser.add_argument("--only", choices=("attempt", "hash", "trace"))
    args = parser.parse_args()
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="lineage-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    try:
        if args.only in (None, "attempt"):
            end_of_attempt(base, args.runs)
        if args.only in (None, "hash"):
            outputs_hash(base, args.runs)
        if args.only in (None, "trace"):
            trace_checkpoint(base, args.runs)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
