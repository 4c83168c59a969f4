"""Building the catalogue folder: collect, render, and put the whole folder in place at once.

The folder is written complete into a temporary directory beside it and renamed into
place, so a reader (a web server, a mirror) sees the old catalogue or the new one, never a
half-written one, and a failed build leaves the old one as it was. A build killed midway
leaves its folder, named after it; the next build removes it (:func:`sweep_stale_builds`). An existing folder is
replaced only when it is empty or is a catalogue (it holds a ``catalog.json`` of this
schema): ``-o ~`` by mistake is refused, not emptied.

Laptop side.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .collect import SCHEMA, collect, failed
from .pages import plugin_path, render_index, render_plugin

INDEX = "index.html"
DATA = "catalog.json"


@dataclass(frozen=True)
class BuildResult:
    out: Path
    plugins: int
    versions: int
    verified: int  # versions verified by this build
    reused: int  # versions whose unchanged entry was taken from the previous build
    problems: list  # refs of versions that failed verification
    registry_state: str


def previous_catalog(out: Path) -> dict | None:
    """The ``catalog.json`` of the catalogue at *out*; None when *out* is absent or empty.

    Raises :class:`UsageError` for a folder that holds something else: building would replace it."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory", hint="name a new or empty directory with -o")
    if not any(out.iterdir()):
        return None
    try:
        doc = json.loads((out / DATA).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UsageError(f"{out} is not empty and is not a catalogue (no {DATA} of {SCHEMA}): building would replace it",
                         hint="name a new or empty directory with -o, or the folder of an earlier 'forge catalog build'")
    return doc


def catalog_json(doc: dict) -> str:
    """``catalog.json``: the document, keys sorted, ASCII (control characters, U+2028 and the bidi ones as ``\\u`` escapes)."""
    return json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=True) + "\n"


def write_tree(root: Path, doc: dict) -> None:
    (root / INDEX).write_text(render_index(doc), encoding="utf-8")
    (root / DATA).write_text(catalog_json(doc), encoding="utf-8")
    for p in doc["plugins"]:
        path = root / plugin_path(p["owner"], p["name"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_plugin(doc, p), encoding="utf-8")


def work_dir(out: Path, kind: str) -> Path:
    """A new folder beside *out* for a build's work: ``.<name>.<pid>-<n>@<host tag>.<kind>``
    (*kind* ``new`` or ``old``), named after its writer as the atomic writes' temp files are."""
    from ..cluster.atomic import writer_tag

    n = 0
    while True:
        path = out.parent / f".{out.name}.{os.getpid()}-{n}@{writer_tag()}.{kind}"
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:  # left by a killed build that had this pid
            n += 1


def sweep_stale_builds(out: Path, min_age: float = 600.0) -> list:
    """Remove what builds of *out* killed midway left beside it (:func:`work_dir`'s folders);
    return their names. A folder of this host's build is stale once its pid is gone; one of
    another host sharing the folder, once it is also *min_age* seconds old."""
    import re
    import time

    from ..cluster.atomic import process_alive, writer_tag

    pattern = re.compile(re.escape(f".{out.name}.") + r"(\d+)-\d+@(.+)\.(?:new|old)$")
    removed: list = []
    try:
        names = os.listdir(out.parent)
    except OSError:
        return removed
    for name in sorted(names):
        found = pattern.match(name)
        if found is None or process_alive(int(found.group(1))):
            continue
        path = out.parent / name
        try:
            if found.group(2) != writer_tag() and time.time() - path.lstat().st_mtime < min_age:
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(name)
    return removed


def replace_dir(tmp: Path, out: Path) -> None:
    """Put the finished folder *tmp* at *out*, where an old catalogue (or an empty folder) may be."""
    if not out.exists():
        os.rename(tmp, out)
        return
    old = work_dir(out, "old")
    os.rename(out, old / "c")
    try:
        os.rename(tmp, out)
    except OSError:
        os.rename(old / "c", out)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


def build(registry, out: str | os.PathLike, trust=None, cache=None) -> BuildResult:
    """Write the catalogue of *registry*, verified under *trust* (default: the user's trust file), to *out*."""
    from ..registry.store import PluginStore

    out = Path(out).absolute()
    previous = previous_catalog(out)
    trust = trust if trust is not None else PluginStore(registry).trust
    doc, counts = collect(registry, trust, previous, cache)
    if not doc["plugins"]:
        raise UsageError(f"registry {doc['registry']} holds no plugins: there is nothing to catalogue",
                         hint="check --registry, FORGE_REGISTRY or 'registry:' in your config (forge config shows which is used)")
    out.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_builds(out)
    tmp = work_dir(out, "new")
    try:
        os.chmod(tmp, 0o755)
        write_tree(tmp, doc)
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    versions = [v for p in doc["plugins"] for v in p["versions"]]
    problems = [v["ref"] for v in versions if failed(v)]
    return BuildResult(out=out, plugins=len(doc["plugins"]), versions=len(versions), verified=counts["verified"],
                       reused=counts["reused"], problems=problems, registry_state=doc["registry_state"])
