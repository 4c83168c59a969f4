"""Provenance: what each process of a job verified, loaded, registered and patched.

The job directory holds ``provenance/``, one JSON record per host, pid and attempt, named
``a<attempt>-<host>-<pid>.json`` and written atomically (the launcher at the end of its
launch and again when the entrypoint returns, other processes at exit).
:func:`summarize` folds them into one view for ``forge jobs show``.

Cluster side: standard library only.
"""

from __future__ import annotations

import os
import sys

from .atomic import write_file
from .jobdir_layout import PROVENANCE_DIR as DIRNAME
from .jobspec import format_json

TYPE_CHECKING = False  # typing only for annotations: a worker's start does not import it
if TYPE_CHECKING:
    from typing import Any

SCHEMA = "forge/provenance/v1"
# The fields of a process's record, in the order it writes them (:func:`new_record`), each with
# the JSON types it may hold (None: null): what a reader of records from an untrusted place
# keeps (``starforge.jobs.log_provenance``); REQUIRED are those every record has.
FIELDS: dict = {
    "schema": (str,),
    "job_id": (str,),
    "role": (str,),
    "mode": (str, None),
    "host": (str,),
    "pid": (int,),
    "attempt": (int,),
    "argv": (list,),
    "python": (str,),
    "executable": (str, None),
    "core_version": (str,),
    "started": (str, None),
    "written": (str, None),
    "disabled": (bool,),
    "plugins": (list,),
    "patches": (list,),
    "failure": (dict, None),
    "scheduler": (dict,),
    "environment": (dict, None),
    "replay_of": (str, None),
}
REQUIRED = ("schema", "job_id", "role", "host", "pid", "attempt", "plugins", "patches")
# set to 1 where records also travel in the job's log (:mod:`.provenance_log`)
LOG_ENV = "FORGE_PROVENANCE_LOG"
# a folder every host sees (Slurm's shared job directory) where records are also written as
# they are made: a killed attempt runs no collect step, and still leaves them there
SHARED_ENV = "FORGE_PROVENANCE_SHARED"
# A patch is one (target, plugin, mode), recorded once per process that made it; the job's
# summary keeps the furthest status any process reached (the launcher sees a patch pending
# that the trainer applied), and how many processes reached each.
_PATCH_KEY = ("target", "plugin", "mode")
_PATCH_STATUS_RANK = {"failed": 0, "applied": 1, "undone": 2, "pending": 3}


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _safe(text: str) -> str:
    """*text* with each run of characters outside ``[A-Za-z0-9._-]`` replaced by one ``_``."""
    if _SAFE.issuperset(text):
        return text
    out = []
    for ch in text:
        if ch in _SAFE:
            out.append(ch)
        elif not out or out[-1] != "\0":
            out.append("\0")
    return "".join(out).replace("\0", "_")


_SLURM_IDS = (
    ("SLURM_JOB_ID", "job_id"),
    ("SLURM_STEP_ID", "step_id"),
    ("SLURM_NODEID", "node_id"),
    ("SLURM_PROCID", "proc_id"),
    ("SLURM_LOCALID", "local_id"),
)


_ray_ids_seen: dict = {}


def scheduler_ids(environ=None) -> dict:
    """The scheduler's ids for this process, those that are known; ``{}`` outside one.

    ``{"slurm": {"job_id", "step_id", "node_id", "proc_id", "local_id", "nodes"}, "ray": {"job_id",
    "worker_id"}}``. Slurm's come from its ``SLURM_*`` variables. Ray's come from Ray's
    runtime context when this process has already imported and initialised ``ray`` (it is
    never imported here), else the job id from ``RAY_JOB_ID`` (ignored when it is Ray's
    nil id, all ``f``, which pooled workers carry).
    """
    environ = os.environ if environ is None else environ
    out: dict = {}
    slurm: dict = {key: environ[var] for var, key in _SLURM_IDS if environ.get(var)}
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if slurm and nodelist:
        slurm["nodes"] = expand_hostlist(nodelist)
    if slurm:
        out["slurm"] = slurm
    ray_ids = dict(_ray_ids_seen)
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            if ray.is_initialized():
                context = ray.get_runtime_context()
                ray_ids["job_id"] = context.get_job_id()
                ray_ids["worker_id"] = context.get_worker_id()
                _ray_ids_seen.update(ray_ids)  # for the record written at exit, after Ray disconnected
        except Exception:  # a Ray shutting down: the ids are not essential
            pass
    # A pooled Ray worker may carry the nil job id (all f) in RAY_JOB_ID: not an id.
    job_id = environ.get("RAY_JOB_ID", "")
    if job_id and "job_id" not in ray_ids and job_id.strip("f"):
        ray_ids["job_id"] = job_id
    if ray_ids:
        out["ray"] = {k: str(v) for k, v in ray_ids.items() if v}
    return out


