"""``forge submit``: resolve the job, stage its directory, hand it to a backend.

>>> sub = submit_experiment("examples/quickstart", ["opsd.scale=0.5"])   # doctest: +SKIP
>>> sub.record.status, sub.job_dir
('running', PosixPath('examples/quickstart/.forge/jobs/quickstart-20261129-120000-3fa2'))

Laptop side.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..jobs.leftovers import sweep
from ..jobs.staged import remove_tree
from .stage import ResolvedJob, resolve_job_in, stage_job

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..jobs.jobrecord import JobRecord
    from ..jobs.staged import StagedJob


@dataclass(frozen=True)
class Submission:
    resolved: ResolvedJob
    job_dir: Path | None  # None for a dry run
    record: JobRecord | None  # None for a dry run
    backend: Backend | None
    notes: tuple = ()  # things the user should know that are not errors
    staged: StagedJob | None = None  # None for a dry run

    @property
    def spec(self):
        """The JobSpec as staged (with its recipe digest and carried signatures), else as resolved."""
        return self.staged.spec if self.staged is not None else self.resolved.spec


def submit_experiment(
    directory: str | os.PathLike = ".",
    sets=(),
    *,
    backend: str | None = None,
    registry: str | None = None,
    insecure: bool = False,
    ca_file: str | None = None,
    detach: bool = False,
    dry_run: bool = False,
    require_signatures: bool = False,
    store=None,
    dev: dict | None = None,
    allow_yanked: bool = False,
) -> Submission:
    """Build the JobSpec of the experiment in *directory*; unless *dry_run*, stage and start it.

    Staging applies the trust file as ``forge lock --check`` does (an owner with trusted
    keys needs a valid signature); *require_signatures* extends that to every owner.
    """
    from ..backends.base import get_backend
    from .lock import open_experiment_registry

    resolved = resolve_job_in(directory, sets, backend=backend, dev=dev)
    if dry_run:
        return Submission(resolved=resolved, job_dir=None, record=None, backend=None)
    exp = resolved.experiment
    # The backend and its forge.yaml settings are checked before anything is staged.
    runner = get_backend(resolved.spec.backend, exp.backend_settings(resolved.spec.backend), store)
    python_note = runner.check_job_python(exp.job_python(resolved.spec.backend))
    job_dir = runner.staging_dir(exp.root, resolved.spec.id)
    notes = [python_note] if python_note else []
    notes += [f"note: removed {leftover.describe()}" for leftover in sweep(job_dir.parent.resolve())]
    runner.prepare(resolved.spec.id, job_dir)  # the local backend's supervisor starts while the job is staged
    try:
        staged = stage_job(resolved, job_dir, open_experiment_registry(exp, registry, insecure=insecure, ca_file=ca_file),
                           require_signatures=require_signatures, allow_yanked=allow_yanked)
    except BaseException:
        runner.discard(resolved.spec.id)
        raise
    try:
        record = runner.submit(staged, detach=detach)
    except BaseException:
        # The backend never took the job (no record was saved): a staged directory nobody
        # will run is half-done work, so it goes. Once a record exists, the directory is
        # the job's and stays.
        if not _recorded(runner, resolved.spec.id):
            remove_tree(job_dir)
        raise
    return Submission(resolved=resolved, job_dir=job_dir, record=record, backend=runner, notes=tuple(notes),
                      staged=staged)


def _recorded(runner, job_id: str) -> bool:
    return runner.store.path(job_id).exists()
