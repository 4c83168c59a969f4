"""The jobs a lineage question looks at, and what each wrote (SPEC §18).

``forge jobs outputs``, ``forge trace`` and ``forge audit`` read job records: this user's
jobs store, the tombstones of removed jobs (``removed/``, which keep the outputs manifests
their job directories held), and any other stores named (``--store``: a team's shared job
directories). Each job's outputs are the rows of its manifests, one per file and path
(the same file listed by several attempts or hosts counts once, as its newest listing).

Whether a version is yanked now is :func:`yanks_now`'s one question to the yank facts.

Laptop side.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ..jobs.jobrecord import JobRecord


@dataclass(frozen=True)
class OutputFile:
    """One file a job's manifest lists."""

    job_id: str
    path: str  # absolute, as the job's host saw it
    rel: str  # relative to its output directory
    dir: str
    size: int
    mtime_ns: int
    sample_above: int
    host: str


@dataclass(frozen=True)
class KnownJob:
    """A job record a lineage question can read, with its outputs manifests (read from its
    job directory when first asked for, or kept in its tombstone)."""

    record: JobRecord
    store: Path
    removed: bool  # a tombstone: the job's files were deleted with forge jobs rm / prune
    kept: tuple | None = None  # the manifests a tombstone kept

    @cached_property
    def _read(self) -> tuple:
        if self.kept:
            return self.kept, ()
        from ..jobs.outputs import read_manifests

        manifests, problems = read_manifests(Path(self.record.dir))
        return tuple(manifests), tuple(problems)

    @property
    def manifests(self) -> tuple:
        return self._read[0]

    @property
    def problems(self) -> tuple:
        return self._read[1]

    @property
    def hosts(self) -> list:
        return sorted({m["host"] for m in self.manifests})

    def files(self) -> list:
        """Each listed file once (its newest listing), in path order; a file of a host's own
        copy of ``work/`` (``node_local``: Ray, where every host's copy may have the same
        path) once per host."""
        newest: dict = {}
        for m in self.manifests:
            for d in m["dirs"]:
                if not d.get("path"):
                    continue
                host = m["host"] if d.get("node_local") else ""
                for rel, size, mtime in d.get("files", ()):
                    path = os.path.join(d["path"], rel)
                    newest[(path, host)] = OutputFile(self.record.id, path, rel, d["path"], size, mtime,
                                                      m.get("sample_above") or DEFAULT_SAMPLE_ABOVE, m["host"])
        return [newest[k] for k in sorted(newest)]

    def output_dirs(self) -> list:
        """``[{path, declared, kind, files, bytes, sidecar}]`` of the newest attempt's listing
        (of each host's, for a host's own copy of ``work/``)."""
        seen: dict = {}
        for m in self.manifests:
            for d in m["dirs"]:
                key = (d.get("path") or d.get("declared"), m["host"] if d.get("node_local") else "")
                files = d.get("files") or []
                seen[key] = {"path": d.get("path"), "declared": d.get("declared"), "kind": d.get("kind"),
                             "host": m["host"], "files": len(files), "bytes": sum(f[1] for f in files),
                             "sidecar": d.get("sidecar"), "missing": bool(d.get("missing")),
                             "unresolved": bool(d.get("unresolved"))}
        return list(seen.values())


DEFAULT_SAMPLE_ABOVE = 4 << 30


@dataclass
class JobWorld:
    """Every job record readable for a question, by id; what could not be read."""

    jobs: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)

    def all(self) -> list:
        return [self.jobs[k] for k in sorted(self.jobs)]


