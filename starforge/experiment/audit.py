"""``forge audit``: every job that ran a version yanked now, with what it wrote (SPEC §18).

Over the jobs :func:`~.lineage.read_jobs` reads (this user's store, tombstones included,
and the stores named), grouped by yanked version with its reason; for each job, its
output directories (the outputs manifests) and the sidecars it wrote. The command ends
with :data:`FOUND` when there is any such job, so a CI job or a cron can gate on it.

Laptop side.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import AUDIT_FOUND as FOUND  # noqa: F401  (the command's exit code, from the one table)
from .lineage import JobWorld, YankCheck, pins, yanks_now


@dataclass(frozen=True)
class YankedGroup:
    """One yanked version and the jobs that ran it."""

    ref: str
    digest: str
    reason: str
    as_of: str | None
    jobs: tuple  # KnownJob


@dataclass(frozen=True)
class Audit:
    groups: tuple
    jobs_read: int
    notes: tuple

    @property
    def found(self) -> bool:
        return bool(self.groups)

    def to_json(self) -> dict:
        return {
            "found": self.found,
            "jobs_read": self.jobs_read,
            "versions": [{
                "ref": g.ref, "digest": g.digest, "reason": g.reason, "as_of": g.as_of,
                "jobs": [job_json(j) for j in g.jobs],
            } for g in self.groups],
            "notes": list(self.notes),
        }


def job_json(job) -> dict:
    r = job.record
    dirs = job.output_dirs()
    return {"id": r.id, "status": r.status, "backend": r.backend, "created": r.created, "removed": job.removed,
            "store": str(job.store), "hosts": job.hosts, "params": dict(r.params or {}),
            "outputs": dirs, "sidecars": [d["path"] for d in dirs if d.get("sidecar") is True]}


def audit(world: JobWorld, yank_check: YankCheck = yanks_now) -> Audit:
    """The jobs of *world* that ran a version yanked now (by *yank_check*), by version."""
    every = {(p["ref"], p["digest"]) for job in world.all() for p in pins(job.record)}
    yanked, notes = yank_check(sorted(every))
    groups = []
    for digest in sorted(yanked, key=lambda d: (yanked[d].ref, d)):
        y = yanked[digest]
        ran = tuple(job for job in world.all() if any(p["digest"] == digest for p in pins(job.record)))
        if ran:
            groups.append(YankedGroup(y.ref, digest, y.reason, y.as_of, ran))
    unknown = [job.record.id for job in world.all() if job.record.plugins is None]
    if unknown:
        notes = list(notes) + [f"note: {len(unknown)} job(s) recorded before pins were kept, not audited: "
                               + ", ".join(unknown[:8]) + (", …" if len(unknown) > 8 else "")]
    return Audit(tuple(groups), len(world.jobs), tuple(notes) + tuple(world.problems))