def expand_hostlist(text: str, limit: int = 4096) -> list:
    """Slurm's compressed host list as names: ``"n[1-3,07],gpu"`` -> n1 n2 n3 n07 gpu.

    One bracket group per name (what Slurm writes for these lists); zero padding kept; at
    most *limit* names. A part it cannot read is kept as written.
    """
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    out: list = []
    for item in (x.strip() for x in items):
        head, bracket, rest = item.partition("[")
        body, closed, tail = rest.partition("]")
        if not bracket or not closed:
            out.extend([item] if item else [])
            continue
        for part in body.split(","):
            lo, dash, hi = part.partition("-")
            if not (lo.isdigit() and (not dash or hi.isdigit())):
                out.append(item)
                break
            width = len(lo)
            for n in range(int(lo), int(hi if dash else lo) + 1):
                out.append(f"{head}{n:0{width}d}{tail}")
                if len(out) >= limit:
                    return out
    return out[:limit]


def record_path(job_dir: str, record: dict) -> str:
    host = _safe(str(record.get("host", "host")))[:64] or "host"
    return os.path.join(job_dir, DIRNAME, f"a{int(record.get('attempt', 0))}-{host}-{int(record['pid'])}.json")


def others_recorded(job_dir: str, pid: int) -> bool:
    """Whether a process other than *pid* wrote its record into *job_dir* (in any attempt, on
    any host: the names :func:`record_path` makes)."""
    own = f"-{int(pid)}.json"
    try:
        names = os.listdir(os.path.join(job_dir, DIRNAME))
    except OSError:
        return False
    return any(n.startswith("a") and n.endswith(".json") and not n.endswith(own) for n in names)


def new_record(**values: Any) -> dict:
    """A process's record: :data:`SCHEMA`, then *values* in the order of :data:`FIELDS`, whose
    other fields they name exactly (a field added here is added to every reader).

    >>> list(new_record(**{k: None for k in FIELDS if k != "schema"}))[:3]
    ['schema', 'job_id', 'role']
    """
    if len(values) != len(FIELDS) - 1 or not all(k in FIELDS and k != "schema" for k in values):
        raise ValueError(f"a provenance record has the fields {list(FIELDS)[1:]}, not {list(values)}")
    return {"schema": SCHEMA, **{k: values[k] for k in FIELDS if k != "schema"}}


def write_record(job_dir: str, record: dict, environ=None) -> str:
    """Write *record* atomically to its per-host/pid/attempt file; return the path.

    Also to the same name in :data:`SHARED_ENV`'s folder when that is set (best effort:
    the job's own copy is the one that must be written).
    """
    environ = os.environ if environ is None else environ
    data = (format_json(record, default=str) + "\n").encode("utf-8")
    path = record_path(job_dir, record)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_file(path, data)
    shared = environ.get(SHARED_ENV, "")
    if shared and os.path.isabs(shared) and os.path.isdir(shared):
        try:
            write_file(os.path.join(shared, os.path.basename(path)), data)
        except OSError as exc:
            sys.stderr.write(f"forge: cannot write the provenance record to {shared}: {exc}\n")
    return path


def patch_records() -> list:
    patching = sys.modules.get("starforge.cluster.patching")
    if patching is None or not hasattr(patching, "records"):
        return []
    try:
        return [r if isinstance(r, dict) else _as_dict(r) for r in patching.records()]
    except Exception as exc:  # provenance must still be written
        return [{"error": f"patching.records() raised {type(exc).__name__}: {exc}"}]


def _as_dict(record: Any) -> dict:
    if hasattr(record, "to_dict"):
        return record.to_dict()
    import dataclasses

    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        import json

        return json.loads(json.dumps(dataclasses.asdict(record), default=str))
    return {"record": str(record)}


def read_records(job_dir: str) -> list[dict]:
    """Every readable record of the job, oldest attempt first (unreadable files are skipped)."""
    from .jobspec import parse_json

    folder = os.path.join(job_dir, DIRNAME)
    out = []
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                rec = parse_json(f.read())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict):
            rec["file"] = name
            out.append(rec)
    out.sort(key=lambda r: (r.get("attempt", 0), r.get("role") != "launcher", r.get("started") or ""))
    return out


