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
