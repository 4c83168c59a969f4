"""What ``forge jobs show`` reports: the job record, the launcher's ``status.json`` and the
summary of the job's provenance records.

The summary is :func:`starforge.cluster.provenance.summarize` over ``<job dir>/provenance/``
(one JSON record per host, pid and attempt, written by the launcher and every process
that carries the plugins). A job directory that is not reachable from here (a remote
backend's) simply has no provenance section. On a backend with no shared file system the
records come from the job's log (``from_log``: what was read there, what was refused).

Laptop side.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..cluster.jobdir_layout import PROVENANCE_DIR, STATUS_FILE


def job_details(record) -> dict:
    """The record as a dict plus ``launch_status`` and ``provenance`` (None when absent)."""
    if record.plugins is None:  # a record from before records kept pins: from its jobspec.json
        from ..jobs.jobindex import backfill
        from ..jobs.store import JobStore

        record = backfill(JobStore(), record)
    out = record.shown()
    job_dir = Path(record.dir)
    out["launch_status"] = _read_json(job_dir / STATUS_FILE)
    out["outputs"] = outputs_of(record)
    out["provenance"] = None
    if (job_dir / PROVENANCE_DIR).is_dir():
        from ..cluster.provenance import summarize
        from ..jobs.log_provenance import read_summary

        out["provenance"] = summarize(str(job_dir))
        out["provenance"]["from_log"] = read_summary(job_dir)
    from ..backends.base import ran_on

    if ran_on(record.backend).node_local_copies:
        from ..cluster.provenance import read_records
        from ..jobs.node_cleanup import node_cleanup

        out["node_cleanup"] = node_cleanup(job_dir, read_records(str(job_dir)), record.final)
    return out


def launch_status(record) -> dict | None:
    """The job's ``status.json`` (launcher phase and code), or None when absent or unreadable."""
    return _read_json(Path(record.dir) / STATUS_FILE)


def _read_json(path: Path):
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def outputs_of(record) -> dict | None:
    """Where the job's relative writes land (its working directory), and what is there now.

    Where the backend says they land elsewhere (on Ray each node works in its own copy of
    the job package, which Ray deletes), that is said and nothing here is counted.
    """
    from ..backends.base import ran_on
    from ..jobs.outputs import human_size, job_outputs

    found = job_outputs(record.dir)
    if found is None:
        return None
    elsewhere = ran_on(record.backend).outputs_elsewhere
    if elsewhere is not None:
        return {"dir": None, "files": None, "bytes": None, "where": elsewhere}
    unread = f", {found.unreadable} entr{'y' if found.unreadable == 1 else 'ies'} not readable" if found.unreadable else ""
    return {"dir": str(found.dir), "files": found.files, "bytes": found.bytes, "unreadable": found.unreadable,
            "where": f"{found.dir} ({found.files} file{'' if found.files == 1 else 's'}, {human_size(found.bytes)} written{unread})"}