def summarize(job_dir: str) -> dict:
    """One view of all records of a job.

    ``{"processes", "attempts", "hosts", "launcher", "disabled_processes",
    "other_interpreters", "failures",
    "plugins": {ref: {...}}, "patches": [...], "per_host", "expected_hosts", "missing_hosts",
    "reported_via"}``; per plugin: its digest, source, load,
    and how many processes verified, loaded, registered, installed it later, skipped or
    shadowed it, left it pending (no target imported), left it alone (another interpreter
    than the job's Python) or failed on it; per patch (target, plugin, mode): the furthest
    ``status`` a process reached (failed, applied, undone, pending, in that order), the
    ``function`` of that record, how many ``processes`` recorded it and how many reached
    each status (``statuses``), and the other plugins' patches of its target it hides (a
    replace: ``hides``). ``forge jobs show`` prints these rows as they are, text and JSON.
    """
    records = read_records(job_dir)
    expected = expected_hosts(records)
    plugins: dict[str, dict] = {}
    patches: dict[tuple, dict] = {}
    failures = []
    launcher = None
    for rec in records:
        if rec.get("role") == "launcher" and (rec.get("mode") != "verify-only" or launcher is None):
            launcher = {k: rec.get(k) for k in ("host", "pid", "attempt", "started", "written", "failure", "environment", "replay_of")}
        if rec.get("failure"):
            failures.append({"host": rec.get("host"), "pid": rec.get("pid"), "attempt": rec.get("attempt"), **rec["failure"]})
        for p in rec.get("plugins", []):
            s = plugins.setdefault(
                p.get("ref"),
                {
                    "name": p.get("name"),
                    "digest": p.get("digest"),
                    "source": p.get("source"),
                    "kind": p.get("kind"),
                    "load": p.get("load"),
                    "verified": 0,
                    "loaded": 0,
                    "registered": 0,
                    "installed_later": 0,
                    "skipped": 0,
                    "shadowed": 0,
                    "pending": 0,
                    "left-alone": 0,
                    "disabled": 0,
                    "failed": 0,
                },
            )
            s["verified"] += bool(p.get("verified"))
            status = p.get("status")
            if status in s and status != "verified":
                s[status] += 1
            s["installed_later"] += bool(p.get("installed_later"))
        for patch in rec.get("patches", []):
            if isinstance(patch, dict):
                _merge_patch(patches, patch)
    return {
        "per_host": per_host(records),
        "expected_hosts": expected,
        "missing_hosts": [h for h in expected if h not in {str(r.get("host")) for r in records}],
        "reported_via": sorted({str(r["reported_via"]) for r in records if r.get("reported_via")}),
        "processes": len(records),
        "attempts": sorted({r.get("attempt", 0) for r in records}),
        "hosts": sorted({str(r.get("host")) for r in records}),
        "launcher": launcher,
        "disabled_processes": sum(1 for r in records if r.get("disabled")),
        "other_interpreters": sorted({str(r.get("executable")) for r in records if r.get("mode") == "other-interpreter"}),
        "failures": failures,
        "plugins": plugins,
        "patches": list(patches.values()),
    }


def _merge_patch(patches: dict, patch: dict) -> None:
    """Fold one process's record of a patch into the job's row of that patch."""
    key = tuple(str(patch.get(k)) for k in _PATCH_KEY)
    status = patch.get("status")
    entry = patches.get(key)
    if entry is None:
        entry = patches[key] = {**{k: patch.get(k) for k in _PATCH_KEY}, "function": patch.get("function"),
                                "status": status, "statuses": {}, "hides": [], "processes": 0}  # fmt: skip
    elif _PATCH_STATUS_RANK.get(str(status), 9) < _PATCH_STATUS_RANK.get(str(entry["status"]), 9):
        entry["status"], entry["function"] = status, patch.get("function")
    entry["processes"] += 1
    entry["statuses"][str(status)] = entry["statuses"].get(str(status), 0) + 1
    entry["hides"] = entry["hides"] or list(patch.get("hides") or [])


def per_host(records: list) -> dict:
    """``{host: {processes, roles: {role: n}, attempts, patched, failures}}`` over *records*:
    ``patched`` counts the processes with at least one applied patch."""
    out: dict = {}
    for rec in records:
        h = out.setdefault(str(rec.get("host")), {"processes": 0, "roles": {}, "attempts": [], "patched": 0, "failures": 0})
        h["processes"] += 1
        role = str(rec.get("role"))
        h["roles"][role] = h["roles"].get(role, 0) + 1
        if rec.get("attempt", 0) not in h["attempts"]:
            h["attempts"] = sorted(h["attempts"] + [rec.get("attempt", 0)])
        h["patched"] += any(isinstance(p, dict) and p.get("status") == "applied" for p in rec.get("patches") or ())
        h["failures"] += bool(rec.get("failure"))
    return out


def expected_hosts(records: list) -> list:
    """The hosts a launcher of the job said the job had (its scheduler's node list), in order."""
    out: list = []
    for rec in records:
        if rec.get("role") != "launcher":
            continue
        nodes = (rec.get("scheduler") or {}).get("slurm", {}).get("nodes") if isinstance(rec.get("scheduler"), dict) else None
        for node in nodes if isinstance(nodes, list) else ():
            if isinstance(node, str) and node not in out:
                out.append(node)
    return out
