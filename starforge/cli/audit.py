"""``forge audit [--json] [--store DIR …]``: the jobs that ran a version yanked now, and what they wrote."""

from __future__ import annotations

import json

import click


@click.command("audit")
@click.option("--store", "stores", metavar="DIR", multiple=True,
              help="Also audit the job records of this jobs store (a team's shared one); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the audit as JSON.")
def audit(stores: tuple, as_json: bool) -> None:
    """List every job that ran a version yanked now, with the outputs it wrote.

    Grouped by yanked version with its reason; each job with its output directories
    (from its outputs manifests) and the sidecars it wrote. Reads your jobs store, the
    tombstones of removed jobs, and every --store named. Exit 22 when there is any such
    job (a CI or cron gate), 0 when there is none.

    \b
    Example:
      forge audit --store /shared/team/jobs || echo "checkpoints trained with a yanked version"
    """
    from ..experiment.audit import FOUND
    from ..experiment.audit import audit as run_audit
    from ..experiment.lineage import read_jobs
    from .lineage_text import audit_lines

    result = run_audit(read_jobs(stores))
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        for line in audit_lines(result):
            click.echo(line)
    if result.found:
        raise click.exceptions.Exit(FOUND)
