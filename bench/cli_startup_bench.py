"""Start-up cost of the CLI: ``forge --help`` against a bare ``python -c pass``.

Runs each command several times as a real subprocess and reports the best and median
wall time; the target is ``forge --help`` within 4x of the bare interpreter. Recorded,
not gating.

    python bench/cli_startup_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def timed(cases: list[tuple[str, list[str]]], repeat: int) -> dict[str, list[float]]:
    """Wall times of each command, run round-robin so passing load hits them all alike."""
    for _, cmd in cases:
        subprocess.run(cmd, check=True, capture_output=True)  # warm the page cache
    times: dict[str, list[float]] = {label: [] for label, _ in cases}
    for _ in range(repeat):
        for label, cmd in cases:
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            times[label].append(time.perf_counter() - t0)
    return times


def forge_command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m starforge``."""
    script = os.path.join(os.path.dirname(sys.executable), "forge")
    if os.path.exists(script):
        return [script]
    found = shutil.which("forge")
    return [found] if found else [sys.executable, "-m", "starforge"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    cases = [
        ("python -c pass", [sys.executable, "-c", "pass"]),
        ("forge --help", forge_command() + ["--help"]),
        ("forge --version", forge_command() + ["--version"]),
        ("forge plugin --help", forge_command() + ["plugin", "--help"]),
    ]
    results = timed(cases, args.repeat)
    base_best = min(results["python -c pass"])
    base_median = statistics.median(results["python -c pass"])
    print(f"python {sys.version.split()[0]}, {args.repeat} runs each, wall time, load average {os.getloadavg()[0]:.2f}")
    print(f"{'command':22} {'best':>8} {'median':>8} {'x python (best)':>16} {'x python (median)':>18}")
    for label, times in results.items():
        best, med = min(times), statistics.median(times)
        print(f"{label:22} {best * 1000:6.1f}ms {med * 1000:6.1f}ms {best / base_best:15.2f}x {med / base_median:17.2f}x")
    print("target: forge --help <= 4x python -c pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
