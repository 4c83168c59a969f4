"""StarForge job bootstrap: every new Python process of a forge job carries its plugins.

This file is put first on PYTHONPATH by forge-launch (or by a backend through
starforge.launch.bootstrap_env). It first runs the sitecustomize it hides (the
environment's own, if any), then, when FORGE_JOBSPEC is set, verifies the job's plugins,
registers deferred ones and applies eager ones (at start-up, or at the first import of a
declared target). That is in processes of the job's Python (FORGE_PYTHON); another
interpreter that merely inherits the environment (a system python3 tool) is left alone
unless it imports a declared target, and says so in its provenance record. On failure it writes the reason to stderr and ends the process with the
launcher's exit code: a failure here must never pass silently.
"""

import os as _os
import sys as _sys


def _run_hidden_sitecustomize():
    import importlib.machinery
    import importlib.util

    # Every forge bootstrap directory seen in this process is skipped, so two of them on
    # sys.path (a job started from inside another) cannot chain to each other forever.
    seen = _sys.__dict__.setdefault("_forge_bootstrap_dirs", set())
    seen.add(_os.path.dirname(_os.path.abspath(__file__)))
    others = [p for p in _sys.path if _os.path.abspath(p or _os.curdir) not in seen]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:
        # What CPython itself does with a failing sitecustomize.
        import traceback

        _sys.stderr.write("Error in sitecustomize (%s); traceback follows:\n" % spec.origin)
        traceback.print_exc()
    _sys.modules["_forge_hidden_sitecustomize"] = module


def _forge_bootstrap():
    if not _os.environ.get("FORGE_JOBSPEC"):
        return
    if _sys.version_info < (3, 10):
        return  # the runtime does not run here: an older interpreter is left alone entirely
    runtime_zip = _os.environ.get("FORGE_RUNTIME")
    if runtime_zip:
        runtime_zip = _os.path.abspath(runtime_zip)
    runtime = runtime_zip
    code_dir = _code_dir(runtime_zip)
    if code_dir:
        runtime = code_dir  # the same sources, compiled once for the job ...
        if _os.path.isfile(_os.path.join(code_dir, "runtime-code.zip")):
            runtime = _os.path.join(code_dir, "runtime-code.zip")  # ... in one zip, with their compiled code
    if runtime and _os.path.exists(runtime):
        # The job's runtime first: the starforge that staged the job wins over a
        # starforge-core installed in this environment (SPEC §11), and over any other
        # copy of the runtime further down the path.
        if runtime in _sys.path:
            _sys.path.remove(runtime)
        _sys.path.insert(_bootstrap_index() + 1, runtime)
    try:
        from starforge.cluster.process_job import boot_process
    except BaseException as exc:
        _sys.stderr.write(
            "forge: process %d cannot import the starforge runtime (%s: %s); FORGE_RUNTIME=%r\n"
            % (_os.getpid(), type(exc).__name__, exc, runtime_zip)
        )
        _sys.stderr.flush()
        _os._exit(12)  # status.IMPORT_EXIT, written out: the runtime that holds the table is what failed to import
    boot_process("start-up")


def _code_dir(runtime_zip):
    """The job's code directory on this node (FORGE_CODE_DIR), when this process may use it.

    The node entry put the runtime zip's sources there with their compiled code (one zip,
    runtime-code.zip), or unpacked them for the job's processes to keep the compiled code
    in its __pycache__. It is used only when it is a real directory of
    this user that nobody else can enter, and its key names this job and this very zip (by
    sha256); otherwise it is taken off sys.path and this process imports from the zip.
    """
    path = _os.environ.get("FORGE_CODE_DIR")
    pointed = not path
    if pointed:
        path = _pointed_code_dir()
        if not path or not _os.path.lexists(path):
            path = _node_code_dir(runtime_zip)
    if not path:
        return None
    path = _os.path.abspath(path)
    reason = _code_dir_refusal(path, runtime_zip)
    if reason is None and pointed and not _register(path, runtime_zip):
        reason = "it went while this process started"
    if reason is None:
        return path
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or _os.curdir) != path
                    and not _os.path.abspath(p or _os.curdir).startswith(path + _os.sep)]
    if not _os.path.lexists(path):
        return None  # another node (a Ray worker), or the launcher has ended: nothing to say
    _sys.stderr.write("forge: process %d does not use the code directory %s (%s); the runtime zip is compiled here\n"
                      % (_os.getpid(), path, reason))
    return None


