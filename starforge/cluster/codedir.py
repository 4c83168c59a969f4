# The job's code directory on this node: StarForge's runtime compiled once per job (SPEC §9).
#
# The node entry (node_entry.py, interpreter.main) makes it before the launcher runs, and
# every Python process of the job imports the runtime from it (bootstrap/sitecustomize.py
# checks it first). Run by the entry too, under whatever ``python3`` the node has (it is
# executed in the entry's namespace before interpreter.py): it parses on old interpreters
# (no f-strings, no annotations, no walrus).
#
# Standard library only.
"""The job's code directory: a directory this job's node entry made, holding the runtime
zip's sources with their compiled code, keyed to the job and the zip.

>>> "starforge.cluster.job" in RUNTIME_MODULES
True
"""

import json
import os
import re

# The job's code directory on this node (see make_code_dir), and the key file in it that
# says for which job and which runtime zip it was made; bootstrap/sitecustomize.py checks
# both before a process imports from it.
CODE_DIR_ENV = "FORGE_CODE_DIR"
CODE_KEY = "forge-code.json"
CODE_SCHEMA = "forge/code-dir/v1"

# The runtime's modules that the launcher and the job's other processes import at start
# (the pinned lists of tests/launch/test_launch_code_dir.py), in the order the launcher
# imports them: the node entry compiles these into the job's code zip. Any other module of
# the runtime (signature checks, the plan ledger, the Ray hook) is compiled from the same
# zip's source where it is imported.
RUNTIME_MODULES = (
    "starforge", "starforge.launch", "starforge.launch.__main__", "starforge.cluster", "starforge.cluster.errors",
    "starforge.cluster.hyperparams_and_deferred", "starforge.cluster.atomic", "starforge.cluster.attempts",
    "starforge.cluster.binding", "starforge.cluster.child_process", "starforge.cluster.codedir",
    "starforge.cluster.interpreter", "starforge.cluster.interpreter_flags", "starforge.cluster.record",
    "starforge.cluster.digest", "starforge.cluster.names", "starforge.cluster.jobspec", "starforge.cluster.readonly",
    "starforge.cluster.utctime", "starforge.cluster.launcher", "starforge.cluster.runtime_zip",
    "starforge.cluster.environment", "starforge.cluster.exits", "starforge.cluster.import_hooks",
    "starforge.cluster.load_order", "starforge.cluster.provenance", "starforge.cluster.job", "starforge.cluster.ray_init",
    "starforge.cluster.process_job", "starforge.cluster.fingerprint", "starforge.cluster.shadowing",
    "starforge.cluster.requires", "starforge.cluster._vendor", "starforge.cluster._vendor.packaging",
    "starforge.cluster._vendor.packaging.version", "starforge.cluster._vendor.packaging._ranges",
    "starforge.cluster._vendor.packaging.specifiers", "starforge.cluster.loader", "starforge.cluster.patch_targets",
    "starforge.cluster.patching", "starforge.patching", "starforge.cluster.plugins", "starforge.plugins",
)
_VERSION_MODULES = ("starforge.cluster._vendor", "starforge.cluster._vendor.packaging",
                    "starforge.cluster._vendor.packaging.version")
_SPECIFIER_MODULES = ("starforge.cluster._vendor.packaging._ranges", "starforge.cluster._vendor.packaging.specifiers")
# A version specifier that packaging answers with its Version alone (requires.py): >=, <=,
# == or != and a release, in every comma-separated clause.
PLAIN_SPECIFIER = r"\s*(>=|<=|==|!=)\s*([0-9]+(?:\.[0-9]+)*)\s*"
# The job's code zip in the code directory: the runtime zip's sources, with the compiled
# code of RUNTIME_MODULES beside them (PEP 552 pycs, checked against the source's hash).
CODE_ZIP = "runtime-code.zip"


def modules_to_compile(spec):
    """The RUNTIME_MODULES the job's processes will import, as the JobSpec *spec* says: the
    vendored packaging's version module only where a plugin declares ``requires``, its
    specifiers only where a specifier is not plain or installed packages are checked
    (their versions may carry a local part, which takes packaging's SpecifierSet)."""
    entries = list(spec.get("plugins") or [])
    recipe = spec.get("recipe")
    if isinstance(recipe, dict):
        entries += list(recipe.get("plugins") or [])
    versions = specifiers = False
    plain = re.compile(PLAIN_SPECIFIER)
    for entry in entries:
        requires = entry.get("requires") if isinstance(entry, dict) else None
        if not isinstance(requires, dict) or not any(requires.values()):
            continue
        versions = True
        for key in ("core", "python"):
            value = requires.get(key)
            if value and (not isinstance(value, str) or not all(plain.fullmatch(c) for c in value.split(","))):
                specifiers = True
        if requires.get("packages"):
            specifiers = True
    return tuple(m for m in RUNTIME_MODULES if (m not in _VERSION_MODULES or versions)
                 and (m not in _SPECIFIER_MODULES or specifiers))


