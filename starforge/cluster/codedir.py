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

try:
    from .jobdir_layout import CODE_POINTER_PREFIX, RUNTIME_DIR
    from .plain_specifiers import is_release, plain_clauses
except ImportError:  # not imported as a module: node_entry.py ran jobdir_layout.py and plain_specifiers.py in this namespace
    pass

# The job's code directory on this node (see make_code_dir), and the key file in it that
# says for which job and which runtime zip it was made; bootstrap/sitecustomize.py checks
# both before a process imports from it.
CODE_DIR_ENV = "FORGE_CODE_DIR"
CODE_KEY = "forge-code.json"
CODE_SCHEMA = "forge/code-dir/v1"
# The job directory's pointer to the code directory of one node (pointer_path), for the job's
# processes that do not inherit FORGE_CODE_DIR (Ray workers: their environment is fixed at
# submission), holding the directory's path. A process checks what it points to exactly as it
# checks FORGE_CODE_DIR.

# The runtime's modules that the launcher and the job's other processes import at start
# (the pinned lists of tests/launch/test_launch_code_dir.py), in the order the launcher
# imports them (then the Ray setup hook a Ray worker imports): the node entry compiles these
# into the job's code zip. Any other module of the runtime (signature checks, the plan
# ledger) is compiled from the same zip's source where it is imported.
RUNTIME_MODULES = (
    "starforge", "starforge.launch", "starforge.launch.__main__", "starforge.cluster", "starforge.cluster.errors",
    "starforge.cluster.jobdir_layout",
    "starforge.cluster.status", "starforge.cluster.hyperparams_and_deferred", "starforge.cluster.atomic", "starforge.cluster.attempts",
    "starforge.cluster.binding", "starforge.cluster.child_process", "starforge.cluster.codedir",
    "starforge.cluster.interpreter", "starforge.cluster.interpreter_flags", "starforge.cluster.record",
    "starforge.cluster.digest", "starforge.cluster.names", "starforge.cluster.jobspec", "starforge.cluster.readonly",
    "starforge.cluster.utctime", "starforge.cluster.entrypoint", "starforge.cluster.launcher", "starforge.cluster.runtime_zip",
    "starforge.cluster.environment", "starforge.cluster.exits", "starforge.cluster.import_hooks",
    "starforge.cluster.load_order", "starforge.cluster.provenance", "starforge.cluster.provenance_log", "starforge.cluster.job",
    "starforge.cluster.ray_init", "starforge.cluster.process_job", "starforge.cluster.recipe_imports", "starforge.cluster.fingerprint",
    "starforge.cluster.shadowing",
    "starforge.cluster.requires", "starforge.cluster.plain_specifiers", "starforge.cluster._vendor",
    "starforge.cluster._vendor.packaging",
    "starforge.cluster._vendor.packaging.version", "starforge.cluster._vendor.packaging._ranges",
    "starforge.cluster._vendor.packaging.specifiers", "starforge.cluster.loader", "starforge.cluster.patch_targets",
    "starforge.cluster.patching", "starforge.patching", "starforge.cluster.plugins", "starforge.plugins",
    "starforge.cluster.ray_hook", "starforge.cluster.lineage",
)
# Of those, what a job's worker imports (pinned by tests/launch/test_launch_code_dir.py): all that
# the first worker on a host with no node entry (Ray's worker hosts) compiles into the code directory.
WORKER_MODULES = (
    "starforge", "starforge.cluster", "starforge.cluster.errors", "starforge.cluster.jobdir_layout", "starforge.cluster.status",
    "starforge.cluster.hyperparams_and_deferred", "starforge.cluster.atomic", "starforge.cluster.attempts",
    "starforge.cluster.binding", "starforge.cluster.codedir", "starforge.cluster.interpreter", "starforge.cluster.record",
    "starforge.cluster.digest", "starforge.cluster.names", "starforge.cluster.jobspec", "starforge.cluster.utctime",
    "starforge.cluster.exits", "starforge.cluster.import_hooks", "starforge.cluster.load_order",
    "starforge.cluster.provenance", "starforge.cluster.job", "starforge.cluster.ray_init", "starforge.cluster.process_job",
    "starforge.cluster.recipe_imports", "starforge.cluster.requires", "starforge.cluster.plain_specifiers",
    "starforge.cluster.loader", "starforge.cluster.patch_targets", "starforge.cluster.patching", "starforge.patching",
    "starforge.cluster.plugins", "starforge.plugins", "starforge.cluster.ray_hook",
)
_VERSION_MODULES = ("starforge.cluster._vendor", "starforge.cluster._vendor.packaging",
                    "starforge.cluster._vendor.packaging.version")
