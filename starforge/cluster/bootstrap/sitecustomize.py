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
    if runtime_zip and runtime_zip not in _sys.path and _os.path.isfile(runtime_zip):
        # The job's runtime first: the starforge that staged the job wins over a
        # starforge-core installed in this environment (SPEC §11).
        _sys.path.insert(_bootstrap_index() + 1, runtime_zip)
    try:
        from starforge.cluster.process import boot_process
    except BaseException as exc:
        _sys.stderr.write(
            "forge: process %d cannot import the starforge runtime (%s: %s); FORGE_RUNTIME=%r\n"
            % (_os.getpid(), type(exc).__name__, exc, runtime_zip)
        )
        _sys.stderr.flush()
        _os._exit(12)
    boot_process("start-up")


def _bootstrap_index():
    """The place of this bootstrap directory on sys.path (-1 when it is not there)."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    for i, entry in enumerate(_sys.path):
        if _os.path.abspath(entry or _os.curdir) == here:
            return i
    return -1


_run_hidden_sitecustomize()
_forge_bootstrap()
