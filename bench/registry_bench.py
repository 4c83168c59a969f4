"""OCI registry transfer: ``forge`` publish/pull of a 50 MB plugin against raw blob transfer.

Starts its own ``docker-registry`` on 127.0.0.1 (free port, temporary storage), then, for
each round, packs a fresh plugin holding 50 MB of random bytes and measures:

- publish: :meth:`OciRegistry.publish` (tag checks, config blob, chunked layer upload,
  manifest, re-check);
- raw push: the same archive bytes with plain httpx, POST then one PUT, into another
  repository so nothing is deduplicated;
- pull: :meth:`OciRegistry.download` (streamed, hashed, written atomically);
- raw pull: a plain httpx streaming GET of the same blob into a file.

Reports the best round of each and the ratio (target: forge ≥ 0.5× raw). Recorded, not
gating.

    python bench/registry_bench.py [--repeat N] [--size-mb 50]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from starforge.package_format.archive import pack_tree
from starforge.registry.base import PublishedVersion
from starforge.registry.oci import OciRegistry

TARGET = 0.5


def start_registry(root: Path) -> tuple[subprocess.Popen, int]:
    binary = shutil.which("docker-registry")
    if binary is None:
        sys.exit("docker-registry is not installed (apt-get install docker-registry)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'storage'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: bench-{port}\n"
    )
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                return proc, port
        except httpx.TransportError:
            time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    sys.exit("docker-registry did not start")


def make_plugin(work: Path, version: str, size: int) -> tuple[Path, PublishedVersion]:
    root = work / f"src-{version}"
    (root / "bench_plugin").mkdir(parents=True)
    (root / "plugin.yaml").write_text(
        f"schema: forge/plugin/v1\nname: bench-plugin\nversion: {version}\nkind: algorithm\n"
        "entrypoint: bench_plugin:install\n")
    (root / "bench_plugin" / "__init__.py").write_text("def install(params):\n    pass\n")
    with open(root / "bench_plugin" / "weights.bin", "wb") as f:
        for _ in range(size // (1 << 20)):
            f.write(os.urandom(1 << 20))
    names = ["plugin.yaml", "bench_plugin/__init__.py", "bench_plugin/weights.bin"]
    packed = pack_tree(root, names, work / f"bench-{version}.tar.gz")
    info = PublishedVersion(owner="bench", name="bench-plugin", version=version, tree_digest=packed.tree_digest,
                            artifact_digest=packed.artifact_digest, manifest={"name": "bench-plugin"},
                            files=packed.files, top_level=("bench_plugin",))
    return Path(packed.path), info


def raw_push(base: str, repo: str, data: bytes, digest: str) -> None:
    with httpx.Client(timeout=120) as c:
        r = c.post(f"{base}/v2/{repo}/blobs/uploads/")
        r.raise_for_status()
        url = httpx.URL(base + "/").join(r.headers["location"]).copy_merge_params({"digest": digest})
        c.put(url, content=data, headers={"Content-Type": "application/octet-stream"}).raise_for_status()


def raw_pull(base: str, repo: str, digest: str, dest: Path) -> None:
    with httpx.Client(timeout=120) as c, c.stream("GET", f"{base}/v2/{repo}/blobs/{digest}") as r:
        r.raise_for_status()
        with open(dest, "wb") as f:
            for chunk in r.iter_bytes(1 << 20):
                f.write(chunk)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=50)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="forge-registry-bench-"))
    proc, port = start_registry(work)
    base = f"http://127.0.0.1:{port}"
    times = {"publish": [], "raw push": [], "pull": [], "raw pull": []}
    try:
        reg = OciRegistry(f"oci://127.0.0.1:{port}/forge")
        for i in range(args.repeat):
            archive, info = make_plugin(work, f"1.0.{i}", args.size_mb << 20)
            data = archive.read_bytes()
            digest = "sha256:" + hashlib.sha256(data).hexdigest()
            times["raw push"].append(timed(lambda: raw_push(base, f"raw/round{i}", data, digest)))
            times["publish"].append(timed(lambda: reg.publish(archive, info)))
            published = reg.get("bench", "bench-plugin", info.version)
            times["raw pull"].append(timed(lambda: raw_pull(base, f"raw/round{i}", digest, work / f"raw{i}")))
            times["pull"].append(timed(lambda: reg.download(published, work / f"pull{i}.tar.gz")))
            size = len(data)
            data = b""
            for p in (work / f"raw{i}", work / f"pull{i}.tar.gz", archive):
                p.unlink()
            shutil.rmtree(work / f"src-1.0.{i}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)

    mb = size / 1e6
    load = os.getloadavg()[0]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.2f}")
    print(f"archive: {mb:.1f} MB, best of {args.repeat} rounds, loopback docker-registry")
    print(f"{'operation':<10} {'seconds':>8} {'MB/s':>8}")
    for name, values in times.items():
        print(f"{name:<10} {min(values):8.3f} {mb / min(values):8.1f}")
    for ours, raw in (("publish", "raw push"), ("pull", "raw pull")):
        ratio = min(times[raw]) / min(times[ours])
        verdict = "ok" if ratio >= TARGET else "below target"
        print(f"{ours} / {raw}: {ratio:.2f}x raw throughput (target >= {TARGET}x): {verdict}")


if __name__ == "__main__":
    main()
