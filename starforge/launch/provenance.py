"""Provenance: what each process of a job verified, loaded, registered and patched.

The job directory holds ``provenance/``, one JSON record per host, pid and attempt, named
``a<attempt>-<host>-<pid>.json`` and written atomically (the launcher at the end of its
launch and again when the entrypoint returns, other processes at exit).
:func:`summarize` folds them into one view for ``forge jobs show``.

Cluster side: standard library only.
"""

from __future__ import annotations

import os

# Writing a record is the runtime's (every process of a job writes one; one module fewer to
# import there); these names stay importable from here.
from .runtime import PROVENANCE_DIR as DIRNAME
from .runtime import _safe, record_path, scheduler_ids, write_record  # noqa: F401
_PATCH_KEY = ("target", "plugin", "mode", "function", "status")
def read_records(job_dir: str) -> list[dict]:
    """Every readable record of the job, oldest attempt first (unreadable files are skipped)."""
    from ..jobspec import parse_json

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

    ``{"processes", "attempts", "hosts", "launcher", "disabled_processes", "failures",
    "plugins": {ref: {...}}, "patches": [...]}``; per plugin: its digest, source, load,
    and how many processes verified, loaded, registered, installed it later, skipped or
    shadowed it, left it pending (no target imported) or failed on it.
    """
    records = read_records(job_dir)
    plugins: dict[str, dict] = {}
    patches: dict[tuple, dict] = {}
    failures = []
    launcher = None
    for rec in records:
        if rec.get("role") == "launcher" and (rec.get("mode") != "verify-only" or launcher is None):
            launcher = {k: rec.get(k) for k in ("host", "pid", "attempt", "started", "written", "failure")}
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
            if not isinstance(patch, dict):
                continue
            key = tuple(str(patch.get(k)) for k in _PATCH_KEY)
            entry = patches.setdefault(key, {**{k: patch.get(k) for k in _PATCH_KEY}, "processes": 0})
            entry["processes"] += 1
    return {
        "processes": len(records),
        "attempts": sorted({r.get("attempt", 0) for r in records}),
        "hosts": sorted({str(r.get("host")) for r in records}),
        "launcher": launcher,
        "disabled_processes": sum(1 for r in records if r.get("disabled")),
        "failures": failures,
        "plugins": plugins,
        "patches": list(patches.values()),
    }
