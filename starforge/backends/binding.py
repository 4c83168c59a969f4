"""The binding of a staged job (SPEC §9): the sha256 of its runtime zip and JobSpec.

:func:`starforge.experiment.stage.stage_job` computes it from the tree it has just built
(:func:`bind_staged`) and the backend hands it to the job over its own channel
(:func:`binding_for`): the local launcher's arguments, the batch script slurmctld stores,
the Ray job's entrypoint and ``runtime_env``. A job directory this process did not stage
(a backend driven by hand) is bound to what it holds when submitted. Laptop side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..cluster.binding import sha256_file
from ..cluster.environment import runtime_paths

SPEC_NAME = "jobspec.json"


@dataclass(frozen=True)
class Binding:
    runtime_sha256: str  # .forge-runtime/starforge-runtime.zip
    spec_sha256: str  # jobspec.json


_staged: dict[str, Binding] = {}


def compute(job_dir: str | os.PathLike) -> Binding:
    """The binding of the files in *job_dir* now."""
    return Binding(
        runtime_sha256=sha256_file(runtime_paths(str(job_dir))["zip"]),
        spec_sha256=sha256_file(os.path.join(job_dir, SPEC_NAME)),
    )


def bind_staged(built: str | os.PathLike, job_dir: str | os.PathLike) -> Binding:
    """Compute the binding of the tree just *built*, remembered for its final *job_dir*."""
    binding = compute(built)
    _staged[str(Path(job_dir).resolve())] = binding
    return binding


def binding_for(job_dir: str | os.PathLike) -> Binding:
    """The binding computed when this process staged *job_dir*, else the files' own now."""
    return _staged.get(str(Path(job_dir).resolve())) or compute(job_dir)


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
