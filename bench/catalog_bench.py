"""The catalogue at scale: ``forge catalog build`` of 1,000 plugins × 10 versions, and the index in a browser.

Sets up, under a temporary FORGE_HOME: a directory registry of P plugins × V versions (packed
and published through the registry's API; every version of one owner in seven, ``team0``,
signed with a key the trust file lists; kept under ``--registry`` so later runs reuse it). Then times, each in a fresh process
of ``forge catalog build`` (the whole command, imports included):

- ``cold``: an empty pull cache and no earlier catalogue: every archive fetched, unpacked
  against its tree digest, every signature checked;
- ``warm cache, new folder``: the pull cache filled by ``cold``, a new output folder: every
  version verified again, from the cache;
- ``rebuild``: the pull cache warm and the folder of the previous build: nothing has changed,
  so nothing is verified again (the figure of SPEC §19's "a rebuild only re-verifies versions
  it has not seen"), and the output is byte-identical (checked).

With chromium and chromedriver installed, it then opens the index (``file://``) in headless
chromium and reports when it became interactive (``domInteractive``), when it finished
loading, and how long a search takes to narrow the list. Recorded, not gating.

    python bench/catalog_bench.py [--plugins 1000] [--versions 10] [--registry DIR]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FORGE = [sys.executable, "-m", "starforge"]


def make_registry(root: Path, plugins: int, versions: int, key: Path) -> None:
    from starforge.package_format.archive import pack_tree
    from starforge.registry.base import PublishedVersion
    from starforge.registry.directory import DirectoryRegistry
    from starforge.signatures.signing import sign_statement

    registry = DirectoryRegistry(root)
    work = Path(tempfile.mkdtemp(prefix="catalog-bench-src-"))
    kinds = ("algorithm", "algorithm", "environment")
    try:
        for i in range(plugins):
            owner, name = f"team{i % 7}", f"adv-plugin-{i}"
            module = name.replace("-", "_")
            for j in range(versions):
                version = f"0.{j}.0"
                tree = work / f"{i}-{j}"
                tree.mkdir()
                kind = kinds[i % 3]
                targets = f"targets: [toy_grpo.algo{i % 5}]\n" if kind == "algorithm" else ""
                (tree / "plugin.yaml").write_text(
                    f"schema: forge/plugin/v1\nname: {name}\nversion: '{version}'\nkind: {kind}\n"
                    f"entrypoint: {module}:install\nload: eager\n{targets}"
                    "requires: {python: '>=3.10'}\n"
                    f"params:\n  {module}.scale: {{type: float, default: {j}.5, description: scale of the advantage}}\n"
                    f"  {module}.mode: {{type: str, default: token, choices: [token, sequence]}}\n"
                    f"description: Advantage variant {i}, release {j}\n")
                (tree / f"{module}.py").write_text(f"VERSION = {j}\n\ndef install(params, **ctx):\n    return None\n")
                files = ["plugin.yaml", f"{module}.py"]
                if j % 3:
                    (tree / "steps.py").write_text(f"STEP = {j}\n")
                    files.append("steps.py")
                archive = work / f"{i}-{j}.tar.gz"
                packed = pack_tree(tree, files, archive)
                from starforge.package_format.manifest import PluginManifest
                from starforge.package_format.yamlio import load_yaml

                manifest = PluginManifest.from_mapping(load_yaml((tree / "plugin.yaml").read_text(), "bench").data, "bench")
                info = PublishedVersion(owner=owner, name=name, version=version, tree_digest=packed.tree_digest,
                                        artifact_digest=packed.artifact_digest, manifest=manifest.to_dict(),
                                        files=packed.files, top_level=tuple(sorted(f[:-3] for f in files if f.endswith(".py"))),
                                        size=archive.stat().st_size)
                envelope = None
                if i % 7 == 0:  # team0, whose key the trust file lists: all its versions signed
                    envelope = sign_statement(key, owner=owner, name=name, version=version,
                                              tree_digest=packed.tree_digest, artifact_digest=packed.artifact_digest)
                registry.publish(archive, info, signature=envelope)
                shutil.rmtree(tree)
                archive.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def timed_build(env: dict, registry: Path, out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([*FORGE, "catalog", "build", "--registry", str(registry), "-o", str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def same_tree(a: Path, b: Path) -> bool:
    cmp = filecmp.dircmp(a, b)
    stack = [cmp]
    while stack:
        c = stack.pop()
        if c.left_only or c.right_only or c.diff_files or filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)[1]:
            return False
        stack.extend(c.subdirs.values())
    return True


def browser_figures(index: Path) -> dict | None:
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from support.browser import Browser
    except ImportError:
        return None
    import pytest

    try:
        b = Browser(Path(tempfile.mkdtemp(prefix="catalog-bench-browser-")))
    except (pytest.skip.Exception, RuntimeError) as exc:
        print(f"no browser: {exc}")
        return None
    try:
        b.open(index.as_uri())
        timing = b.run("var t = performance.getEntriesByType('navigation')[0];"
                       "return [t.domInteractive, t.loadEventEnd, document.querySelectorAll('ul.plugins > li').length]")
        search = b.run("var q = document.getElementById('q'), t0 = performance.now(); q.value = 'adv-plugin-99';"
                       "q.dispatchEvent(new Event('input')); var t1 = performance.now();"
                       "return [t1 - t0, document.getElementById('count').textContent]")
        return {"dom_interactive_ms": timing[0], "load_end_ms": timing[1], "rows": timing[2],
                "search_ms": search[0], "search_result": search[1]}
    finally:
        b.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugins", type=int, default=1000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--registry", type=Path, help="where the generated registry is kept (made when missing)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="catalog-bench-"))
    home = root / "home"
    env = {**os.environ, "FORGE_HOME": str(home)}
    env.pop("FORGE_REGISTRY", None)
    registry = args.registry or Path(tempfile.gettempdir()) / f"catalog-bench-registry-{args.plugins}x{args.versions}"
    key = registry.parent / f"{registry.name}.key"
    try:
        if not (registry / "plugins").is_dir():
            subprocess.run([*FORGE, "key", "generate", "--name", "bench"], env=env, check=True, stdout=subprocess.DEVNULL)
            shutil.copy(home / "keys" / "bench.key", key)
            shutil.copy(home / "keys" / "bench.pub", str(key) + ".pub")
            start = time.perf_counter()
            make_registry(registry, args.plugins, args.versions, key)
            print(f"registry of {args.plugins} x {args.versions} made in {time.perf_counter() - start:.1f} s: {registry}")
        subprocess.run([*FORGE, "trust", "add", "team0", str(key) + ".pub"], env=env, check=True, stdout=subprocess.DEVNULL)
        load = os.getloadavg()[0]
        cold = timed_build(env, registry, root / "site-cold")
        warm_new = timed_build(env, registry, root / "site-warm")
        shutil.copytree(root / "site-warm", root / "site-before")
        rebuild = timed_build(env, registry, root / "site-warm")
        identical = same_tree(root / "site-before", root / "site-warm")
        print(f"load average at the start {load:.2f}, at the end {os.getloadavg()[0]:.2f}")
        print(f"cold (empty cache, new folder):      {cold:6.1f} s")
        print(f"warm cache, new folder:              {warm_new:6.1f} s")
        print(f"rebuild (warm cache, same folder):   {rebuild:6.1f} s  byte-identical: {identical}")
        figures = browser_figures(root / "site-warm" / "index.html")
        if figures:
            print(f"index in chromium: {figures['rows']} plugins, interactive at {figures['dom_interactive_ms']:.0f} ms, "
                  f"loaded at {figures['load_end_ms']:.0f} ms; a search narrowed it in {figures['search_ms']:.1f} ms "
                  f"({figures['search_result']})")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
