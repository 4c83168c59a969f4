"""Which hosts of a multi-node job removed their node-local copy, attempt by attempt.

A Slurm job's collect step (at the end of an attempt, or when the attempt is signalled)
removes each host's node-local copy and leaves ``slurm/cleanup/a<attempt>-<host>.done`` in
the shared job directory; a host that died (or was killed with everything on it) runs no
such step and leaves nothing. A requeued attempt's prepare removes what an earlier attempt
left on its host and leaves ``a<attempt>-<host>.swept``. :func:`node_cleanup` compares that
with the hosts that prepared a copy in each attempt (their ``verify-only`` provenance
records), for ``forge jobs show``.

Laptop side.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..cluster.jobdir_layout import SLURM_CLEANUP_DIR, SLURM_DIR

CLEANUP_DIR = SLURM_CLEANUP_DIR  # inside the job's slurm/ folder
_MARK = re.compile(r"a([0-9]{1,6})-([A-Za-z0-9._-]{1,255})\.(done|swept)")


def node_cleanup(job_dir: Path, records: list, final: bool) -> dict | None:
    """``{"attempts": [{attempt, prepared, removed, not_removed, removed_later_by}]}`` for the
    job at *job_dir* (None when it keeps no cleanup marks: not a multi-node Slurm job of this
    release). *records* are its provenance records; the last attempt of a job that is not
    *final* is left out (its hosts have not cleaned up yet). ``removed_later_by`` maps a host
    that did not remove its copy to the later attempt whose prepare on that host did."""
    folder = Path(job_dir) / SLURM_DIR / CLEANUP_DIR
    try:
        names = [p.name for p in folder.iterdir()]
    except OSError:
        return None
    done: set = set()
    swept: dict = {}
    for name in names:
        m = _MARK.fullmatch(name)
        if m is None:
            continue
        attempt, host, kind = int(m.group(1)), m.group(2), m.group(3)
        if kind == "done":
            done.add((attempt, host))
        else:
            swept.setdefault(host, []).append(attempt)
    prepared: dict = {}
    for rec in records:
        if rec.get("role") == "launcher" and rec.get("mode") == "verify-only" and isinstance(rec.get("attempt", 0), int):
            hosts = prepared.setdefault(rec.get("attempt", 0), [])
            if str(rec.get("host")) not in hosts:
                hosts.append(str(rec.get("host")))
    attempts = sorted(prepared)
    if not final and attempts:
        attempts = attempts[:-1]
    out = []
    for attempt in attempts:
        hosts = sorted(prepared[attempt])
        missing = [h for h in hosts if (attempt, h) not in done]
        later = {h: min(a for a in swept.get(h, []) if a > attempt) for h in missing
                 if any(a > attempt for a in swept.get(h, []))}
        out.append({"attempt": attempt, "prepared": hosts, "removed": [h for h in hosts if h not in missing],
                    "not_removed": missing, "removed_later_by": later})
    return {"attempts": out}


def cleanup_lines(report: dict | None) -> list:
    """``forge jobs show``'s lines for *report* (:func:`node_cleanup`): one per attempt."""
    lines = []
    for a in (report or {}).get("attempts", []):
        parts = []
        if a["removed"]:
            parts.append(f"node-local copy removed on {', '.join(a['removed'])}")
        for host in a["not_removed"]:
            text = f"{host} did not remove its node-local copy (the host died or was killed before its cleanup ran)"
            later = a["removed_later_by"].get(host)
            parts.append(text + (f"; attempt {later}'s prepare on {host} removed it" if later is not None
                                 else f"; it may still be on {host}"))
        lines.append(f"  cleanup : attempt {a['attempt']}: " + "; ".join(parts))
    return lines