def code_root(root):
    """The job's code directory holding the runtime imported from *root* (the folder or zip
    holding its ``starforge`` package), or None when *root* is not in one."""
    if os.path.basename(root) == CODE_ZIP:
        root = os.path.dirname(root)
    return root if os.path.isfile(os.path.join(root, CODE_KEY)) else None


def make_code_dir(zip_path, job_dir, job_id, compiled=RUNTIME_MODULES):
    """A new directory holding the runtime zip's sources, compiled once for this job on this node.

    ``zipimport`` keeps no compiled code (it even compiles each module twice), so every
    process importing StarForge from the runtime zip used to compile the runtime. With
    *compiled* (the modules to compile; the job's Python is this interpreter), the
    directory holds one file besides its key, ``runtime-code.zip``: the runtime zip's
    sources with the compiled code of those modules beside them, compiled here from those
    sources as hash-checked pycs (PEP 552: each is used only while its source in the same
    zip has the hash it records), and every process of the job imports from it: one file
    written on the node instead of a file per module. Without *compiled* (the launcher runs
    under another interpreter), the sources are unpacked into the directory instead, and the
    interpreter keeps each module's code in ``__pycache__`` the first time a process of the
    job imports it. The directory is made by ``tempfile.mkdtemp`` under the job's ``TMPDIR``
    (an unpredictable name, mode 0700, this user's) and keyed by the zip's sha256, the job's
    id and directory, and this process's pid in ``forge-code.json``; a process of the job
    uses it only when all of that holds for it (``bootstrap/sitecustomize.py``), and the
    launcher of that pid removes it when it ends. It is never shared: each launch makes its own.
    """
    import hashlib
    import io
    import shutil
    import tempfile
    import zipfile

    with open(zip_path, "rb") as f:
        data = f.read()
    path = tempfile.mkdtemp(prefix="forge-code-")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        code = io.BytesIO() if compiled else None
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            out = zipfile.ZipFile(code, "w", zipfile.ZIP_STORED) if compiled else None
            for info in zf.infolist():
                name = info.filename
                parts = name.split("/")
                if parts[0] != "starforge" or name.endswith("/"):
                    continue  # __main__.py (the node entry) stays in the zip
                if "" in parts or "." in parts or ".." in parts or "\\" in name:
                    raise ValueError("unexpected name in the runtime zip: %r" % name)
                source = zf.read(info)
                if out is not None:
                    _add_compiled(out, os.path.join(path, CODE_ZIP), name, info.date_time, source, compiled)
                    continue
                dest = os.path.join(path, *parts)
                if not os.path.isdir(os.path.dirname(dest)):
                    os.makedirs(os.path.dirname(dest), 0o700)
                with os.fdopen(os.open(dest, flags, 0o600), "wb") as f:
                    f.write(source)
            if out is not None:
                out.close()
                with os.fdopen(os.open(os.path.join(path, CODE_ZIP), flags, 0o600), "wb") as f:
                    f.write(code.getvalue())
        key = {"schema": CODE_SCHEMA, "job_id": job_id, "job_dir": job_dir, "pid": os.getpid(),
               "runtime_zip": os.path.abspath(zip_path), "runtime_sha256": hashlib.sha256(data).hexdigest()}
        with os.fdopen(os.open(os.path.join(path, CODE_KEY), flags, 0o600), "w") as f:
            json.dump(key, f, sort_keys=True)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


def _add_compiled(out, code_zip, name, date_time, source, modules):
    """Add *source* as *name* to the code zip *out*, and for a module of *modules* its
    compiled code as ``.pyc`` beside it: what ``zipimport`` loads instead of compiling."""
    import importlib.util
    import marshal
    import zipfile

    def add(entry, payload):
        info = zipfile.ZipInfo(entry, date_time)
        info.external_attr = 0o600 << 16
        out.writestr(info, payload)

    add(name, source)
    if not name.endswith(".py"):
        return
    module = name[:-3].replace("/", ".")
    if module.endswith(".__init__"):
        module = module[:-len(".__init__")]
    if module not in modules:
        return
    # As zipimport compiles a source of the zip: its path inside the zip, line endings
    # normalized. The pyc records the source's hash and asks for the check (flags 0b11).
    text = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    compiled = compile(text, os.path.join(code_zip, *name.split("/")), "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + (3).to_bytes(4, "little") + importlib.util.source_hash(source)
    add(name[:-3] + ".pyc", header + marshal.dumps(compiled))


def remove_own_code_dir(environ=None):
    """Remove the code directory the node entry made for this process (same pid), if any."""
    environ = os.environ if environ is None else environ
    path = environ.get(CODE_DIR_ENV)
    if not path:
        return
    try:
        with open(os.path.join(path, CODE_KEY), "rb") as f:
            mine = json.loads(f.read().decode("utf-8")).get("pid") == os.getpid()
    except (IOError, OSError, ValueError, AttributeError):
        return
    if mine:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
