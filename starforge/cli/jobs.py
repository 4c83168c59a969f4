"""``forge jobs list | show ID | logs ID [-f] | cancel ID``: the jobs store, through each job's backend."""

from __future__ import annotations

import json
import sys

import click


def _backend_for(record):
    from ..backends.base import get_backend

    return get_backend(record.backend, {})


def _refreshed(record):
    """The record as its backend sees it now (a backend that cannot answer leaves it as stored)."""
    from ..errors import ForgeError

    if record.final:
        return record
    try:
        return _backend_for(record).refresh(record)
    except ForgeError:
        return record


def _get(job_id: str):
    from ..backends.store import JobStore

    return _refreshed(JobStore().get(job_id))


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the records as a JSON list.")
@click.option("--all", "show_all", is_flag=True, help="Show every job (default: the 20 most recent).")
def list_jobs(as_json: bool, show_all: bool) -> None:
    """List submitted jobs, newest last, with status and exit code.

    \b
    Example:
      forge jobs list
      forge jobs list --json | jq -r '.[] | select(.status=="failed") | .id'
    """
    from ..backends.store import JobStore

    records = [_refreshed(r) for r in JobStore().list()]
    if not show_all and not as_json:
        records = records[-20:]
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in records], indent=2, sort_keys=True))
        return
    if not records:
        click.echo("no jobs yet (submit one with: forge submit)")
        return
    rows = [("ID", "STATUS", "EXIT", "BACKEND", "CREATED", "DIR")]
    for r in records:
        rows.append((r.id, r.status, "-" if r.exit_code is None else str(r.exit_code), r.backend, r.created, r.dir))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])


@click.command("show")
@click.argument("job_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the record, launcher status and provenance summary as JSON.")
def show(job_id: str, as_json: bool) -> None:
    """Show one job: status, exit code, directory, and what its plugins did (provenance).

    ID may be any unique prefix of a job id (a bare job name is one only while a single
    job of that name exists); 'forge jobs list' shows the ids.

    \b
    Example:
      forge jobs show quickstart-20261129-120000-3fa2
      forge jobs show quickstart-20261129-120000 --json | jq .provenance.plugins
    """
    from ..experiment.jobinfo import job_details

    record = _get(job_id)
    details = job_details(record)
    if as_json:
        click.echo(json.dumps(details, indent=2, sort_keys=True, default=str))
        return
    for line in render_details(details):
        click.echo(line)


def render_details(d: dict) -> list:
    exit_text = "" if d["exit_code"] is None else f" (exit {d['exit_code']})"
    lines = [
        f"id       : {d['id']}",
        f"name     : {d['name']}",
        f"status   : {d['status']}{exit_text}",
        f"backend  : {d['backend']}",
        f"dir      : {d['dir']}",
        f"created  : {d['created']}",
    ]
    if d.get("finished"):
        lines.append(f"finished : {d['finished']}")
    if d.get("message"):
        lines.append(f"message  : {d['message']}")
    st = d.get("launch_status")
    if st:
        where = f" (plugin {st['plugin']})" if st.get("plugin") else ""
        lines.append(f"phase    : {st.get('phase')}{where}" + (f": {st['message']}" if st.get("message") else ""))
    prov = d.get("provenance")
    if not prov:
        lines.append("provenance: none recorded yet")
        return lines
    lines.append(
        f"provenance: {prov.get('processes', 0)} process record(s) on {', '.join(prov.get('hosts', [])) or '-'}, "
        f"attempts {', '.join(str(a) for a in prov.get('attempts', [])) or '-'}"
    )
    for ref, p in sorted((prov.get("plugins") or {}).items()):
        counts = ", ".join(
            f"{k.replace('_', ' ')} {p[k]}"
            for k in ("verified", "loaded", "registered", "installed_later", "skipped", "shadowed", "pending", "left-alone", "disabled", "failed")
            if p.get(k)
        )
        lines.append(f"  plugin  : {ref} ({p.get('source') or '-'}, {p.get('load') or '-'}) {counts or 'no activity'}  {p.get('digest') or ''}".rstrip())
    for patch in prov.get("patches") or []:
        target = patch.get("target") if isinstance(patch, dict) else patch
        by = patch.get("plugin") if isinstance(patch, dict) else None
        lines.append(f"  patch   : {target}" + (f" by {by}" if by else ""))
    for f in prov.get("failures") or []:
        lines.append(f"  failure : {f.get('phase', '?')} {f.get('plugin') or ''} {f.get('message') or ''}".rstrip())
    return lines


@click.command("logs")
@click.argument("job_id", metavar="ID")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new output until the job ends.")
def logs(job_id: str, follow: bool) -> None:
    """Print a job's output (the launcher's plugin lines and the trainer's output).

    \b
    Example:
      forge jobs logs quickstart-20261129-120000-3fa2 -f
    """
    record = _get(job_id)
    try:
        for chunk in _backend_for(record).logs(record, follow=follow):
            sys.stdout.write(chunk)
            sys.stdout.flush()
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130)


@click.command("cancel")
@click.argument("job_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the resulting record as JSON.")
def cancel(job_id: str, as_json: bool) -> None:
    """Cancel a running job (local: SIGTERM to its process group, SIGKILL after a grace period).

    \b
    Example:
      forge jobs cancel quickstart-20261129-120000-3fa2
    """
    record = _get(job_id)
    was_final = record.final
    record = _backend_for(record).cancel(record)
    if as_json:
        click.echo(json.dumps(record.to_dict(), indent=2, sort_keys=True))
    elif was_final:
        click.echo(f"job {record.id} already ended: {record.status}")
    else:
        click.echo(f"job {record.id} {record.status}")