def read_jobs(stores: Sequence[str | os.PathLike] = (), *, own: bool = True) -> JobWorld:
    """The jobs of this user's store (with *own*) and of *stores*, tombstones included; a
    live record wins over a tombstone of the same id, the first store over later ones. A
    store named that is not a directory is a :class:`UsageError`."""
    from ..cluster.lineage import LINEAGE_DIR
    from ..errors import UsageError
    from ..jobs.store import REMOVED_DIR, JobStore

    world = JobWorld()
    for named in stores:  # a typo in a CI gate's --store must not pass as "no job found"
        if not Path(named).is_dir():
            raise UsageError(f"--store {named}: no such directory",
                             hint="name a jobs store: the folder holding the job records (<id>.json), e.g. $FORGE_HOME/jobs")
    roots = ([JobStore().root] if own else []) + [Path(s) for s in stores]
    for root in roots:
        records, unreadable = JobStore(root).scan()
        world.problems += [f"{u.path}: unreadable job record: {u.reason}" for u in unreadable]
        for record in records:
            if record.id not in world.jobs or world.jobs[record.id].removed:
                world.jobs[record.id] = KnownJob(record, root, False)
        for path in sorted((root / REMOVED_DIR).glob("*.json")) if (root / REMOVED_DIR).is_dir() else ():
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                record = JobRecord.from_dict(data)
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                world.problems.append(f"{path}: unreadable tombstone: {exc}")
                continue
            if record.id in world.jobs:
                continue
            kept = data.get(LINEAGE_DIR)
            from ..jobs.outputs import valid_manifest

            manifests = [m for m in kept if isinstance(m, dict) and valid_manifest(m)] if isinstance(kept, list) else []
            world.jobs[record.id] = KnownJob(record, root, True, tuple(manifests))
    return world


def pins(record: JobRecord) -> list:
    """``[{ref, digest}]`` the job ran (empty when its record predates pins)."""
    return [p for p in record.plugins or () if isinstance(p, dict) and p.get("ref") and p.get("digest")]


@dataclass(frozen=True)
class YankNow:
    """A version yanked now: its ref, the reason, as of when."""

    ref: str
    digest: str
    reason: str
    as_of: str | None


YankCheck = Callable[[Iterable[tuple]], tuple]


def yanks_now(pin_list: Iterable[tuple]) -> tuple:
    """``({digest: YankNow}, notes)`` for the yanked versions among *pin_list* (``(ref,
    digest)``), as the plugin store judges them (:meth:`starforge.registry.store.PluginStore.yank`:
    the registry's yank facts, else the last seen on this machine). Built-ins (``recipe:…``)
    are never yanked."""
    from ..errors import ForgeError
    from ..jobs.jobindex import pin_parts
    from ..registry.factory import open_registry
    from ..registry.store import PluginStore

    notes: list = []
    try:
        registry = open_registry()
    except ForgeError as exc:
        registry, notes = None, [f"note: no registry ({exc.message}): the yank facts last seen here are used"]
    store = PluginStore(registry)
    found: dict = {}
    for ref, digest in sorted(set(pin_list)):
        owner, name, version = pin_parts({"ref": ref})
        if not owner:
            continue
        try:
            facts = store.yank(owner, name, version, digest)
        except ForgeError as exc:
            notes.append(f"warning: {ref}: {exc.message}")
            continue
        if facts.yanked:
            found[digest] = YankNow(ref, digest, facts.reason or "", facts.as_of)
    return found, notes


def find_job(world: JobWorld, job_id: str) -> KnownJob:
    """The job *job_id* (or the one job it is a prefix of) among *world*'s, tombstones included."""
    from ..errors import NotFoundError, UsageError

    if job_id in world.jobs:
        return world.jobs[job_id]
    matches = [k for k in world.jobs if k.startswith(job_id)]
    if len(matches) > 1:
        raise UsageError(f"job id prefix '{job_id}' matches {len(matches)} jobs", hint=f"give more of the id: {', '.join(sorted(matches)[:8])}")
    if not matches:
        raise NotFoundError(f"no job '{job_id}' in the jobs store", hint="list jobs with: forge jobs list")
    return world.jobs[matches[0]]


def output_rows(job: KnownJob, *, with_hash: bool = False, cache=None) -> list:
    """One row per file the job's manifests list: ``{path, dir, size, mtime_ns, host, state,
    digest, probable}``. *state* says how the file is now: ``listed`` (as the manifest says),
    ``changed`` (size or modification time differ: not digested), ``missing`` (gone or not
    reachable from here). With *with_hash*, listed files get their digest (cached)."""
    rows = []
    for f in job.files():
        row = {"path": f.path, "dir": f.dir, "rel": f.rel, "size": f.size, "mtime_ns": f.mtime_ns, "host": f.host,
               "state": "listed", "digest": None, "probable": False}
        try:
            st = os.stat(f.path)
            if (st.st_size, st.st_mtime_ns) != (f.size, f.mtime_ns):
                row["state"] = "changed"
            elif with_hash and cache is not None:
                row["digest"] = cache.digest(f.path, f.size, f.mtime_ns, f.sample_above)
                row["probable"] = row["digest"].startswith("sampled:")
        except OSError:
            row["state"] = "missing"
        rows.append(row)
    return rows
