"""Tree digest throughput against hashlib's sha256 and the coreutils pipeline.

Generates three trees in a temporary directory, warms the page cache, and reports the
best of several runs for each way of digesting them. Recorded, not gating; the targets
are printed next to the results.

    python bench/digest_bench.py [--repeat N] [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from starforge.cluster.digest import tree_digest

PIPELINE = "find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum"

# name, number of files, bytes per file, files per directory, target (single, two workers)
TREES = [
    ("small: 20 files / 200 KB", 20, 10_000, 5, None),
    ("medium: 2,000 files / 50 MB", 2_000, 25_000, 50, (0.5, None)),
    ("large: 10 files x 20 MB", 10, 20_000_000, 10, (0.9, 1.5)),
]


def make_tree(root: str, count: int, size: int, per_dir: int) -> int:
    seed = os.urandom(1 << 20)
    for i in range(count):
        d = os.path.join(root, f"pkg{i // per_dir:03d}", f"sub{i % 3}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"file{i:05d}.bin"), "wb") as f:
            left = size
            offset = i * 7919 % len(seed)
            while left:
                part = seed[offset : offset + left]
                f.write(part)
                left -= len(part)
                offset = 0
    return count * size


def cpu_seconds() -> float:
    """CPU time of this process (all threads) and of its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def best_interleaved(fns, repeat: int) -> list[tuple[float, float]]:
    """Best wall and best CPU time of each function, run round-robin so passing load hits
    them all alike."""
    walls = [[] for _ in fns]
    cpus = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            c0 = cpu_seconds()
            t0 = time.perf_counter()
            fn()
            walls[i].append(time.perf_counter() - t0)
            cpus[i].append(cpu_seconds() - c0)
    return [(min(w), min(c)) for w, c in zip(walls, cpus)]


def sha256_rate(repeat: int) -> tuple[float, float]:
    """Bytes per second of hashlib.sha256 over one in-memory 64 MiB buffer, one core:
    by wall time and by CPU time."""
    buf = os.urandom(64 << 20)
    (wall, cpu), = best_interleaved([lambda: hashlib.sha256(buf).digest()], repeat)
    return len(buf) / wall, len(buf) / cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", help="generate the trees here and keep them")
    args = parser.parse_args()

    base = args.keep or tempfile.mkdtemp(prefix="digest-bench-")
    os.makedirs(base, exist_ok=True)
    try:
        rate, cpu_rate = sha256_rate(args.repeat)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
        print(f"hashlib.sha256, one core, in memory: {rate / 1e6:8.1f} MB/s by wall time, {cpu_rate / 1e6:.1f} MB/s by CPU time")
        print()
        header = (
            f"{'tree':30} {'method':22} {'wall':>9} {'MB/s':>8} {'x sha256':>9} {'x coreutils':>12}"
            f" {'cpu':>9} {'x sha256 cpu':>13}"
        )
        print(header)
        print("-" * len(header))
        for label, count, size, per_dir, target in TREES:
            root = os.path.join(base, label.split(":")[0])
            if not os.path.isdir(root):
                make_tree(root, count, size, per_dir)
            total = count * size
            expected = tree_digest(root)  # also warms the page cache
            out = subprocess.run(PIPELINE, shell=True, cwd=root, check=True, capture_output=True, text=True).stdout
            assert expected == "sf1:" + out.split()[0], "tree digest disagrees with the coreutils pipeline"
            methods = [
                ("coreutils pipeline", lambda: subprocess.run(PIPELINE, shell=True, cwd=root, check=True, capture_output=True)),
                ("tree_digest workers=1", lambda: tree_digest(root, workers=1)),
                ("tree_digest workers=2", lambda: tree_digest(root, workers=2)),
                ("tree_digest default", lambda: tree_digest(root)),
            ]
            rows = list(zip([m for m, _ in methods], best_interleaved([fn for _, fn in methods], args.repeat)))
            t_shell = rows[0][1][0]
            for method, (t, cpu) in rows:
                ratio = total / t / rate
                cpu_ratio = total / cpu / cpu_rate if cpu > 0 else float("nan")
                print(
                    f"{label:30} {method:22} {t * 1000:7.1f}ms {total / t / 1e6:8.1f} {ratio:8.2f}x {t_shell / t:11.2f}x"
                    f" {cpu * 1000:7.1f}ms {cpu_ratio:12.2f}x"
                )
            if target:
                single, double = target
                print(f"{'':30} targets: workers=1 >= {single}x sha256" + (f", workers=2 >= {double}x" if double else ""))
            print()
        print(f"load average at the end: {os.getloadavg()[0]:.2f} (other processes skew the two-worker rows most)")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
