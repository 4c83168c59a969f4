"""``forge trace PATH``: which job(s) wrote a file or a directory, wherever it was copied (SPEC §18).

Two kinds of answer, always told apart:

- **sidecar**: a ``.forge-provenance.json`` in PATH or in a directory above it names the
  jobs that wrote there. It is a claim: whoever can write that directory can write it. So
  its text is bounded (:data:`SIDECAR_CAP`) and shown escaped, and each job it names is
  cross-checked against the job records readable here (pins and parameters compared);
- **content**: without a sidecar, PATH's files are matched against the outputs manifests
  of the jobs readable here: same size, then the same digest (made here, cached; a
  sampled digest above the job's ``sample_above``, whose match is *probable*). A file that
  several jobs wrote alike (a tokenizer, a config) does not decide between them: a job is
  named by the files only it wrote, reported as k of n files, unless every matched file is
  shared.

Nothing found is :class:`NoJobWroteThis` (exit 7): "no job wrote this".

Laptop side.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..cluster.lineage import SIDECAR, scan
from ..errors import NotFoundError
from .lineage import JobWorld, KnownJob, pins

SIDECAR_CAP = 1 << 20  # bytes of a sidecar read; a larger one is refused as a claim
SIDECAR_JOBS = 64  # job entries of one sidecar looked at
TEXT_CAP = 200  # characters of one sidecar value shown
PRECHECK_ABOVE = 64 << 20  # same-size files above this are compared by sampled digest first


class NoJobWroteThis(NotFoundError):
    """No sidecar names a job, and no readable job's outputs hold PATH's content."""


@dataclass
class TracedJob:
    """One job named as a writer of PATH, and how it was found."""

    job_id: str
    source: str  # "sidecar" or "content"
    job: KnownJob | None  # its record, when readable here
    claim: dict | None = None  # the sidecar's entry (bounded, untrusted)
    matched: int = 0  # files of PATH only this job wrote
    shared: int = 0  # files of PATH this job wrote alike with other jobs
    probable: bool = False  # a match rests on a sampled digest
    disagreements: list = field(default_factory=list)  # sidecar vs record

    def facts(self) -> dict:
        """Plugins, parameters, backend, hosts: the record's where there is one, else the claim's."""
        if self.job is not None:
            r = self.job.record
            return {"plugins": pins(r), "params": dict(r.params or {}), "backend": r.backend,
                    "hosts": self.job.hosts, "status": r.status, "removed": self.job.removed}
        c = self.claim or {}
        return {"plugins": [p for p in c.get("plugins") or () if isinstance(p, dict)],
                "params": c.get("params") if isinstance(c.get("params"), dict) else {},
                "backend": c.get("backend"), "hosts": [], "status": None, "removed": False}


@dataclass
class Trace:
    path: str
    files: int  # n: PATH's files (1 for a file)
    sidecar: str | None  # the sidecar file that answered
    jobs: list
    notes: list


def trace(path: str | os.PathLike, world: JobWorld, cache) -> Trace:
    """Who wrote *path* (see the module doc); :class:`NoJobWroteThis` when nobody did."""
    target = Path(os.path.abspath(path))
    if not target.exists():
        from ..errors import UsageError

        raise UsageError(f"{target}: no such file or directory",
                         hint="give the checkpoint file or directory as it is on this machine")
    files = [str(target)] if target.is_file() else [str(target / rel) for rel, _, _ in scan(str(target))]
    sidecar_path = find_sidecar(target)
    notes: list = []
    if sidecar_path is not None:
        claims, problem = read_sidecar(sidecar_path)
        if problem:
            notes.append(f"warning: {sidecar_path}: {problem}; not used as a claim")
        jobs = [_claimed(c, world) for c in claims]
        if jobs:
            return Trace(str(target), len(files), str(sidecar_path), jobs, notes)
    jobs = _by_content(files, world, cache)
    if not jobs:
        raise NoJobWroteThis(
            f"{target}: no job wrote this (no sidecar in or above it, and no file of it matches the outputs "
            f"of the {len(world.jobs)} job(s) readable here)",
            hint="a teammate's jobs are read with --store DIR (their jobs store); a file changed since it was written does not match",
        )
    return Trace(str(target), len(files), None, jobs, notes)


def find_sidecar(target: Path) -> Path | None:
    """The nearest ``.forge-provenance.json`` in *target* (a directory) or above it."""
    here = target if target.is_dir() else target.parent
    for folder in (here, *here.parents):
        candidate = folder / SIDECAR
        if candidate.is_file() and not candidate.is_symlink():
            return candidate
    return None


def read_sidecar(path: Path) -> tuple:
    """``(entries, problem)``: the sidecar's job entries (at most :data:`SIDECAR_JOBS`, each
    with a job id), or why none can be used."""
    from ..cluster.names import is_job_id

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            raw = f.read(SIDECAR_CAP + 1)
        if len(raw) > SIDECAR_CAP:
            return [], f"larger than {SIDECAR_CAP} bytes"
        doc = json.loads(raw)
    except (OSError, ValueError) as exc:
        return [], f"not readable as JSON ({exc})"
    entries = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return [], "not a provenance sidecar"
    good = [e for e in entries[-SIDECAR_JOBS:] if isinstance(e, dict) and isinstance(e.get("job_id"), str)
            and is_job_id(e["job_id"])]
    return good, (None if good else "names no job")


def _claimed(entry: dict, world: JobWorld) -> TracedJob:
    job = world.jobs.get(entry["job_id"])
    found = TracedJob(entry["job_id"], "sidecar", job, claim=entry)
    if job is not None:
        record = job.record
        claimed = sorted((str(p.get("ref")), str(p.get("digest"))) for p in entry.get("plugins") or () if isinstance(p, dict))
        recorded = sorted((p["ref"], p["digest"]) for p in pins(record))
        if record.plugins is not None and claimed != recorded:
            found.disagreements.append(
                f"plugins: the sidecar says {_pairs(claimed) or 'none'}, the job record says {_pairs(recorded) or 'none'}")
        if record.params is not None and entry.get("params") != record.params:
            found.disagreements.append("parameters: the sidecar's differ from the job record's")
    return found


def _pairs(pairs: list) -> str:
    return ", ".join(f"{ref} {digest}" for ref, digest in pairs)


def _by_content(files: list, world: JobWorld, cache) -> list:
    by_size: dict = {}
    for job in world.all():
        for f in job.files():
            by_size.setdefault(f.size, []).append((job, f))
    writers: list = []  # per file of PATH: {job_id: probable}
    for path in files:
        try:
            size = os.stat(path).st_size
        except OSError:
            writers.append({})
            continue
        found: dict = {}
        for job, f in by_size.get(size, ()):
            if job.record.id in found:
                continue
            try:
                # a sampled digest first: checkpoints of one size from other steps or jobs are
                # told apart by 16 MiB of reading, not by hashing each of them whole
                if size > PRECHECK_ABOVE and cache.sampled(f.path, f.size, f.mtime_ns) != cache.now(path):
                    continue
                theirs = cache.digest(f.path, f.size, f.mtime_ns, f.sample_above)
                mine = cache.now(path, f.sample_above)
            except OSError:
                continue  # their file is gone or changed since it was listed: nothing to compare
            if mine == theirs:
                found[job.record.id] = mine.startswith("sampled:")
        writers.append(found)
    jobs: dict = {}
    for found in writers:
        for job_id, probable in found.items():
            t = jobs.setdefault(job_id, TracedJob(job_id, "content", world.jobs[job_id]))
            if len(found) == 1:
                t.matched += 1
            else:
                t.shared += 1
            t.probable = t.probable or probable
    deciding = [t for t in jobs.values() if t.matched]
    cache.save()
    return sorted(deciding or jobs.values(), key=lambda t: (-t.matched, -t.shared, t.job_id))