_SPECIFIER_MODULES = ("starforge.cluster._vendor.packaging._ranges", "starforge.cluster._vendor.packaging.specifiers")
# The job's code zip in the code directory: the runtime zip's sources, with the compiled
# code of RUNTIME_MODULES beside them (PEP 552 hash-based pycs, written with the source).
CODE_ZIP = "runtime-code.zip"


def modules_to_compile(spec):
    """The RUNTIME_MODULES the job's processes will import, as the JobSpec *spec* says.

    The vendored packaging only as far as the plugins' ``requires`` need it (requires.py):
    none where every specifier is plain and the versions checked are bare releases (the
    running Python's, and starforge-core's where it is a release); its version module for
    a starforge-core of another kind (``0.2.0.dev1``); its specifiers too for a specifier
    that is not plain, or for installed packages (their versions may carry a local part).
    """
    entries = list(spec.get("plugins") or [])
    recipe = spec.get("recipe")
    if isinstance(recipe, dict):
        entries += list(recipe.get("plugins") or [])
    core_release = is_release(str(spec.get("core_version") or ""))
    versions = specifiers = False
    for entry in entries:
        requires = entry.get("requires") if isinstance(entry, dict) else None
        if not isinstance(requires, dict):
            continue
        for key in ("core", "python"):
            value = requires.get(key)
            if not value:
                continue
            if not isinstance(value, str) or plain_clauses(value) is None:
                versions = specifiers = True
            elif key == "core" and not core_release:
                versions = True
        if requires.get("packages"):
            versions = specifiers = True
    return tuple(m for m in RUNTIME_MODULES if (m not in _VERSION_MODULES or versions)
                 and (m not in _SPECIFIER_MODULES or specifiers))


def code_root(root):
    """The job's code directory holding the runtime imported from *root* (the folder or zip
    holding its ``starforge`` package), or None when *root* is not in one."""
    if os.path.basename(root) == CODE_ZIP:
        root = os.path.dirname(root)
    return root if os.path.isfile(os.path.join(root, CODE_KEY)) else None


