"""The environment fingerprint the launcher records for every job (SPEC §16).

What a job ran is more than its plugins: the same plugin over another ``torch`` can give
other numbers. The launcher records, in its provenance record (``environment``):

- ``python``: the job's Python (``executable``, ``version``, ``implementation``);
- ``targets``: for each module the job's plugins declare as a target, the installed
  distribution providing its top-level package and that distribution's version
  (``{"trl.trainer.grpo_trainer": {"distribution": "trl", "version": "0.19.1"}}``; null when
  none provides it);
- ``distributions``: the sha256 of the sorted ``name==version`` list of every distribution
  installed on the interpreter's path, and how many there are;
- ``image``: a container image id when the environment names one (``FORGE_CONTAINER_IMAGE``,
  ``APPTAINER_CONTAINER``, ``SINGULARITY_CONTAINER``), else null.

It is read from the ``*.dist-info`` directory names on ``sys.path`` (no metadata file is
parsed for the list), so it costs a few directory listings. :func:`compare` says what
differs between two fingerprints, one line each, for ``forge jobs replay``.

Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys

IMAGE_VARIABLES = ("FORGE_CONTAINER_IMAGE", "APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")
_DIST_INFO = re.compile(r"^(?P<name>.+?)-(?P<version>[^-]+?)\.(dist-info|egg-info)$")


def canonical_name(name: str) -> str:
    """A distribution name as PEP 503 compares it (``packaging.utils.canonicalize_name``).

    >>> canonical_name("Flash_Attn.Ext")
    'flash-attn-ext'
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(path: list | None = None) -> dict:
    """``{normalized name: (version, dist-info directory)}`` of the distributions on *path* (first wins)."""
    found: dict = {}
    for entry in (sys.path if path is None else path):
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            m = _DIST_INFO.match(name)
            if m:
                found.setdefault(canonical_name(m.group("name")), (m.group("version"), os.path.join(os.path.abspath(entry or "."), name)))
    return found


def _provider(top: str, dists: dict, path: list | None = None):
    """The distribution providing the top-level package *top*: by name; else the
    distributions installed beside it (in the same ``sys.path`` entry), by their
    ``top_level.txt``, then their ``RECORD``. A module found elsewhere (the recipe) or
    nowhere has none. Nothing is imported."""
    from importlib.machinery import PathFinder

    key = canonical_name(top)
    if key in dists:
        return key
    entries = sys.path if path is None else path
    try:
        spec = PathFinder.find_spec(top, entries)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    origin = spec.origin if spec.origin not in (None, "namespace") else next(iter(spec.submodule_search_locations or ()), None)
    if not origin:
        return None
    inside = [os.path.abspath(e or ".") for e in entries if os.path.abspath(origin).startswith(os.path.abspath(e or ".") + os.sep)]
    home = max(inside, key=len) if inside else None  # the innermost entry: site-packages, not a folder holding a venv
    beside = sorted(name for name, (_, where) in dists.items() if os.path.dirname(where) == home)
    for listing in ("top_level.txt", "RECORD"):
        for name in beside:
            try:
                with open(os.path.join(dists[name][1], listing), encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            if listing == "top_level.txt":
                if top in text.split():
                    return name
            elif f"\n{top}/" in "\n" + text or f"\n{top}.py," in "\n" + text:
                return name
    return None


def fingerprint(targets=(), path: list | None = None, environ=None) -> dict:
    """This interpreter's fingerprint, with the providers of the modules *targets*."""
    environ = os.environ if environ is None else environ
    dists = installed(path)
    listing = "\n".join(f"{name}=={version}" for name, (version, _) in sorted(dists.items()))
    providers: dict = {}
    for module in targets:
        top = module.split(".", 1)[0]
        name = _provider(top, dists, path)
        providers[module] = None if name is None else {"distribution": name, "version": dists[name][0]}
    image = next((environ[v] for v in IMAGE_VARIABLES if environ.get(v)), None)
    return {
        "python": {
            "executable": sys.executable,
            "version": "%d.%d.%d" % sys.version_info[:3],
            "implementation": sys.implementation.name,
        },
        "targets": providers,
        "distributions": {"sha256": hashlib.sha256(listing.encode("utf-8")).hexdigest(), "count": len(dists)},
        "image": image,
    }


def compare(recorded: dict | None, current: dict | None) -> list:
    """What differs between two fingerprints, one line each ([] when nothing does)."""
    if not recorded or not current:
        return []
    out = []
    a, b = recorded.get("python") or {}, current.get("python") or {}
    for key in ("version", "executable", "implementation"):
        if a.get(key) != b.get(key):
            out.append(f"python {key}: {a.get(key)} -> {b.get(key)}")
    ta, tb = recorded.get("targets") or {}, current.get("targets") or {}
    for module in sorted(set(ta) | set(tb)):
        da, db = ta.get(module), tb.get(module)
        if da != db:
            def show(d):
                return "not installed" if not d else f"{d.get('distribution')} {d.get('version')}"
            out.append(f"{module}: {show(da)} -> {show(db)}")
    da, db = recorded.get("distributions") or {}, current.get("distributions") or {}
    if da.get("sha256") != db.get("sha256"):
        out.append(f"installed distributions differ ({da.get('count')} -> {db.get('count')} distributions)")
    if recorded.get("image") != current.get("image"):
        out.append(f"container image: {recorded.get('image')} -> {current.get('image')}")
    return out
