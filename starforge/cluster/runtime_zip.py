"""The job's runtime zip: this subpackage, as sources, with ``packaging`` vendored inside it.

The zip is what a node needs of StarForge and nothing else, so nothing of StarForge has to
be installed where the job runs (SPEC §11, §14)::

    __main__.py                                   # the node entry (node_entry.py, running interpreter.py): `python3 ZIP --spec …`
    starforge/__init__.py                         # the version
    starforge/plugins.py, starforge/patching.py   # the public names of SPEC §1 ...
    starforge/launch/__init__.py, __main__.py     # ... and ``python -m starforge.launch``
    starforge/cluster/**.py                       # this folder, walked
    starforge/cluster/_vendor/vendor.txt          # the pinned version (as pip's)
    starforge/cluster/_vendor/packaging/*.py      # packaging, committed under StarForge's namespace
    starforge/cluster/_vendor/packaging/LICENSE*  # and its licence files

It is built for each job from the running package's own files (never taken from a cache,
never carrying compiled code: SPEC §9 "trusted base"), deterministically (fixed times and
modes, sorted names). ``packaging`` is committed in this folder (``_vendor/``, pinned in
``vendor.txt``), so every installation builds the same zip, and a zip without it cannot be
built (:func:`zip_sources` refuses). ``packaging`` imports itself only relatively, so under
``starforge.cluster._vendor`` it needs no rewriting, and a trainer importing ``packaging``
gets its own. The zip's root ``__main__.py`` is :mod:`.node_entry` (running :mod:`.interpreter`), so backends start a
job with ``python3 .forge-runtime/starforge-runtime.zip --spec jobspec.json`` under any
``python3`` of the node: it resolves the job's Python and re-executes ``<job python> -m
starforge.launch`` with the zip first on ``PYTHONPATH``. Standard library only.
"""

from __future__ import annotations

import os

from .jobdir_layout import RUNTIME_ZIP

ZIP_NAME = RUNTIME_ZIP  # the runtime zip in the job directory
VENDOR = "starforge/cluster/_vendor/"
# What the requirement checks need of the vendored packaging (requires.py imports the first
# two): a zip lacking any of these is refused at build time, never shipped half-vendored.
VENDORED = ("vendor.txt", "packaging/__init__.py", "packaging/specifiers.py", "packaging/version.py",
            "packaging/LICENSE", "packaging/LICENSE.APACHE", "packaging/LICENSE.BSD")
# The public modules SPEC §1 names, outside this folder: each only imports from it.
PUBLIC_MODULES = ("__init__.py", "plugins.py", "patching.py", "launch/__init__.py", "launch/__main__.py")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_HERE = os.path.dirname(os.path.abspath(__file__))


def read_own(rel: str) -> bytes:
    """Bytes of the file *rel* (``/``-separated) of this package, from a directory or a zip."""
    path = os.path.join(_HERE, *rel.split("/"))
    loader = globals().get("__loader__")
    if loader is not None and hasattr(loader, "get_data"):
        data: bytes = loader.get_data(path)
        return data
    with open(path, "rb") as f:  # pragma: no cover - every importer above has get_data
        return f.read()


def running_from(zip_path: str) -> bool:
    """True when this package was imported from the zip at *zip_path*, or from the job's
    code directory the node entry unpacked it into (:func:`.codedir.make_code_dir`)."""
    zip_path = os.path.abspath(zip_path)
    if os.path.abspath(__file__).startswith(zip_path + os.sep):
        return True
    import json

    from .codedir import CODE_KEY, code_root

    root = code_root(os.path.dirname(os.path.dirname(_HERE)))
    if root is None:
        return False
    try:
        with open(os.path.join(root, CODE_KEY), "rb") as f:
            return bool(json.loads(f.read()).get("runtime_zip") == zip_path)
    except (OSError, ValueError, AttributeError):
        return False


def zip_sources() -> dict[str, str]:
    """``{name in the zip: path on disk}`` of everything the runtime zip carries.

    Raises :class:`OSError` when the vendored ``packaging`` is incomplete: a node would fail
    every ``requires`` check with it.
    """
    package = os.path.dirname(_HERE)
    out: dict[str, str] = {"__main__.py": os.path.join(_HERE, "node_entry.py")}
    for rel in PUBLIC_MODULES:
        out["starforge/" + rel] = os.path.join(package, *rel.split("/"))
    _add_tree(out, _HERE, "starforge/cluster/")
    missing = [rel for rel in VENDORED if VENDOR + rel not in out]
    if missing:
        raise OSError(f"cannot build a runtime zip: the vendored packaging in {os.path.join(_HERE, '_vendor')} "
                      f"lacks {', '.join(missing)}")
    return out


def _add_tree(out: dict[str, str], folder: str, prefix: str) -> None:
    """Add the ``.py`` and ``.typed`` files below *folder* (no ``__pycache__``) to *out*;
    below ``_vendor/`` every regular file (the pin and the licences too)."""
    vendored = prefix.startswith(VENDOR)
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            if entry.name != "__pycache__":
                _add_tree(out, entry.path, prefix + entry.name + "/")
        elif entry.is_file(follow_symlinks=False) and (vendored or entry.name.endswith((".py", ".typed"))):
            out[prefix + entry.name] = entry.path


def build_runtime_zip(sources: dict[str, str] | None = None) -> bytes:
    """The zip's bytes: every source of :func:`zip_sources`, stored (not deflated), in name order.

    Stored, because every process of the job reads from it and the launcher writes it for
    every launch: about 0.6 MB, built in a few milliseconds.
    """
    import io
    import zipfile

    sources = zip_sources() if sources is None else sources
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name in sorted(sources):
            with open(sources[name], "rb") as f:
                data = f.read()
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_STORED
            zf.writestr(info, data)
    return buf.getvalue()


def write_runtime_zip(path: str) -> None:
    """Build the zip for one job and write it to *path* (atomically)."""
    from .atomic import write_file

    if not os.path.isdir(_HERE):
        raise OSError(f"cannot build a runtime zip from {_HERE}: not an installed starforge")
    write_file(path, build_runtime_zip())
