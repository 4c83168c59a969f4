"""What `forge plan` costs over `forge submit --dry-run`, on the quickstart and the TRL example.

`forge submit --dry-run` resolves and checks the locked experiment and prints the JobSpec;
`forge plan` does the same, then stages the job into a temporary directory and runs the
launcher's load phase under the job's Python (verify, requires, import, install, the
targets imported), and removes it all. The difference is what the ledger costs.

Each experiment is copied into a scratch directory with a fresh FORGE_HOME, its plugins
published and locked; then both commands run N times interleaved (alternating which goes
first), after one warm-up of each. Prints per command the median wall and CPU time
(children included) with quartiles, and the median of the paired differences.

Usage::

    python bench/plan_bench.py [--runs 10] [--only quickstart,trl]

The TRL example needs the trainer venv ``.venv-trl`` (made by ``.ci/setup``); it is left
out when absent.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORGE = [sys.executable, "-m", "starforge"]
EXAMPLES = {
    "quickstart": ("quickstart", ["opsd-patch"], {}),
    "trl": ("trl", ["trl-dr-grpo"], {"TRL_PYTHON": str(REPO / ".venv-trl" / "bin" / "python")}),
}


def _run(argv, cwd, env) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 21):
        raise SystemExit(f"{' '.join(argv)} -> {proc.returncode}: {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _quartiles(values: list) -> str:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"{q[1] * 1000:7.0f} ms (IQR {q[0] * 1000:.0f}-{q[2] * 1000:.0f})"


def bench(name: str, runs: int, scratch: Path) -> None:
    example, plugins, extra = EXAMPLES[name]
    if name == "trl" and not Path(extra["TRL_PYTHON"]).exists():
        print(f"{name}: skipped (no .venv-trl)")
        return
    work = scratch / name
    exp = work / "exp"
    shutil.copytree(REPO / "examples" / example, exp, ignore=shutil.ignore_patterns(".forge", "plugins.lock.json", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
    env.update(FORGE_HOME=str(work / "home"), FORGE_OWNER="starforge", **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for plugin in plugins:
        subprocess.run(FORGE + ["plugin", "publish", str(REPO / "forge_plugins" / plugin)], cwd=work, env=env, check=True,
                       capture_output=True)
    subprocess.run(FORGE + ["lock", str(exp)], cwd=work, env=env, check=True, capture_output=True)
    commands = {"submit --dry-run": FORGE + ["submit", "--dry-run", str(exp)], "plan": FORGE + ["plan", str(exp)]}
    for argv in commands.values():
        _run(argv, work, env)  # warm-up
    results: dict = {k: [] for k in commands}
    for i in range(runs):
        order = list(commands) if i % 2 == 0 else list(reversed(commands))
        for key in order:
            results[key].append(_run(commands[key], work, env))
    print(f"{name} ({runs} interleaved runs each)")
    for key, rows in results.items():
        print(f"  {key:<17} wall {_quartiles([w for w, _ in rows])}   cpu {_quartiles([c for _, c in rows])}")
    diffs_wall = [p[0] - d[0] for p, d in zip(results["plan"], results["submit --dry-run"])]
    diffs_cpu = [p[1] - d[1] for p, d in zip(results["plan"], results["submit --dry-run"])]
    print(f"  plan - dry-run    wall {_quartiles(diffs_wall)}   cpu {_quartiles(diffs_cpu)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", default="quickstart,trl")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="plan-bench-"))
    try:
        print(f"load average before: {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
        for name in args.only.split(","):
            bench(name.strip(), args.runs, scratch)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