def _codedir_functions(runtime_zip):
    """codedir.py's functions, compiled from the runtime zip in a namespace of their own,
    after the job directory's names they use (as node_entry.py does): importing
    ``starforge`` here would fix it to the zip before the code directory is on the path."""
    import zipimport

    zf = zipimport.zipimporter(runtime_zip)
    functions = {"__name__": "forge_codedir"}
    for name in ("starforge/cluster/jobdir_layout.py", "starforge/cluster/codedir.py"):
        functions["__file__"] = _os.path.join(runtime_zip, name)
        exec(compile(zf.get_data(name), functions["__file__"], "exec", dont_inherit=True), functions)  # noqa: S102
    return functions


def _node_code_dir(runtime_zip):
    """The job's code directory made on this node by this process, for a process that a
    backend started in its own unpacked copy of the job directory (a relative
    FORGE_JOB_DIR: a Ray worker), where no node entry ran and none points to one yet."""
    job_dir = _os.environ.get("FORGE_JOB_DIR", "")
    job_python = _os.environ.get("FORGE_PYTHON")
    if not runtime_zip or not job_dir or _os.path.isabs(job_dir) or (job_python and job_python != _sys.executable):
        return None
    try:
        return _codedir_functions(runtime_zip)["make_node_code_dir"](
            runtime_zip, _os.path.abspath(job_dir), _os.environ.get("FORGE_JOB_ID"))
    except Exception as exc:  # an unsafe TMPDIR among them: this process compiles from the zip
        _sys.stderr.write("forge: process %d makes no code directory on this node (%s); the runtime zip is compiled here\n"
                          % (_os.getpid(), exc))
        return None


def _register(path, runtime_zip):
    """Record this process as a user of the code directory *path* (found through the job
    directory's pointer): ``users/<pid>`` in it (the folder codedir's sweep reads, written
    here without importing codedir so a worker compiles nothing for it), so no sweep removes
    it while this process lives."""
    users = _os.path.join(path, "users")
    try:
        try:
            _os.mkdir(users, 0o700)
        except FileExistsError:
            pass
        _os.close(_os.open(_os.path.join(users, str(_os.getpid())), _os.O_WRONLY | _os.O_CREAT | getattr(_os, "O_NOFOLLOW", 0), 0o600))
    except OSError:
        return False
    return _os.path.isfile(_os.path.join(path, "forge-code.json"))


def _pointed_code_dir():
    """The code directory this node's pointer in the job directory names (for a process
    whose environment was fixed before the node entry ran: a Ray worker), or None."""
    host = "".join(c if c.isalnum() or c in ".-" else "_" for c in _os.uname()[1])[:63] or "host"
    try:
        host += "+%d" % _os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pass
    job_dir = _os.environ.get("FORGE_JOB_DIR") or _os.path.dirname(_os.environ["FORGE_JOBSPEC"])
    try:
        fd = _os.open(_os.path.join(job_dir, ".forge-runtime", "code-dir@" + host), _os.O_RDONLY | getattr(_os, "O_NOFOLLOW", 0))
        with _os.fdopen(fd, "rb") as f:
            return f.read(4096).decode("utf-8", "replace") or None
    except OSError:
        return None


def _code_dir_refusal(path, runtime_zip):
    """Why the code directory at *path* must not be used here, or None."""
    import hashlib
    import json
    import stat

    try:
        st = _os.lstat(path)
    except OSError as exc:
        return "cannot be read: %s" % exc
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != _os.getuid():
        return "owned by uid %d, not this user" % st.st_uid
    if st.st_mode & 0o077:
        return "mode %o lets others in" % stat.S_IMODE(st.st_mode)
    try:
        fd = _os.open(_os.path.join(path, "forge-code.json"), _os.O_RDONLY | getattr(_os, "O_NOFOLLOW", 0))
        with _os.fdopen(fd, "rb") as f:
            if _os.fstat(f.fileno()).st_uid != _os.getuid():
                return "its key is not this user's"
            key = json.loads(f.read())
        with open(runtime_zip or "", "rb") as f:
            runtime_sha256 = hashlib.sha256(f.read()).hexdigest()
    except (OSError, ValueError) as exc:
        return "no usable key: %s" % exc
    if not isinstance(key, dict) or key.get("schema") != "forge/code-dir/v1":
        return "no usable key"
    job_dir = _os.path.abspath(_os.environ.get("FORGE_JOB_DIR") or _os.path.dirname(_os.environ["FORGE_JOBSPEC"]))
    if key.get("job_id") != _os.environ.get("FORGE_JOB_ID") or key.get("job_dir") != job_dir:
        return "made for another job"
    if key.get("runtime_sha256") != runtime_sha256:
        return "made from another runtime zip"
    return None


def _bootstrap_index():
    """The place of this bootstrap directory on sys.path (-1 when it is not there)."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    for i, entry in enumerate(_sys.path):
        if _os.path.abspath(entry or _os.curdir) == here:
            return i
    return -1


_run_hidden_sitecustomize()
_forge_bootstrap()