def make_code_dir(zip_path, job_dir, job_id, compiled=RUNTIME_MODULES, ready=None):
    """A new directory holding the runtime zip's sources, compiled once for this job on this node.

    ``zipimport`` keeps no compiled code (it even compiles each module twice), so every
    process importing StarForge from the runtime zip used to compile the runtime. With
    *compiled* (the modules to compile; the job's Python is this interpreter), the
    directory holds one file besides its key, ``runtime-code.zip``: the runtime zip's
    sources with the compiled code of those modules beside them, compiled here from those
    sources as hash-based pycs (PEP 552; "unchecked": the source and its code are written
    together, in one file nothing else writes, so no process reads and hashes the source
    again; ``--check-hash-based-pycs always`` still can, and finds the hash right), and every
    process of the job imports from it: one file written on the node instead of a file per
    module. Without *compiled* (the launcher runs
    under another interpreter), the sources are unpacked into the directory instead, and the
    interpreter keeps each module's code in ``__pycache__`` the first time a process of the
    job imports it. *ready* (``{name in the zip: (source bytes, code)}``) is code this
    process compiled already (the node entry's own modules): it is used for a module whose
    source in the zip is those very bytes, instead of compiling it again. The directory is made as ``tempfile.mkdtemp`` makes one (:func:`_make_private_dir`) under the job's ``TMPDIR``
    (an unpredictable name, mode 0700, this user's) and keyed by the zip's sha256, the job's
    id and directory, and this process's pid in ``forge-code.json``; a process of the job
    uses it only when all of that holds for it (``bootstrap/sitecustomize.py``), and the
    launcher of that pid removes it when it ends. It is never shared: each launch makes its own.
    """
    import hashlib
    import io
    import shutil
    import zipfile

    with open(zip_path, "rb") as f:
        data = f.read()
    path = _make_private_dir("forge-code-")
    sweep_dead_code_dirs(os.path.dirname(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        entries = []
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist():
                name = info.filename
                parts = name.split("/")
                if parts[0] != "starforge" or name.endswith("/"):
                    continue  # __main__.py (the node entry) stays in the zip
                if "" in parts or "." in parts or ".." in parts or "\\" in name:
                    raise ValueError("unexpected name in the runtime zip: %r" % name)
                entries.append((name, info.date_time, zf.read(info)))
        if compiled:
            code_zip = os.path.join(path, CODE_ZIP)
            pycs = compile_runtime([(name, source) for name, _, source in entries
                                    if _module_name(name) in compiled], code_zip, ready)
            with os.fdopen(os.open(code_zip, flags, 0o600), "wb") as f:
                f.write(_code_zip(entries, pycs))
        else:
            for name, _, source in entries:
                dest = os.path.join(path, *name.split("/"))
                if not os.path.isdir(os.path.dirname(dest)):
                    os.makedirs(os.path.dirname(dest), 0o700)
                with os.fdopen(os.open(dest, flags, 0o600), "wb") as f:
                    f.write(source)
        key = {"schema": CODE_SCHEMA, "job_id": job_id, "job_dir": job_dir, "pid": os.getpid(), "node": node_tag(),
               "runtime_zip": os.path.abspath(zip_path), "runtime_sha256": hashlib.sha256(data).hexdigest()}
        with os.fdopen(os.open(os.path.join(path, CODE_KEY), flags, 0o600), "w") as f:
            json.dump(key, f, sort_keys=True)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


class UnsafeFolderError(Exception):
    """The folder the job's code directory would be made in is not safe from other users."""


def _make_private_dir(prefix):
    """A new directory ``<prefix><8 random characters>`` (mode 0700) in the first of
    ``$TMPDIR``, ``$TEMP``, ``$TMP``, ``/tmp``, ``/var/tmp``, ``/usr/tmp`` where one can be
    made, as ``tempfile.mkdtemp`` does: its name unpredictable (``os.urandom``), made with
    ``mkdir``, which fails rather than reuse anything there. Without importing ``tempfile``
    (and ``random``), nor writing and removing a probe file first, as ``tempfile`` does.

    The folder must be safe from other users (:func:`folder_refusal`): one that another
    user could rename the new directory out of, and put their own in its place, raises
    :class:`UnsafeFolderError` instead of being passed over for the next (a ``TMPDIR``
    planted by someone else is an attack to report, not a folder to avoid silently). The
    directory is made in the folder's real path, so no symbolic link is followed later."""
    letters = "abcdefghijklmnopqrstuvwxyz0123456789_"
    names = ("TMPDIR", "TEMP", "TMP")
    folders = [(k, os.environ.get(k)) for k in names] + [(None, f) for f in ("/tmp", "/var/tmp", "/usr/tmp")]
    error = None
    for variable, folder in [(k, f) for k, f in folders if f]:
        if not os.path.isdir(folder):
            continue
        refused = folder_refusal(folder)
        if refused:
            where = "%s=%s" % (variable, folder) if variable else folder
            raise UnsafeFolderError("%s is not safe for the job's code directory: %s" % (where, refused))
        real = os.path.realpath(folder)
        for _ in range(100):
            name = prefix + "".join(letters[b % len(letters)] for b in bytearray(os.urandom(8)))
            path = os.path.join(real, name)
            try:
                os.mkdir(path, 0o700)
                return path
            except FileExistsError:
                continue
            except OSError as exc:  # not ours to write: the next one
                error = exc
                break
    raise error or OSError("no directory to make the job's code directory in")


def folder_refusal(folder, uid=None):
    """Why another user could replace what is made in *folder*, or None when no one but this
    user and root can.

    Every directory the path depends on, from ``/`` down, following each symbolic link on
    the way (and the link itself), must be owned by this user or root, and not writable by
    group or others unless its sticky bit is set (``/tmp``): otherwise its owner, or anyone
    who may write it, could rename a directory made inside and put their own in its place.
    """
    import stat

    uid = os.getuid() if uid is None else uid
    todo = [p for p in os.path.abspath(folder).split("/") if p]
    done = "/"
    hops = 0

    def refusal(path, st):
        if st.st_uid not in (uid, 0):
            return "%s is owned by uid %d (not this user, not root)" % (path, st.st_uid)
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return "%s is writable by %s without the sticky bit (mode %o)" % (
                path, "others" if st.st_mode & 0o002 else "its group", stat.S_IMODE(st.st_mode))
        return None

    try:
        why = refusal("/", os.lstat("/"))
        while todo and why is None:
            part = todo.pop(0)
            if part == ".":
                continue
            if part == "..":
                done = os.path.dirname(done)
                continue
            path = os.path.join(done, part)
            st = os.lstat(path)
            why = refusal(path, st)
            if why is None and stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > 40:
                    return "%s: too many symbolic links" % folder
                target = os.readlink(path)
                todo[0:0] = [p for p in target.split("/") if p]
                if target.startswith("/"):
                    done = "/"
            elif why is None:
                if not stat.S_ISDIR(st.st_mode):
                    return "%s is not a directory" % path
                done = path
    except OSError as exc:
        return "cannot be checked: %s" % exc
    return why


def code_dir_refusal(path, runtime_zip, job_id, job_dir):
    """Why the code directory at *path* is not the one this node entry made for this job
    from *runtime_zip*, or None: the checks every process of the job applies before it
    imports from one (bootstrap/sitecustomize.py), applied by the node entry to what it runs."""
    import hashlib
    import stat

    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            return "not a directory"
        if st.st_uid != os.getuid():
            return "owned by uid %d, not this user" % st.st_uid
        if st.st_mode & 0o077:
            return "mode %o lets others in" % stat.S_IMODE(st.st_mode)
        unsafe = folder_refusal(os.path.dirname(path))
        if unsafe:
            return unsafe
        fd = os.open(os.path.join(path, CODE_KEY), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if os.fstat(f.fileno()).st_uid != os.getuid():
                return "its key is not this user's"
            key = json.loads(f.read().decode("utf-8"))
        with open(runtime_zip, "rb") as f:
            runtime_sha256 = hashlib.sha256(f.read()).hexdigest()
    except (IOError, OSError, ValueError) as exc:
        return "no usable key: %s" % exc
    if not isinstance(key, dict) or key.get("schema") != CODE_SCHEMA:
        return "no usable key"
    if key.get("job_id") != job_id or key.get("job_dir") != job_dir or key.get("pid") != os.getpid():
        return "made for another job"
    if key.get("runtime_sha256") != runtime_sha256:
        return "made from another runtime zip"
    return None


def _module_name(name):
    """``starforge.cluster.job`` for ``starforge/cluster/job.py`` (None for a file that is not a module)."""
    if not name.endswith(".py"):
        return None
    module = name[:-3].replace("/", ".")
    return module[:-len(".__init__")] if module.endswith(".__init__") else module


def _code_zip(entries, pycs):
    """The code zip's bytes: each ``(name, date_time, source)`` of *entries*, and beside a
    module its compiled code from *pycs* (``{name: pyc bytes}``) as ``.pyc``."""
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as out:
        for name, date_time, source in entries:
            for entry, payload in ((name, source), (name[:-3] + ".pyc", pycs.get(name))):
                if payload is not None:
                    info = zipfile.ZipInfo(entry, date_time)
                    info.external_attr = 0o600 << 16
                    out.writestr(info, payload)
    return buf.getvalue()


def compile_runtime(sources, code_zip, ready=None):
    """``{name: pyc bytes}`` of *sources* (``[(name, source)]``), compiled as ``zipimport``
    would compile them from *code_zip*; a source that *ready* (``{name: (source bytes,
    code)}``) holds with the same bytes keeps the code compiled from them there.

    In this process, one after the other: a forked child compiling half of them at the same
    time was measured slower on the 2-CPU machine of docs/performance.md, in wall time as
    well as in CPU (see "Start-up cost" there).
    """
    ready = ready or {}
    out = {}
    for name, source in sources:
        earlier = ready.get(name)
        code = earlier[1] if earlier is not None and earlier[0] == source and b"\r" not in source else None
        out[name] = _pyc(name, source, code_zip, code)
    return out


def _pyc(name, source, code_zip, code=None):
    """The pyc of the module *name* (``starforge/…/x.py``) of the code zip at *code_zip*.

    Compiled as zipimport compiles a source of a zip (its path inside the zip, line endings
    normalized), unless *code* is given (compiled from these bytes by this process, under
    the runtime zip's path: the node entry's own modules); a hash-based pyc (PEP 552)
    recording the source's hash, unchecked by default (flags 0b01): the source and its code
    are written together, in one file.
    """
    import importlib.util
    import marshal

    if code is None:
        text = source.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        code = compile(text, os.path.join(code_zip, *name.split("/")), "exec", dont_inherit=True)
    return importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + importlib.util.source_hash(source) + marshal.dumps(code)


def node_tag():
    """This node as the job directory's pointers name it: ``<host name>+<pid namespace inode>``
    (bootstrap/sitecustomize.py computes the same)."""
    host = "".join(c if c.isalnum() or c in ".-" else "_" for c in os.uname()[1])[:63] or "host"
    try:
        host += "+%d" % os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pass
    return host


def pointer_path(job_dir):
    """Where this node's pointer to the job's code directory is: ``.forge-runtime/code-dir@<node tag>``."""
    return os.path.join(job_dir, RUNTIME_DIR, CODE_POINTER_PREFIX + node_tag())


def write_pointer(job_dir, code_dir):
    """Point this node's processes of the job at *code_dir* (written atomically); False when it cannot be."""
    path = pointer_path(job_dir)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        _write_new_file(tmp, code_dir)
        os.rename(tmp, path)
        return True
    except (IOError, OSError):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def _write_new_file(path, text):
    """Create *path* (never an existing file, never through a link), mode 0o644, holding *text*:
    the temp file a pointer is written to before it is renamed or linked into place."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def sweep_dead_code_dirs(folder):
    """Remove the code directories in *folder* that no process uses any more: this user's
    (the directory and its key, never through a link), keyed to this node, whose recorded
    processes (the maker's pid in the key, and every process that registered in ``users/``:
    the bootstrap's ``_register``) are all gone. That is what a launch killed by SIGKILL leaves,
    and what a node where no process lives as long as the job leaves (a Ray worker host).
    Anything else is left alone. Each candidate is first renamed aside, then its processes are
    read again there (a process registering afterwards finds it gone and makes its own); one
    still in use goes back. Returns how many went."""
    import shutil

    removed = 0
    try:
        names = [n for n in os.listdir(folder) if n.startswith(("forge-code-", SWEEPING))]
    except OSError:
        return 0
    here = node_tag()
    for name in names:
        path = os.path.join(folder, name)
        if not _unused_here(path, here):
            continue
        aside = os.path.join(folder, SWEEPING + _random_name())
        try:
            os.rename(path, aside)
        except OSError:
            continue  # another sweep took it, or it went
        if _unused_here(aside, here):
            shutil.rmtree(aside, ignore_errors=True)
            removed += 1
        else:
            try:
                os.rename(aside, path)
            except OSError:
                pass
    return removed


# A code directory being swept is renamed to this prefix first (what a sweep ended halfway left
# is swept again by the next one).
SWEEPING = ".forge-code-sweep-"
# The folder of a code directory where each process using it, other than its maker, records
# its pid (an empty file named after it), so that no sweep removes it under them.
USERS_DIR = "users"


def _random_name():
    letters = "abcdefghijklmnopqrstuvwxyz0123456789_"
    return "".join(letters[b % len(letters)] for b in bytearray(os.urandom(8)))


def _unused_here(path, here):
    """True when *path* is a code directory of this user and this node (never read through a
    link) whose recorded processes are all gone."""
    import errno
    import stat

    try:
        st = os.lstat(path)
        if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
            return False
        fd = os.open(os.path.join(path, CODE_KEY), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if os.fstat(f.fileno()).st_uid != os.getuid():
                return False
            key = json.loads(f.read().decode("utf-8"))
        users = os.path.join(path, USERS_DIR)
        pids = [key.get("pid") if isinstance(key, dict) else None]
        if os.path.isdir(users) and not os.path.islink(users):
            pids += [int(n) for n in os.listdir(users) if n.isdigit()]
    except (IOError, OSError, ValueError):
        return False
    if key.get("schema") != CODE_SCHEMA or key.get("node") != here:
        return False
    for pid in pids:
        if not isinstance(pid, int) or pid <= 0:
            return False
        try:
            os.kill(pid, 0)
            return False  # alive: its maker removes it, or it still imports from it
        except OSError as exc:
            if exc.errno != errno.ESRCH:  # EPERM: another user's process under that pid
                return False
    return True


def make_node_code_dir(zip_path, job_dir, job_id):
    """The job's code directory on a node where no node entry ran (a Ray worker host, whose
    copy of the job directory Ray unpacked): made by the first process of the job there, as the
    node entry makes one (:func:`make_code_dir`, which also sweeps the unused ones), and
    published through this node's pointer in the job directory for the job's other processes
    there. Returns the directory this process uses: its own, or the one another process
    published first (None when that one cannot be read); no process of the job on the node
    lives as long as the job, so none removes it: the next launch or maker on the node sweeps
    it once every process that used it is gone."""
    import shutil

    path = make_code_dir(zip_path, job_dir, job_id, WORKER_MODULES)
    pointer = pointer_path(job_dir)
    tmp = "%s.%d.tmp" % (pointer, os.getpid())
    try:
        _write_new_file(tmp, path)
        try:
            os.link(tmp, pointer)  # first one wins
            return path
        except FileExistsError:
            fd = os.open(pointer, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                other = f.read(4096).decode("utf-8", "replace")
            if other and os.path.isdir(other):
                shutil.rmtree(path, ignore_errors=True)
                return other
            os.rename(tmp, pointer)  # it named a directory gone from this node (swept): ours now
            return path
    except (IOError, OSError):
        return path  # no pointer: this process uses its own (swept once it is gone)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def remove_on_signals():
    """On SIGTERM or SIGHUP (where they still end the process), remove this process's code
    directory first, then end by the same signal as before (a cancelled job's exit status is
    unchanged). SIGINT raises KeyboardInterrupt, which the launcher's cleanup already sees."""
    import signal

    def handler(signum, frame):
        remove_own_code_dir()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, handler)


def remove_own_code_dir(environ=None):
    """Remove the code directory the node entry made for this process (same pid), if any,
    and this node's pointer to it in the job directory."""
    environ = os.environ if environ is None else environ
    path = environ.get(CODE_DIR_ENV)
    if not path:
        return
    try:
        with open(os.path.join(path, CODE_KEY), "rb") as f:
            key = json.loads(f.read().decode("utf-8"))
        mine = key.get("pid") == os.getpid()
    except (IOError, OSError, ValueError, AttributeError):
        return
    if not mine:
        return
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    if isinstance(key.get("job_dir"), str):
        pointer = pointer_path(key["job_dir"])
        try:
            with open(pointer) as f:
                ours = f.read() == path
            if ours:
                os.unlink(pointer)
        except (IOError, OSError):
            pass
