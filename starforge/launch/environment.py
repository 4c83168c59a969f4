"""The job's bootstrap runtime and the environment that carries plugins into every process.

The launcher (or a backend, through :func:`bootstrap_env`) writes into the job directory::

    .forge-runtime/bootstrap/sitecustomize.py   # runs in every new Python process of the job
    .forge-runtime/starforge-runtime.zip        # cluster-side starforge + vendored packaging
    .forge-runtime/hyperparams.json             # spec.hyperparams, for FORGE_HYPERPARAMS

and exports ``FORGE_JOBSPEC``, ``FORGE_JOB_DIR``, ``FORGE_JOB_ID``, ``FORGE_HYPERPARAMS``,
``FORGE_RUNTIME`` and ``PYTHONPATH`` (bootstrap directory first). The zip is appended to
``sys.path`` by the bootstrap, after site-packages: an installed starforge-core and
packaging win, and a worker whose environment lacks them still gets the runtime.

Cluster side: standard library only.
"""

from __future__ import annotations

import os

RUNTIME_DIR = ".forge-runtime"
BOOTSTRAP_DIR = "bootstrap"
ZIP_NAME = "starforge-runtime.zip"
HYPERPARAMS_NAME = "hyperparams.json"

# The cluster-side modules a worker needs (relative to the starforge package).
RUNTIME_MODULES = (
    "__init__.py",
    "atomic.py",
    "errors.py",
    "record.py",
    "digest.py",
    "jobspec.py",
    "manifest.py",
    "plugins.py",
    "patching.py",
    "launch/__init__.py",
    "launch/environment.py",
    "launch/loader.py",
    "launch/provenance.py",
    "launch/ray_hook.py",
    "launch/runtime.py",
)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
ZIP_FORMAT = "1"  # bump when the zip's layout changes


def runtime_paths(job_dir: str) -> dict:
    base = os.path.join(os.path.abspath(job_dir), RUNTIME_DIR)
    return {
        "dir": base,
        "bootstrap": os.path.join(base, BOOTSTRAP_DIR),
        "zip": os.path.join(base, ZIP_NAME),
        "hyperparams": os.path.join(base, HYPERPARAMS_NAME),
    }


def _runtime_sources(licences: bool = True) -> dict[str, str]:
    """``{name in the zip: path on disk}`` of everything the runtime zip carries.

    *licences*: include packaging's licence files (only needed to build the zip, not to
    tell whether it is up to date: a licence does not change without packaging's modules).
    """
    import importlib.util

    import starforge

    pkg_root = os.path.dirname(os.path.abspath(starforge.__file__))
    out: dict[str, str] = {}
    for rel in RUNTIME_MODULES:
        path = os.path.join(pkg_root, *rel.split("/"))
        if os.path.exists(path):
            out["starforge/" + rel] = path
    spec = importlib.util.find_spec("packaging")
    if spec is not None and spec.submodule_search_locations:
        root = list(spec.submodule_search_locations)[0]
        _add_tree(out, root, "packaging/")
        if licences:
            out.update(_packaging_licences(os.path.dirname(root)))
    return out


def _add_tree(out: dict, folder: str, prefix: str) -> None:
    """Add the ``.py`` and ``.typed`` files below *folder* (no ``__pycache__``) to *out*."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir():
            if entry.name != "__pycache__":
                _add_tree(out, entry.path, prefix + entry.name + "/")
        elif entry.name.endswith((".py", ".typed")):
            out[prefix + entry.name] = entry.path


def _packaging_licences(parent: str) -> dict[str, str]:
    """Packaging's licence files (from its .dist-info, if any), carried with the vendored copy."""
    out = {}
    try:
        infos = [d for d in os.listdir(parent) if d.startswith("packaging-") and d.endswith(".dist-info")]
    except OSError:
        infos = []
    for info in infos[:1]:
        for dirpath, dirnames, filenames in os.walk(os.path.join(parent, info)):
            for name in filenames:
                if name.upper().startswith("LICENSE"):
                    out[f"packaging-licenses/{name}"] = os.path.join(dirpath, name)
    return out


def runtime_fingerprint(sources: dict[str, str] | None = None) -> str:
    """A cheap key of the runtime zip's inputs (names, sizes, mtimes, bytecode magic)."""
    import importlib.util

    from ..digest import sha256_for

    sources = _runtime_sources() if sources is None else sources
    h = sha256_for(0)(importlib.util.MAGIC_NUMBER + ZIP_FORMAT.encode())
    for name in sorted(sources):
        st = os.stat(sources[name])
        h.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def build_runtime_zip(zip_path: str = ZIP_NAME, sources: dict[str, str] | None = None) -> bytes:
    """A deterministic zip of the cluster-side starforge modules plus ``packaging``.

    Each module is stored as source and as unchecked hash-based bytecode for this
    interpreter (zipimport cannot cache compiled code; without it every worker would
    compile the runtime again). Another Python version ignores the bytecode (its magic
    number differs) and compiles the source.
    """
    import io
    import zipfile

    sources = _runtime_sources() if sources is None else sources
    files: dict[str, bytes] = {}
    for name, path in sources.items():
        with open(path, "rb") as f:
            files[name] = f.read()
    for name in [n for n in files if n.endswith(".py")]:
        pyc = _bytecode(files[name], os.path.join(zip_path, name))
        if pyc is not None:
            files[name[:-3] + ".pyc"] = pyc
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name])
    return buf.getvalue()


