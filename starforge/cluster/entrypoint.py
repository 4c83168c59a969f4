"""Running the job's training entrypoint, for the launcher (:mod:`.launcher`).

``python [flags] -m mod ...`` and ``python [flags] script ...`` run in the launcher's own
process (``runpy``) when every flag can be honoured there, with ``sys.path`` as that
command started with the job's environment would have it; anything else runs as a child
process (:mod:`.child_process`). An exception the entrypoint lets out is printed without
the launcher's own frames; an ``InstallError`` (a deferred plugin's ``install`` raised)
becomes the launch's failure.

Cluster side: standard library only.
"""

from __future__ import annotations

import os
import sys

from .child_process import run_child
from .errors import ForgeError, InstallError, LaunchFailure, PatchError, SpecError
from .interpreter import runs_in_job_python
from .interpreter_flags import apply_flags, in_process_form


def run_entrypoint(argv: list[str], recipe: str, workdir: str | None = None):
    """Run the entrypoint in *workdir* (default *recipe*); return (exit code, LaunchFailure or None).

    ``python [flags] -m mod ...`` and ``python [flags] script ...`` run in this process when
    every flag can be honoured here; anything else runs as a child process.
    """
    python = runs_in_job_python(argv, recipe, sys.executable)
    form = in_process_form(argv) if python else None
    workdir = workdir or recipe
    try:
        os.chdir(workdir)
    except OSError as exc:
        failure = LaunchFailure(SpecError, None, f"cannot enter the job's working directory {workdir}: {exc}")
        return failure.code, failure
    if form is None:
        return run_child(argv)
    flags, module, script, args = form
    import runpy

    sys.stdout.flush()
    apply_flags(flags)
    try:
        if module is not None:
            sys.path[:] = _trainer_sys_path(os.getcwd())
            sys.argv = [module] + list(args)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            # as `python SCRIPT` in the working directory: its copy of a recipe script (what
            # it imports of the recipe comes from the staged recipe all the same)
            sys.path[:] = _trainer_sys_path(os.path.dirname(os.path.realpath(script)))
            sys.argv = [script] + list(args)
            runpy.run_path(script, run_name="__main__")  # argv[0] as python would have it
        return 0, None
    except SystemExit as exc:
        return _exit_code(exc.code), None
    except KeyboardInterrupt:
        import traceback

        traceback.print_exc()
        return 130, None
    except BaseException as exc:
        import traceback

        install = _install_error(exc)
        if install is not None:
            detail = "".join(traceback.format_exception(type(exc), exc, _trim(exc.__traceback__)))
            ref = getattr(install, "plugin", None)
            failure = LaunchFailure(InstallError, ref, install.message, detail)
            return failure.code, failure
        traceback.print_exception(type(exc), exc, _trim(exc.__traceback__))
        return 1, None
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _trainer_sys_path(first: str) -> list:
    """``sys.path`` as ``python -m``/``python script`` started with the job environment has it.

    *first* (the working directory, or the script's directory), then the entries of
    ``PYTHONPATH`` (the job's bootstrap, its runtime zip and ``recipe/`` first), then the interpreter's own
    (standard library, site-packages); nothing of the launcher's.
    """
    env_entries: list = []
    for p in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p:
            p = os.path.abspath(p)
            if p not in env_entries:
                env_entries.append(p)
    runtime_zip = os.environ.get("FORGE_RUNTIME", "")
    if runtime_zip and os.path.isfile(runtime_zip) and os.path.abspath(runtime_zip) not in env_entries:
        # where the bootstrap puts it in every other process: right after itself
        env_entries.insert(1 if env_entries else 0, os.path.abspath(runtime_zip))
    rest = [p for p in sys.path if p not in env_entries]
    return [first] + env_entries + rest


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, bool):
        return int(code)
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def _install_error(exc: BaseException | None) -> ForgeError | None:
    """The install failure in *exc*'s chain: a deferred plugin's ``install`` that raised, or
    a patch that waited for its module's import (``when_imported``) and found no target
    there, which is its plugin's failure as much as one inside ``install``."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, InstallError) or (isinstance(exc, PatchError) and getattr(exc, "plugin", None)):
            return exc
        seen.add(id(exc))
        exc = exc.__context__
    return None


def _trim(tb):
    """Drop the launcher's and runpy's own frames from the top of a trainer traceback."""
    import runpy

    here = os.path.abspath(__file__)  # from the job's code zip: its .pyc, compiled as the .py beside it
    skip = {here, os.path.splitext(here)[0] + ".py", os.path.abspath(runpy.__file__), "<frozen runpy>"}
    while tb is not None and (tb.tb_frame.f_code.co_filename in skip or os.path.abspath(tb.tb_frame.f_code.co_filename) in skip):
        tb = tb.tb_next
    return tb
