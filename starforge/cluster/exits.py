"""Ending a process of the job when a plugin fails in it (SPEC §9).

CPython prints and ignores an exception raised in ``sitecustomize`` or a Ray setup hook,
so a failure there would pass silently. Instead the reason goes to stderr and to the
provenance record, and the process ends with ``os._exit`` and the exit code of the phase
that failed. Standard library only.
"""

from __future__ import annotations

import os
import sys

from .errors import ForgeError, LaunchFailure

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Callable, NoReturn, Protocol

    class Recorded(Protocol):
        """What is told of the failure: a job (:class:`.job.Job`) that writes its provenance."""

        failure: LaunchFailure | None

        def write_provenance(self) -> str | None: ...


def run_or_exit(job: Recorded | None, action: Callable[[], object]) -> None:
    """Run *action*; on failure say why, record it and end the process with the §9 code."""
    try:
        action()
    except LaunchFailure as failure:
        die(job, failure)
    except ForgeError as exc:
        die(job, LaunchFailure.from_error(exc))


def die(job: Recorded | None, failure: LaunchFailure) -> NoReturn:
    try:
        if job is not None:
            job.failure = failure
        sys.stderr.write(f"forge: process {os.getpid()} stops the job: {failure.message}\n")
        if failure.detail:
            sys.stderr.write(failure.detail)
        sys.stderr.flush()
        if job is not None:
            job.write_provenance()
    finally:
        os._exit(failure.code)
