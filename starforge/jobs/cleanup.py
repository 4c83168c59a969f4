"""Which jobs ``forge jobs rm`` and ``forge jobs prune`` delete, and deleting them.

The policy lives here; the CLI (:mod:`starforge.cli.jobs`) parses arguments and prints.
A job goes with its record and, when the directory is its own, its staged directory
(never reached through a symlink: :mod:`starforge.jobs.jobdir`). A directory whose
working directory holds outputs (:mod:`starforge.jobs.outputs`) goes only with
``with_outputs``. Every job is checked before anything is deleted, so a refusal deletes
nothing; a job whose directory could not be deleted entirely keeps its record and is
named in a :class:`~starforge.errors.RemovalError` (no deletion is reported that did not
happen).

Laptop side, standard library only.

>>> parse_age("7d")
604800
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ..cluster.removal import describe_failures
from ..cluster.utctime import TIMESTAMP
from ..errors import RemovalError, UsageError
from .jobdir import removable_job_dir, remove_job_dir
from .jobrecord import JobRecord
from .outputs import job_outputs, read_manifests
from .store import JobStore, UnreadableRecord

AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> int:
    """``30m``, ``12h``, ``7d``, ``2w`` (or seconds: ``90s``) as a number of seconds."""
    match = re.fullmatch(r"(\d{1,6})([smhdw])", text.strip())
    if not match:
        raise UsageError(f"--older-than: '{text}' is not an age", hint="a number and a unit: 30m, 12h, 7d, 2w")
    return int(match.group(1)) * AGE_UNITS[match.group(2)]


def created_at(record: JobRecord) -> int | None:
    """When *record* was created, in seconds since the epoch (None when unreadable)."""
    try:
        return calendar.timegm(time.strptime(record.created, TIMESTAMP))
    except ValueError:
        return None


def directory_gone(record: JobRecord) -> bool:
    """Whether the job's directory was deleted outside forge."""
    return not Path(record.dir).is_dir()


@dataclass(frozen=True)
class PruneSelection:
    """What ``prune`` deletes (``chosen``) and the records it keeps whose directory is gone."""

    chosen: tuple
    dirless: tuple


def select_prune(records: Iterable[JobRecord], *, older_than: int | None, gone: bool,
               refresh: Callable[[JobRecord], JobRecord] = lambda r: r, now: float | None = None) -> PruneSelection:
    """The ended jobs to prune: with *gone*, those whose directory is gone; with
    *older_than* (seconds), those created longer ago. *refresh* gives a job's record as its
    backend sees it now (asked only of candidates: it may query a backend); a job still
    running is never chosen."""
    if older_than is None and not gone:
        raise UsageError("say what to prune: --older-than AGE, --gone, or both", hint="e.g. forge jobs prune --older-than 7d")
    cutoff = (time.time() if now is None else now) - older_than if older_than is not None else None
    chosen, dirless = [], []
    for record in records:
        missing = directory_gone(record)
        created = created_at(record)
        old = cutoff is not None and created is not None and created < cutoff
        if (gone and missing) or old:
            record = record if record.final else refresh(record)
            if record.final:
                chosen.append(record)
                continue
        if missing:
            dirless.append(record)
    return PruneSelection(chosen=tuple(chosen), dirless=tuple(dirless))


def check_removable(records: Iterable[JobRecord], *, with_outputs: bool = False) -> None:
    """Refuse, before anything is deleted, a job still pending or running, one whose
    directory is reached through a symlink now, or (unless *with_outputs*) one whose
    working directory holds outputs, saying how many and how large."""
    for record in records:
        if not record.final:
            raise UsageError(f"job {record.id} is {record.status}", hint=f"cancel it first: forge jobs cancel {record.id}")
        job_dir = removable_job_dir(record)
        outputs = job_outputs(job_dir) if job_dir is not None else None
        if outputs is not None and outputs.any and not with_outputs:
            raise UsageError(
                f"job {record.id} holds outputs ({outputs.describe()}); nothing was deleted",
                hint="copy what you need, then add --with-outputs to delete them with the job",
            )


def remove_jobs(records: Iterable[JobRecord], store: JobStore | None = None, *, with_outputs: bool = False,
                unreadable: Iterable[UnreadableRecord] = ()) -> list:
    """Delete each job (its own directory, then its record), after checking them all; return the ids.

    An *unreadable* record (truncated, not JSON) names no directory: only its file goes.
    A job whose directory could not be deleted entirely keeps its record (forge can try
    again once the cause is fixed); the others still go, and then :class:`RemovalError`
    names what was left, carrying the ids that were removed.
    """
    unique = list({r.id: r for r in records}.values())
    check_removable(unique, with_outputs=with_outputs)
    from .jobindex import with_pins

    store = store if store is not None else JobStore()
    removed, left = [], []
    for record in unique:
        tombstone = with_pins(record)
        lineage, _ = read_manifests(record.dir)  # what it wrote, kept in the tombstone (SPEC §18)
        job_dir = removable_job_dir(record)
        failures = remove_job_dir(job_dir) if job_dir is not None else []
        if failures:
            left.append((record.id, job_dir, failures))
            continue
        store.remove(record.id, tombstone, lineage=lineage)
        removed.append(record.id)
    for damaged in {u.id: u for u in unreadable}.values():
        store.remove(damaged.id)
        removed.append(damaged.id)
    if left:
        job_id, job_dir, failures = left[0]
        others = f" (and {len(left) - 1} more job(s) like it)" if len(left) > 1 else ""
        raise RemovalError(
            f"job {job_id}: {len(failures)} entr{'y' if len(failures) == 1 else 'ies'} of {job_dir} could not be deleted, "
            f"so its record is kept{others}: {describe_failures(failures)}",
            hint=f"make them deletable (or ask their owner), then run forge jobs rm {job_id} again",
            removed=removed,
        )
    return removed
