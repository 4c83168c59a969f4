"""Bundles: ``forge bundle create`` and ``push`` of 10 plugins against raw ``tar`` and raw blob upload.

Sets up, under a temporary FORGE_HOME: a directory registry holding N plugins of S MB of
random bytes each (packed and published directly, so no check limit applies; gzip cannot
shrink random bytes), an experiment locking all of them, and its own Debian
``docker-registry`` on 127.0.0.1. Then, for each round, times:

- ``create``: :func:`create_bundle` with the archives already in the cache (the steady state:
  read the lock, ask the registry for each version, write the layout tar hashing every blob);
- ``raw tar``: GNU ``tar cf`` of the same N archive files from the cache;
- ``push``: :func:`push_bundle` into an empty repository prefix of the OCI registry (verify
  every blob, unpack every archive against its tree digest, then publish each version);
- ``raw upload``: the same N archives as plain blob uploads with httpx (POST, then one PUT),
  unchecked, into another prefix;
- ``push dir`` / ``raw copy``: the same into an empty directory registry vs ``shutil.copyfile``
  of the N archives (for information: a kernel copy with no hashing has no counterpart).

Reports the best round of each and the ratios (target for create and push: ≥ 0.5× raw).
Recorded, not gating.

    python bench/bundle_bench.py [--plugins 10] [--size-mb 20] [--repeat 3]

With a lowered plugin size limit (archive unpack limit), pass a ``--size-mb`` under it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from registry_bench import raw_push, start_registry  # the script's own directory is on sys.path

TARGET = 0.5


def make_plugins(work: Path, count: int, size: int, registry_dir: Path) -> list[str]:
    from starforge.package_format.archive import pack_tree
    from starforge.registry.base import PublishedVersion
    from starforge.registry.directory import DirectoryRegistry

    reg = DirectoryRegistry(registry_dir)
    requests = []
    for i in range(count):
        name = f"bench-plugin-{i}"
        module = name.replace("-", "_")
        root = work / "src" / name
        (root / module).mkdir(parents=True)
        (root / "plugin.yaml").write_text(
            f"schema: forge/plugin/v1\nname: {name}\nversion: '1.0.0'\nkind: algorithm\nentrypoint: {module}:install\n")
        (root / module / "__init__.py").write_text("def install(params):\n    pass\n")
        with open(root / module / "weights.bin", "wb") as f:
            for _ in range(size // (1 << 20)):
                f.write(os.urandom(1 << 20))
        names = ["plugin.yaml", f"{module}/__init__.py", f"{module}/weights.bin"]
        archive = work / f"{name}.tar.gz"
        packed = pack_tree(root, names, archive)
        manifest = {"schema": "forge/plugin/v1", "name": name, "version": "1.0.0", "kind": "algorithm",
                    "entrypoint": f"{module}:install", "load": "eager"}
        reg.publish(archive, PublishedVersion(owner="bench", name=name, version="1.0.0", tree_digest=packed.tree_digest,
                                              artifact_digest=packed.artifact_digest, manifest=manifest,
                                              files=packed.files, top_level=(module,)))
        archive.unlink()
        shutil.rmtree(root)
        requests.append(f"bench/{name}@1.0.0")
    return requests


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugins", type=int, default=10)
    parser.add_argument("--size-mb", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="forge-bundle-bench-"))
    os.environ["FORGE_HOME"] = str(work / "home")
    os.environ.pop("FORGE_REGISTRY", None)
    from starforge.bundle import create_bundle, push_bundle
    from starforge.experiment.config import load_experiment
    from starforge.experiment.lock import lock_experiment
    from starforge.registry.directory import DirectoryRegistry

    proc, port = start_registry(work)
    base = f"http://127.0.0.1:{port}"
    times: dict[str, list] = {k: [] for k in ("create", "raw tar", "push", "raw upload", "push dir", "raw copy")}
    try:
        registry_dir = work / "registry"
        requests = make_plugins(work, args.plugins, args.size_mb << 20, registry_dir)
        exp = work / "exp"
        exp.mkdir()
        (exp / "forge.yaml").write_text("schema: forge/job/v1\nname: bench\nentrypoint: python -c pass\n"
                                        f"plugins: [{', '.join(requests)}]\nconfig: {{}}\n")
        lock = lock_experiment(load_experiment(exp), DirectoryRegistry(registry_dir)).lock
        os.environ["FORGE_REGISTRY"] = str(registry_dir)
        create_bundle(exp, work / "warm.tar")  # fills the cache
        from starforge.state.home import home

        cache = home().blob_cache
        archives = [next(cache.rglob(e.artifact_digest.partition(":")[2])) for e in lock.plugins]
        total = sum(a.stat().st_size for a in archives)
        for i in range(args.repeat):
            bundle = work / f"round{i}.tar"
            times["create"].append(timed(lambda: create_bundle(exp, bundle)))
            rel = [str(a.relative_to(cache)) for a in archives]
            times["raw tar"].append(timed(lambda: subprocess.run(["tar", "cf", str(work / f"raw{i}.tar"), "-C", str(cache), *rel],
                                                                 check=True)))
            url = f"oci://127.0.0.1:{port}/push{i}"
            times["push"].append(timed(lambda: push_bundle(bundle, url)))

            def upload() -> None:
                for n, a in enumerate(archives):
                    data = a.read_bytes()
                    raw_push(base, f"raw{i}/blob{n}", data, "sha256:" + hashlib.sha256(data).hexdigest())

            times["raw upload"].append(timed(upload))
            times["push dir"].append(timed(lambda: push_bundle(bundle, str(work / f"far{i}"))))
            copies = work / f"copies{i}"
            copies.mkdir()
            times["raw copy"].append(timed(lambda: [shutil.copyfile(a, copies / a.name) for a in archives]))
            for p in (bundle, work / f"raw{i}.tar"):
                p.unlink()
            shutil.rmtree(copies)
            shutil.rmtree(work / f"far{i}")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)

    mb = total / 1e6
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"{args.plugins} plugins x {args.size_mb} MB random bytes: {mb:.1f} MB of archives, best of {args.repeat} rounds")
    print(f"{'operation':<11} {'seconds':>8} {'MB/s':>8}")
    for name, values in times.items():
        print(f"{name:<11} {min(values):8.3f} {mb / min(values):8.1f}")
    for ours, raw in (("create", "raw tar"), ("push", "raw upload")):
        ratio = min(times[raw]) / min(times[ours])
        verdict = "ok" if ratio >= TARGET else "below target"
        print(f"{ours} / {raw}: {ratio:.2f}x raw throughput (target >= {TARGET}x): {verdict}")
    ratio = min(times["raw copy"]) / min(times["push dir"])
    print(f"push dir / raw copy: {ratio:.2f}x (no target: the raw copy is an unchecked page-cache copy)")


if __name__ == "__main__":
    main()
