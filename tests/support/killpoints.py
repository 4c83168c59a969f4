"""Run ``forge`` and kill it (SIGKILL, itself) right after a named step: not at a guessed time.

    python tests/support/killpoints.py POINT [--with-supervisor] -- submit --detach

Each point wraps one function ``forge submit`` calls on its way from staging to a running
job (:data:`POINTS`); the process kills itself the moment that call returns, so the disk
holds exactly what that step left. With ``--with-supervisor`` the local supervisor it
started (its command line ends with this process's pid) is killed first, as when
everything of the submit dies at once.
"""

from __future__ import annotations

import os
import signal
import sys
import types
from pathlib import Path

# point -> (module, attribute, which call: a predicate on its arguments, what the step is)
POINTS = {
    "supervisor-started": ("starforge.backends.local", "LocalBackend.prepare", None, "the supervisor waits"),
    "staging-folder-made": ("starforge.jobs.staged", "tempfile.mkdtemp", None, "the temporary folder exists"),
    "plugins-and-recipe-copied": ("starforge.jobs.staged", "tree_digest", lambda a: Path(a[0]).name == "recipe",
                                  "forge_plugins/ and recipe/ filled"),
    "jobspec-written": ("starforge.jobs.staged", "write_spec", None, "jobspec.json written"),
    "runtime-built": ("starforge.jobs.staged", "prepare_runtime", None, ".forge-runtime/ built"),
    "work-copied": ("starforge.jobs.staged", "copy_work", None, "work/ copied"),
    "made-read-only": ("starforge.jobs.staged", "make_read_only", lambda a: Path(a[0]).name == "recipe",
                       "jobspec, plugins and recipe read-only"),
    "bound": ("starforge.jobs.staged", "compute", None, "the binding computed, not yet renamed"),
    "renamed-into-place": ("starforge.experiment.submit", "stage_job", None, "the job directory in place, no record"),
    "recorded": ("starforge.backends.local", "LocalBackend._save_new_record", None, "the record saved, job not handed over"),
    "handed-over": ("starforge.backends.local", "LocalBackend._hand_over", None, "the supervisor has the job"),
}
STAGING_POINTS = ("staging-folder-made", "plugins-and-recipe-copied", "jobspec-written", "runtime-built", "work-copied",
                  "made-read-only", "bound")


def supervisors_started_by(pid: int) -> list:
    """The pids of local supervisors whose submitting process is *pid* (the last argument)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit():
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                if b"--supervise" in argv and argv[-2:] == [str(pid).encode(), b""]:
                    found.append(int(proc.name))
        except OSError:
            continue
    return found


def _die(with_supervisor: bool) -> None:
    if with_supervisor:
        for sup in supervisors_started_by(os.getpid()):
            os.kill(sup, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point: str, with_supervisor: bool = False) -> None:
    """Make this process kill itself when the call named by *point* returns."""
    import importlib

    module_name, attribute, which, _what = POINTS[point]
    owner = importlib.import_module(module_name)
    *path, name = attribute.split(".")
    for part in path:
        if part == "tempfile":  # the staging module's own view of tempfile, not everyone's
            import tempfile

            proxy = types.SimpleNamespace(**{k: getattr(tempfile, k) for k in dir(tempfile) if not k.startswith("__")})
            setattr(owner, part, proxy)
            owner = proxy
        else:
            owner = getattr(owner, part)
    original = getattr(owner, name)

    def killing(*args, **kwargs):
        result = original(*args, **kwargs)
        if which is None or which(args[1:] if path and path[0][0].isupper() else args):
            _die(with_supervisor)
        return result

    setattr(owner, name, killing)


if __name__ == "__main__":
    argv = sys.argv[1:]
    split = argv.index("--")
    own, forge_args = argv[:split], argv[split + 1:]
    arm(own[0], with_supervisor="--with-supervisor" in own)
    from starforge.cli.main import main

    sys.exit(main(forge_args))
