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

import io
import json
import os
import tempfile
import zipfile
from typing import Mapping

RUNTIME_DIR = ".forge-runtime"
BOOTSTRAP_DIR = "bootstrap"
ZIP_NAME = "starforge-runtime.zip"
HYPERPARAMS_NAME = "hyperparams.json"

# The cluster-side modules a worker needs (relative to the starforge package).
RUNTIME_MODULES = (
    "__init__.py",
    "errors.py",
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


def runtime_paths(job_dir: str) -> dict:
    base = os.path.join(os.path.abspath(job_dir), RUNTIME_DIR)
    return {
        "dir": base,
        "bootstrap": os.path.join(base, BOOTSTRAP_DIR),
        "zip": os.path.join(base, ZIP_NAME),
        "hyperparams": os.path.join(base, HYPERPARAMS_NAME),
    }


def build_runtime_zip(zip_path: str = ZIP_NAME) -> bytes:
    """A deterministic zip of the cluster-side starforge modules plus ``packaging``.

    Each module is stored as source and as unchecked hash-based bytecode for this
    interpreter (zipimport cannot cache compiled code; without it every worker would
    compile the runtime again). Another Python version ignores the bytecode (its magic
    number differs) and compiles the source.
    """
    import starforge

    pkg_root = os.path.dirname(os.path.abspath(starforge.__file__))
    files: dict[str, bytes] = {}
    for rel in RUNTIME_MODULES:
        path = os.path.join(pkg_root, *rel.split("/"))
        if os.path.exists(path):
            with open(path, "rb") as f:
                files["starforge/" + rel] = f.read()
    files.update(_packaging_files())
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


def _packaging_files() -> dict[str, bytes]:
    import importlib.util

    spec = importlib.util.find_spec("packaging")
    if spec is None or not spec.submodule_search_locations:
        return {}
    root = list(spec.submodule_search_locations)[0]
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            if name.endswith((".py", ".typed")):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, os.path.dirname(root)).replace(os.sep, "/")
                with open(full, "rb") as f:
                    out[rel] = f.read()
    # Carry packaging's licence with the vendored copy.
    try:
        import importlib.metadata as md

        dist = md.distribution("packaging")
        for f in dist.files or ():
            if "LICENSE" in f.name.upper() and f.name.upper().startswith("LICENSE"):
                out[f"packaging-licenses/{f.name}"] = f.locate().read_bytes()
    except Exception:
        pass
    return out


def sitecustomize_source() -> bytes:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap", "sitecustomize.py"), "rb") as f:
        return f.read()


def prepare_runtime(job_dir: str, hyperparams: Mapping | None = None) -> dict:
    """Write the bootstrap, the runtime zip and hyperparams.json (only what changed)."""
    paths = runtime_paths(job_dir)
    os.makedirs(paths["bootstrap"], exist_ok=True)
    _write_if_changed(os.path.join(paths["bootstrap"], "sitecustomize.py"), sitecustomize_source())
    _write_if_changed(paths["zip"], build_runtime_zip(paths["zip"]))
    if hyperparams is None:
        from ..jobspec import read_spec

        hyperparams = read_spec(os.path.join(job_dir, "jobspec.json")).hyperparams
    data = (json.dumps(dict(hyperparams), indent=2, sort_keys=True) + "\n").encode("utf-8")
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
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
