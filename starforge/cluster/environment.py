"""The job's bootstrap runtime and the environment that carries plugins into every process.

The launcher (or a backend, through :func:`starforge.launch.bootstrap_env`) writes into
the job directory::

    .forge-runtime/bootstrap/sitecustomize.py   # runs in every new Python process of the job
    .forge-runtime/starforge-runtime.zip        # this subpackage + vendored packaging (sources)
    .forge-runtime/hyperparams.json             # spec.hyperparams, for FORGE_HYPERPARAMS

and exports ``FORGE_JOBSPEC``, ``FORGE_JOB_DIR``, ``FORGE_JOB_ID``, ``FORGE_HYPERPARAMS``,
``FORGE_RUNTIME``, ``FORGE_PYTHON`` (the job's Python) and ``PYTHONPATH`` (bootstrap
directory first). The bootstrap puts the
zip first on ``sys.path``: the job's starforge (the version that staged it) wins over a
starforge-core installed in the job's environment, and a worker whose environment has
none still gets the runtime. The zip carries ``packaging`` under StarForge's own
namespace, so the trainer's own ``packaging`` is never shadowed (:mod:`.runtime_zip`).

Standard library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from .atomic import write_file
from .jobdir_layout import BOOTSTRAP_DIR, BOOTSTRAP_FILE, HYPERPARAMS_FILE, RECIPE_DIR, RUNTIME_DIR, SPEC_FILE, WORK_DIR
from .jobspec import format_json, read_spec
from .runtime_zip import ZIP_NAME, read_own, running_from, write_runtime_zip

# The job's working directory (SPEC §9): copies of the recipe's files, made at staging,
# where relative writes land (jobdir_layout.WORK_DIR). A backend whose nodes run from a
# node-local copy (Slurm) names the shared one in WORK_DIR_ENV.
WORK_DIR_ENV = "FORGE_WORK_DIR"


def runtime_paths(job_dir: str) -> dict:
    base = os.path.join(os.path.abspath(job_dir), RUNTIME_DIR)
    return {
        "dir": base,
        "bootstrap": os.path.join(base, BOOTSTRAP_DIR),
        "zip": os.path.join(base, ZIP_NAME),
        "hyperparams": os.path.join(base, HYPERPARAMS_FILE),
    }


def sitecustomize_source() -> bytes:
    """The bootstrap's source, read through this package's loader (a file, or the runtime zip)."""
    return read_own("bootstrap/sitecustomize.py")


def prepare_runtime(job_dir: str, hyperparams: Mapping | None = None) -> dict:
    """Write the bootstrap, the runtime zip and hyperparams.json.

    The zip is built afresh from the running starforge's own sources, unless this process
    runs from the job's zip already (then it is what runs, and stays).
    """
    paths = runtime_paths(job_dir)
    for folder in (paths["dir"], paths["bootstrap"]):  # never writable by others, whatever the umask
        private_dir(folder)
    _write_if_changed(os.path.join(paths["bootstrap"], BOOTSTRAP_FILE), sitecustomize_source())
    if not running_from(paths["zip"]):
        write_runtime_zip(paths["zip"])
    write_hyperparams(job_dir, hyperparams)
    return paths


def install_runtime_zip(job_dir: str, zip_path: str, sha256: str, hyperparams: Mapping) -> dict:
    """Write the job's runtime from an existing zip (a replayed job's), which must have *sha256*.

    The bootstrap is the zip's own; every file gets an explicit mode, whatever the umask.
    Raises :class:`OSError` when the zip read is not the one recorded.
    """
    import hashlib
    import zipfile

    paths = runtime_paths(job_dir)
    for folder in (paths["dir"], paths["bootstrap"]):
        private_dir(folder)
    with open(zip_path, "rb") as f:
        data = f.read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise OSError(f"the runtime zip {zip_path} has sha256 {got}, recorded {sha256}")
    write_file(paths["zip"], data)
    with zipfile.ZipFile(paths["zip"]) as zf:
        bootstrap = zf.read("starforge/cluster/bootstrap/sitecustomize.py")
    write_file(os.path.join(paths["bootstrap"], BOOTSTRAP_FILE), bootstrap)
    write_hyperparams(job_dir, hyperparams)
    return paths


def write_hyperparams(job_dir: str, hyperparams: Mapping | None = None) -> None:
    """The job's ``hyperparams.json`` (``FORGE_HYPERPARAMS``): the one writer of that file."""
    if hyperparams is None:
        hyperparams = read_spec(os.path.join(job_dir, SPEC_FILE)).hyperparams
    data = (format_json(dict(hyperparams)) + "\n").encode("utf-8")
    _write_if_changed(runtime_paths(job_dir)["hyperparams"], data)


def work_dir(job_dir: str, environ: Mapping[str, str] | None = None) -> str:
    """The job's working directory: the one the backend names, else ``<job>/work``.

    A job directory without one (staged by hand, or by an older layout) works in its
    ``recipe/``.
    """
    named = (os.environ if environ is None else environ).get(WORK_DIR_ENV)
    if named:
        return os.path.abspath(named)
    own = os.path.join(os.path.abspath(job_dir), WORK_DIR)
    return own if os.path.isdir(own) else os.path.join(os.path.abspath(job_dir), RECIPE_DIR)


def private_dir(path: str) -> None:
    """Make *path* a directory of this user, writable by nobody else (SPEC §9).

    A symlink there is refused (it would point the job's runtime, which every process
    puts first on its path, anywhere), and so is a directory of another user or anything
    that is not a directory; an existing one of ours that others may write is tightened.
    Raises :class:`OSError` saying which.
    """
    import stat

    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise OSError(f"{path} is a symbolic link; the job's runtime directory is never followed through one")
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{path} is not a directory")
    if st.st_uid != os.geteuid():
        raise OSError(f"{path} belongs to another user (uid {st.st_uid})")
    if st.st_mode & 0o022:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o022)


def job_environment(job_dir: str, spec_path: str, job_id: str, base: Mapping[str, str] | None = None) -> dict:
    """The variables every process of the job needs.

    ``PYTHONPATH`` starts with the bootstrap directory, then the job's ``recipe/`` (so
    every process imports the experiment's code the way the entrypoint does), then
    whatever *base* had.
    """
    paths = runtime_paths(job_dir)
    ours = [paths["bootstrap"], os.path.join(os.path.abspath(job_dir), RECIPE_DIR)]
    old = (base or {}).get("PYTHONPATH", "")
    parts = [p for p in old.split(os.pathsep) if p and os.path.abspath(p) not in ours]
    pythonpath = os.pathsep.join(ours + parts)
    return {
        "FORGE_JOBSPEC": os.path.abspath(spec_path),
        "FORGE_JOB_DIR": os.path.abspath(job_dir),
        "FORGE_JOB_ID": job_id,
        "FORGE_HYPERPARAMS": paths["hyperparams"],
        "FORGE_RUNTIME": paths["zip"],
        "FORGE_PYTHON": sys.executable,  # the job's Python: the bootstrap acts in its processes
        "PYTHONPATH": pythonpath,
    }


def _write_if_changed(path: str, data: bytes) -> None:
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except OSError:
        pass
    write_file(path, data)