def _bytecode(source: bytes, filename: str) -> bytes | None:
    import importlib.util

    try:
        from importlib._bootstrap_external import _code_to_hash_pyc  # stable since 3.7

        code = compile(source, filename, "exec", dont_inherit=True)
        return bytes(_code_to_hash_pyc(code, importlib.util.source_hash(source), checked=False))
    except Exception:
        return None


def runtime_content_key(sources: dict[str, str]) -> str:
    """The zip's identity: format, starforge version, bytecode magic and optimization level,
    and the name and bytes of every file it carries (the modules and vendored packaging)."""
    import importlib.util
    import sys

    from .. import __version__
    from ..digest import sha256_for

    h = sha256_for(0)()
    h.update(f"forge-runtime-zip/{ZIP_FORMAT}\0{__version__}\0{sys.flags.optimize}\0".encode())
    h.update(importlib.util.MAGIC_NUMBER)
    for name in sorted(sources):
        with open(sources[name], "rb") as f:
            data = f.read()
        h.update(f"{name}\0{len(data)}\0".encode("utf-8", "surrogateescape"))
        h.update(data)
    return h.hexdigest()


# The file name compiled into the zip's bytecode (what tracebacks show): the zip's place
# relative to the job directory, the same for every job, so that one zip serves them all.
_CODE_PATH = RUNTIME_DIR + "/" + ZIP_NAME


def _runtime_zip(job_zip: str) -> None:
    """Put an up-to-date runtime zip at *job_zip*, building it only when its inputs changed.

    A cheap key of the inputs (names, sizes, mtimes) is kept beside the zip, so a relaunch
    in the same directory reads nothing else. Otherwise the zip comes from the private
    per-user cache, where it is named by its content (:func:`runtime_content_key`): every
    job of one starforge installation shares one cached zip.
    """
    sources = _runtime_sources(licences=False)
    key = runtime_fingerprint(sources)
    key_file = job_zip + ".key"
    try:
        with open(key_file, "rb") as f:
            if f.read().strip() == key.encode("ascii") and os.path.isfile(job_zip):
                return
    except OSError:
        pass
    all_sources = _runtime_sources()
    cache_dir = _private_cache_dir()
    cached = os.path.join(cache_dir, runtime_content_key(all_sources) + ".zip") if cache_dir else None
    data = None
    if cached and os.path.isfile(cached):
        with open(cached, "rb") as f:
            data = f.read()
    if data is None:
        data = build_runtime_zip(_CODE_PATH, all_sources)
        if cached:
            try:
                _write_if_changed(cached, data)
            except OSError:
                pass
    _write_if_changed(job_zip, data)
    _write_if_changed(key_file, (key + "\n").encode("ascii"))


def _private_cache_dir() -> str | None:
    from .runtime import private_cache_dir

    return private_cache_dir("runtime")


def sitecustomize_source() -> bytes:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap", "sitecustomize.py"), "rb") as f:
        return f.read()


def prepare_runtime(job_dir: str, hyperparams: Mapping | None = None) -> dict:
    """Write the bootstrap, the runtime zip and hyperparams.json (only what changed)."""
    paths = runtime_paths(job_dir)
    os.makedirs(paths["bootstrap"], exist_ok=True)
    _write_if_changed(os.path.join(paths["bootstrap"], "sitecustomize.py"), sitecustomize_source())
    _runtime_zip(paths["zip"])
    if hyperparams is None:
        from ..jobspec import read_spec

        hyperparams = read_spec(os.path.join(job_dir, "jobspec.json")).hyperparams
    from ..jobspec import format_json

    data = (format_json(dict(hyperparams)) + "\n").encode("utf-8")
    _write_if_changed(paths["hyperparams"], data)
    return paths


def job_environment(job_dir: str, spec_path: str, job_id: str, base: Mapping[str, str] | None = None) -> dict:
    """The variables every process of the job needs.

    ``PYTHONPATH`` starts with the bootstrap directory, then the job's ``recipe/`` (so
    every process imports the experiment's code the way the entrypoint does), then
    whatever *base* had.
    """
    paths = runtime_paths(job_dir)
    ours = [paths["bootstrap"], os.path.join(os.path.abspath(job_dir), "recipe")]
    old = (base or {}).get("PYTHONPATH", "")
    parts = [p for p in old.split(os.pathsep) if p and os.path.abspath(p) not in ours]
    pythonpath = os.pathsep.join(ours + parts)
    return {
        "FORGE_JOBSPEC": os.path.abspath(spec_path),
        "FORGE_JOB_DIR": os.path.abspath(job_dir),
        "FORGE_JOB_ID": job_id,
        "FORGE_HYPERPARAMS": paths["hyperparams"],
        "FORGE_RUNTIME": paths["zip"],
        "PYTHONPATH": pythonpath,
    }


def _write_if_changed(path: str, data: bytes) -> None:
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except OSError:
        pass
    from .runtime import atomic_write

    atomic_write(path, data)
