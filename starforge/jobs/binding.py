"""The binding of a staged job (SPEC §9): the sha256 of its runtime zip and JobSpec.

:func:`starforge.jobs.staged.stage` computes it from the tree it has just built and
returns it inside the :class:`~starforge.jobs.staged.StagedJob`; the backend hands it
to the job over its own channel: the local launcher's arguments, the batch script
slurmctld stores, the Ray job's entrypoint and ``runtime_env``. Nothing re-reads the
directory to bind it, so a file changed between staging and the start is refused.
Laptop side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..cluster.binding import sha256_file
from ..cluster.environment import runtime_paths
from ..cluster.jobdir_layout import SPEC_FILE


@dataclass(frozen=True)
class Binding:
    runtime_sha256: str  # .forge-runtime/starforge-runtime.zip
    spec_sha256: str  # jobspec.json


def compute(job_dir: str | os.PathLike) -> Binding:
    """The binding of the files in *job_dir* now (staging computes it once, from the tree it built)."""
    return Binding(
        runtime_sha256=sha256_file(runtime_paths(str(job_dir))["zip"]),
        spec_sha256=sha256_file(os.path.join(job_dir, SPEC_FILE)),
    )


def check_runtime(job_dir: str | os.PathLike, expected: str) -> str:
    """Why the job's runtime zip must not run ("" when it is the one staged).

    Checked outside the zip, before it runs (a zip cannot vouch for itself), by whoever
    starts the node entry on this machine: the local supervisor, ``forge plan``.
    """
    from ..cluster.binding import mismatch_message
    from ..cluster.interpreter import linked_job_path

    linked = linked_job_path(str(job_dir))
    if linked:
        return f"{linked} is a symbolic link; a job directory and its runtime are never followed through one"
    path = runtime_paths(str(job_dir))["zip"]
    try:
        got = sha256_file(path)
    except OSError as exc:
        return f"cannot read the job's runtime zip {path}: {exc.strerror or exc}"
    return "" if got == expected else mismatch_message("the job's runtime zip", path, got, expected)
