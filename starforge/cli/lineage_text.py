"""How ``forge trace`` and ``forge audit`` print their answers (text and JSON rows).

Everything a job or a sidecar wrote is shown through :func:`~starforge.terminal_text.shown`
(control characters spelled out) and cut to :data:`TEXT_CAP` characters: a sidecar is
anybody's text who can write its directory.
"""

from __future__ import annotations

from ..experiment.trace import TEXT_CAP
from ..terminal_text import shown
from .output import note, plural


def safe(value: object) -> str:
    """*value* as one bounded line, control characters spelled out."""
    text = shown(value)
    return text if len(text) <= TEXT_CAP else text[:TEXT_CAP] + "…"


def plugin_rows(plugins: list, yanked: dict) -> list:
    rows = []
    for p in plugins:
        y = yanked.get(p.get("digest"))
        row = {"ref": safe(p.get("ref")), "digest": safe(p.get("digest")), "yanked": y is not None,
               "reason": y.reason if y else None, "as_of": y.as_of if y else None}
        at_submit = p.get("yank")
        if isinstance(at_submit, dict):
            row["yanked_at_submit"] = bool(at_submit.get("yanked"))
        rows.append(row)
    return rows


def traced_json(found, yanked: dict, notes: list) -> dict:
    jobs = []
    for t in found.jobs:
        facts = t.facts()
        jobs.append({
            "job_id": t.job_id, "source": t.source, "record": t.job is not None,
            "store": str(t.job.store) if t.job is not None else None,
            "matched": t.matched, "shared": t.shared, "probable": t.probable,
            "disagreements": t.disagreements, "plugins": plugin_rows(facts["plugins"], yanked),
            "params": {safe(k): v if isinstance(v, (int, float, bool)) or v is None else safe(v)
                       for k, v in list(facts["params"].items())[:500]},
            "backend": safe(facts["backend"]) if facts["backend"] else None, "hosts": [safe(h) for h in facts["hosts"]],
            "status": facts["status"], "removed": facts["removed"],
        })
    return {"path": found.path, "files": found.files, "sidecar": found.sidecar, "jobs": jobs,
            "notes": list(found.notes) + notes}


def traced_lines(found, yanked: dict, notes: list) -> list:
    """The text answer of ``forge trace``."""
    for line in list(found.notes) + notes:
        note(line)
    doc = traced_json(found, yanked, [])
    lines = []
    for job in doc["jobs"]:
        if job["source"] == "sidecar":
            how = f"by the sidecar {shown(found.sidecar)} (a claim written by the job)"
            how += (", confirmed by its job record" if job["record"] and not job["disagreements"]
                    else ", which DISAGREES with its job record" if job["disagreements"]
                    else "; no job record of it is readable here")
        else:
            n = doc["files"]
            if job["matched"]:
                how = f"by content: {job['matched']} of {plural(n, 'file')} matched its outputs manifest"
                if job["shared"]:
                    how += f" ({job['shared']} more written alike by other jobs, not deciding)"
            else:
                how = (f"by content: {job['shared']} of {plural(n, 'file')} matched its outputs manifest, "
                       "each written alike by other jobs too (no file decides between them)")
            how += " (probable: a sampled digest)" if job["probable"] else ""
        lines.append(f"{shown(found.path)}: written by job {job['job_id']}, {how}")
        for d in job["disagreements"]:
            lines.append(f"  mismatch: {safe(d)}")
        for p in job["plugins"]:
            state = f"YANKED now (as of {p['as_of']}): {safe(p['reason'])}" if p["yanked"] else "not yanked"
            lines.append(f"  plugin  : {p['ref']} {p['digest']}  {state}")
        params = ", ".join(f"{k}={v}" for k, v in sorted(job["params"].items()))
        lines.append(f"  params  : {safe(params) if params else '(none)'}")
        where = job["backend"] or "unknown"
        lines.append(f"  backend : {where}" + (f" on {', '.join(job['hosts'])}" if job["hosts"] else "")
                     + (" (job removed; its tombstone kept this)" if job["removed"] else ""))
    return lines


def audit_lines(result) -> list:
    """The text answer of ``forge audit``."""
    from ..jobs.outputs import human_size

    for line in result.notes:
        note(safe(line))
    if not result.found:
        return [f"no job of the {plural(result.jobs_read, 'job')} read ran a version yanked now"]
    lines = []
    for group in result.to_json()["versions"]:
        lines.append(f"{group['ref']} {group['digest']}: yanked (as of {group['as_of']}): {safe(group['reason'])}")
        for job in group["jobs"]:
            gone = " (removed)" if job["removed"] else ""
            lines.append(f"  job {job['id']}{gone}  {job['status']}  {job['backend']}  {job['created']}")
            for d in job["outputs"]:
                if d["missing"] or d["unresolved"] or not d["path"]:
                    continue
                side = "  sidecar" if d["sidecar"] is True else ""
                lines.append(f"    {safe(d['path'])}  {plural(d['files'], 'file')}, {human_size(d['bytes'])}{side}")
    return lines
