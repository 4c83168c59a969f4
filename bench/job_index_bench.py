"""The job index: ``forge jobs list --plugin`` over many job records, warm and rebuilt.

Writes N synthetic job records in the real format (the jobs store's own ``save``) under a
temporary FORGE_HOME, each with three plugin pins and six parameters, a tenth of them
tombstones; then times, as processes of their own (what a user waits for):

- ``python -c pass`` (the interpreter's own start, the baseline);
- ``forge jobs list --plugin owner/name@version`` with no index (rebuilt from nothing);
- the same again (warm: the index is in step, one directory listing checks it);
- the same after one record changed (written as the store writes, a rename: one record read again);
- ``forge --version`` (the CLI's own start, for scale).

And, in this process, what the record's pins and parameters add to saving a job record at
submit (``JobStore.save`` of a record with and without them, mean over many saves).

Reports the median and spread of each over the rounds. Targets (recorded, not gating):
warm ≤ 0.3 s, rebuilt ≤ 1.5 s at 10,000 records; ≤ 20 ms added to submit.

    python bench/job_index_bench.py [--records 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def make_records(store_root: Path, count: int) -> None:
    from starforge.jobs.jobrecord import JobRecord
    from starforge.jobs.store import JobStore

    store = JobStore(store_root)
    for i in range(count):
        pins = [{"ref": f"team{i % 7}/dr-grpo@1.{i % 13}.0", "digest": "sf1:%064x" % (i % 91)},
                {"ref": f"team{i % 5}/opsd-patch@2.{i % 3}.0", "digest": "sf1:%064x" % (1000 + i % 17)},
                {"ref": "recipe:toy@0.1", "digest": "sf1:%064x" % 7}]
        params = {"grpo.lr": 1e-6 * (1 + i % 4), "grpo.group_size": 8, "opsd.scale": 0.5 * (i % 3),
                  "trainer.steps": 1000 + i, "tag": f"run-{i % 50}", "use_kl": bool(i % 2)}
        record = JobRecord(id=f"exp-{i:06d}", name="exp", backend="local", status="succeeded",
                           dir=f"/nonexistent/exp-{i:06d}", created=f"2026-11-{1 + i % 28:02d}T10:{i % 60:02d}:00Z",
                           exit_code=0, plugins=pins, params=params)
        store.save(record)
        if i % 10 == 0:
            store.remove(record.id, record)


def timed(argv: list, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def save_cost(store_root: Path, rounds: int) -> tuple:
    from starforge.jobs.jobrecord import JobRecord
    from starforge.jobs.store import JobStore

    store = JobStore(store_root)
    pins = [{"ref": f"alice/plugin-{k}@1.0.0", "digest": "sf1:%064x" % k} for k in range(3)]
    params = {f"group.key{k}": k * 0.5 for k in range(12)}
    out = []
    for with_pins in (False, True):
        start = time.perf_counter()
        for i in range(rounds):
            store.save(JobRecord(id=f"save-{with_pins}-{i}", name="s", backend="local", status="pending", dir="/x",
                                 created="2026-12-01T10:00:00Z", plugins=pins if with_pins else None,
                                 params=params if with_pins else None))
        out.append((time.perf_counter() - start) / rounds)
    return tuple(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forge-job-index-bench-"))
    try:
        env = dict(os.environ, FORGE_HOME=str(work / "home"))
        store_root = work / "home" / "jobs"
        started = time.perf_counter()
        make_records(store_root, args.records)
        print(f"{args.records} records written in {time.perf_counter() - started:.1f} s")
        forge = [sys.executable, "-m", "starforge"]
        query = [*forge, "jobs", "list", "--plugin", "team3/dr-grpo@1.4.0"]
        rows: dict = {"python -c pass": [], "rebuilt": [], "warm": [], "one changed": [], "forge --version": []}
        for _ in range(args.repeat):
            rows["python -c pass"].append(timed([sys.executable, "-c", "pass"], env))
            (store_root / ".index" / "jobs.sqlite").unlink(missing_ok=True)
            rows["rebuilt"].append(timed(query, env))
            rows["warm"].append(timed(query, env))
            one = store_root / "exp-000005.json"  # rewritten as the store writes: a temp file renamed over it
            (store_root / ".exp-000005.tmp").write_text(one.read_text().replace('"exit_code": 0', '"exit_code": 1'))
            os.replace(store_root / ".exp-000005.tmp", one)
            rows["one changed"].append(timed(query, env))
            rows["forge --version"].append(timed([*forge, "--version"], env))
        base = statistics.median(rows["python -c pass"])
        for name, values in rows.items():
            med = statistics.median(values)
            print(f"{name:16s} median {med:6.3f} s  (min {min(values):.3f}, max {max(values):.3f})  {med / base:5.1f}x python -c pass")
        plain, pinned = save_cost(work / "save", 300)
        print(f"record save at submit: {plain * 1000:.2f} ms without pins/params, {pinned * 1000:.2f} ms with "
              f"(+{(pinned - plain) * 1000:.2f} ms)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
