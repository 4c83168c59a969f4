"""Racing OCI publishers: how often do two publishers of one version both hear "published"?

Starts its own ``docker-registry`` on 127.0.0.1 (free port, temporary storage). Each round,
8 processes (separate laptops, in effect) each pack a plugin with different content under
the same version, wait on a barrier, and call :meth:`OciRegistry.publish` at once. A round
is *double* when two or more of them return a created version; exactly one should win and
the others report the conflict (exit 8). Run it with the settle delay off and on:

    python bench/oci_publish_race.py --rounds 30 --publishers 8 --settle 0
    python bench/oci_publish_race.py --rounds 30 --publishers 8            # default delay

Recorded in docs/registry.md, not gating.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from registry_bench import start_registry  # noqa: E402

from starforge.errors import ImmutableVersionError  # noqa: E402
from starforge.package_format.archive import pack_tree  # noqa: E402
from starforge.registry.base import PublishedVersion  # noqa: E402
from starforge.registry.oci import SETTLE_DELAY, OciRegistry  # noqa: E402


def packed(work: Path, version: str, i: int) -> tuple[Path, PublishedVersion]:
    root = work / f"src-{version}-{i}"
    root.mkdir(parents=True)
    (root / "plugin.yaml").write_text(f"schema: forge/plugin/v1\nname: race\nversion: {version}\nkind: algorithm\n"
                                      "entrypoint: race:install\n")
    (root / "race.py").write_text(f"def install(params):\n    return {i}\n")
    p = pack_tree(root, ["plugin.yaml", "race.py"], work / f"race-{version}-{i}.tar.gz")
    info = PublishedVersion(owner="bench", name="race", version=version, tree_digest=p.tree_digest,
                            artifact_digest=p.artifact_digest,
                            manifest={"schema": "forge/plugin/v1", "name": "race", "version": version},
                            files=p.files, top_level=("race",))
    return Path(p.path), info


def publisher(url, settle, archive, info, barrier, results) -> None:
    reg = OciRegistry(url, settle_delay=settle)
    barrier.wait()
    try:
        results.put(("created" if reg.publish(archive, info).created else "same", info.tree_digest))
    except ImmutableVersionError:
        results.put(("conflict", info.tree_digest))
    except Exception as exc:  # reported, not hidden: a bench shows what happened
        results.put((f"error: {exc}", info.tree_digest))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--publishers", type=int, default=8)
    parser.add_argument("--settle", type=float, default=SETTLE_DELAY, help=f"seconds (default {SETTLE_DELAY})")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="forge-race-bench-"))
    proc, port = start_registry(work)
    url = f"oci://127.0.0.1:{port}/forge"
    ctx = mp.get_context("fork")
    double = 0
    try:
        for r in range(args.rounds):
            version = f"1.0.{r}"
            plugins = [packed(work, version, i) for i in range(args.publishers)]
            barrier, results = ctx.Barrier(args.publishers), ctx.Queue()
            procs = [ctx.Process(target=publisher, args=(url, args.settle, a, info, barrier, results)) for a, info in plugins]
            for p in procs:
                p.start()
            outcomes = [results.get(timeout=120) for _ in procs]
            for p in procs:
                p.join()
            created = [d for what, d in outcomes if what == "created"]
            errors = [what for what, _ in outcomes if what.startswith("error")]
            final = OciRegistry(url).get("bench", "race", version).tree_digest
            if len(created) > 1:
                double += 1
            flag = "DOUBLE" if len(created) > 1 else ("ok" if created == [final] else "LOST")
            print(f"round {r + 1:3d}: {len(created)} created, {sum(w == 'conflict' for w, _ in outcomes)} conflicts"
                  f"{', errors: ' + '; '.join(errors) if errors else ''}  {flag}", flush=True)
        print(f"\n{double} of {args.rounds} rounds of {args.publishers} racing publishers ended with two or more "
              f"successes (settle delay {args.settle} s)")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
