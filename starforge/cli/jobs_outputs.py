"""``forge jobs outputs ID [--hash] [--json]``: the files a job wrote, from its outputs manifests."""

from __future__ import annotations

import json

import click

from .completion import complete_job_ids


@click.command("outputs")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option("--hash", "with_hash", is_flag=True,
              help="Also give each file's digest, made here and cached by size and modification time.")
@click.option("--json", "as_json", is_flag=True, help="Print the job's output directories and files as JSON.")
def outputs(job_id: str, with_hash: bool, as_json: bool) -> None:
    """List the files job ID wrote: work/ and its declared outputs.

    Each attempt's end recorded every file's path, size and modification time, on every
    host; the files are not read then. --hash reads them here (sha256, or a sampled
    digest above the job's sample_above, marked probable) and keeps the digests, so trace
    and audit do not read them again. A file changed or gone since it was listed is said.

    \b
    Example:
      forge jobs outputs JOB_ID --hash
    """
    from ..experiment.lineage import find_job, output_rows, read_jobs
    from ..experiment.output_digest import DigestCache
    from ..jobs.outputs import human_size
    from ..terminal_text import shown
    from .output import note, plural

    job = find_job(read_jobs(), job_id)
    cache = DigestCache.open() if with_hash else None
    rows = output_rows(job, with_hash=with_hash, cache=cache)
    if cache is not None:
        cache.save()
    dirs = job.output_dirs()
    if as_json:
        click.echo(json.dumps({"id": job.record.id, "removed": job.removed, "hosts": job.hosts, "dirs": dirs,
                               "files": rows, "problems": list(job.problems)}, indent=2, sort_keys=True))
        return
    for problem in job.problems:
        note(f"warning: {shown(problem)}")
    if not job.manifests:
        click.echo(f"job {job.record.id}: no outputs manifest (no attempt of it has ended, or it ran before forge kept them)")
        return
    total = sum(r["size"] for r in rows)
    click.echo(f"job {job.record.id}: {plural(len(rows), 'file')}, {human_size(total)}"
               f" (hosts: {', '.join(shown(h) for h in job.hosts)})")
    for d in dirs:
        said = "unresolved on the node" if d["unresolved"] else "missing" if d["missing"] else plural(d["files"], "file")
        side = "; sidecar written" if d["sidecar"] is True else (f"; sidecar {shown(d['sidecar'])}" if d["sidecar"] else "")
        click.echo(f"  {shown(d['path'] or d['declared'])}  ({shown(d['declared'])}: {said}{side})")
    for r in rows:
        state = "" if r["state"] == "listed" else f"  [{r['state']} since it was listed]"
        digest = (r["digest"] + (" (probable)" if r["probable"] else "")) if r["digest"] else ""
        click.echo(f"    {r['size']:>12}  {digest + '  ' if digest else ''}{shown(r['path'])}{state}")
