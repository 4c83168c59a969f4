"""``forge prep`` throughput against a plain Python loop doing the same work.

The same JSONL file, the same per-record function (the ``data-prep`` template as
``forge plugin init --kind data-prep`` generates it), the same output:

- **plain**: ``python -c`` in a fresh interpreter: read the file line by line,
  ``json.loads``, call the function, ``json.dumps`` (what ``forge prep`` writes:
  ``ensure_ascii=False``), write the line — the loop anyone would write, with none of
  forge's guarantees (no hashes, no provenance, no atomic rename, no fsync);
- **library**: ``starforge.prep.run.run_prep`` (the child process, the hashes of input and
  output, the temp file, fsync, rename, provenance), timed around the call;
- **cli**: ``forge prep DIR --input … --output …`` end to end (interpreter start, plugin
  digest, click, the child), wall time.

Round-robin, best of ``--repeat``, page cache warm. Prints records/s and the ratio to the
plain loop (goal: ``forge prep`` >= 0.5x plain).

    python bench/prep_bench.py --records 300000 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLAIN = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import {module} as plugin
step = plugin.install({{}})
dumps = json.JSONEncoder(ensure_ascii=False).encode
with open(sys.argv[2], "rb") as src, open(sys.argv[3], "w", encoding="utf-8") as out:
    for line in src:
        if not line.strip():
            continue
        result = step(json.loads(line))
        if result is not None:
            out.write(dumps(result) + "\n")
"""

LIBRARY = r"""
import sys, time
from starforge.prep.run import plugin_from_directory, prep_params, run_prep
plugin = plugin_from_directory(sys.argv[1])
params = prep_params(plugin, [])
t0 = time.perf_counter()
run_prep(plugin, params, sys.argv[2], sys.argv[3])
print(time.perf_counter() - t0)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    bin_dir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory(prefix="prep-bench-") as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FORGE_")}
        env.update(FORGE_HOME=str(work / "home"), FORGE_OWNER="bench", NO_COLOR="1")
        subprocess.run([str(bin_dir / "forge"), "plugin", "init", "bench-prep", "--kind", "data-prep"], cwd=work,
                       env=env, check=True, capture_output=True)
        plugin = work / "bench-prep"
        raw = work / "raw.jsonl"
        words = " ".join(f"word{i}" for i in range(24))
        with open(raw, "w") as f:
            for i in range(args.records):
                f.write(json.dumps({"id": i, "prompt": f"  {words}\n  {i} ", "answer": "yes" if i % 3 else "no",
                                    "meta": {"source": "bench", "tags": ["a", "b"]}}) + "\n")
        size = raw.stat().st_size
        runs: dict = {"plain": [], "library": [], "cli": []}
        outputs = {}
        for _ in range(args.repeat):
            for name in runs:
                out = work / f"out-{name}.jsonl"
                if name == "plain":
                    t0 = time.perf_counter()
                    subprocess.run([sys.executable, "-c", PLAIN.format(module="bench_prep"), str(plugin), str(raw), str(out)],
                                   env=env, check=True)
                    seconds = time.perf_counter() - t0
                elif name == "library":
                    done = subprocess.run([sys.executable, "-c", LIBRARY, str(plugin), str(raw), str(out)], env=env,
                                          check=True, capture_output=True, text=True)
                    seconds = float(done.stdout.strip())
                else:
                    t0 = time.perf_counter()
                    subprocess.run([str(bin_dir / "forge"), "prep", str(plugin), "--input", str(raw), "--output", str(out)],
                                   env=env, check=True, capture_output=True, cwd=work)
                    seconds = time.perf_counter() - t0
                runs[name].append(seconds)
                outputs[name] = out.read_bytes()
        assert outputs["plain"] == outputs["library"] == outputs["cli"], "the three runs wrote different output"
        load = os.getloadavg()[0]
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.2f}")
        print(f"{args.records} records, {size / 1e6:.1f} MB of JSONL, best of {args.repeat} (round-robin)")
        plain = min(runs["plain"])
        for name, times in runs.items():
            best = min(times)
            print(f"  {name:8s} {best:7.3f} s  {args.records / best:>10,.0f} records/s  {size / best / 1e6:6.1f} MB/s  "
                  f"{plain / best:5.2f}x plain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
