"""``forge trace PATH [--store DIR …] [--json]``: which job wrote this file or directory."""

from __future__ import annotations

import json

import click


@click.command("trace")
@click.argument("path", type=click.Path(exists=False))
@click.option("--store", "stores", metavar="DIR", multiple=True,
              help="Also read the job records of this jobs store (a team's shared one); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
def trace(path: str, stores: tuple, as_json: bool) -> None:
    """Name the job(s) that wrote PATH, a file or a directory copied anywhere.

    First by a .forge-provenance.json sidecar in or above PATH (a claim the job wrote,
    cross-checked against the job records readable here), else by content against the
    outputs manifests of those jobs. A directory is matched file by file (k of n files);
    files several jobs wrote alike do not decide. For each job: its plugins with whether
    each is yanked now and why, its parameters, backend and hosts. Exit 7 when no job
    wrote PATH.

    \b
    Example:
      forge trace /lustre/ckpt/run-42/checkpoint-500
      forge trace ./copied-model --store /shared/team/jobs
    """
    from ..experiment.lineage import read_jobs, yanks_now
    from ..experiment.output_digest import DigestCache
    from ..experiment.trace import trace as trace_path
    from .lineage_text import traced_json, traced_lines

    world = read_jobs(stores)
    found = trace_path(path, world, DigestCache.open())
    pins = {(p.get("ref"), p.get("digest")) for t in found.jobs for p in t.facts()["plugins"]
            if isinstance(p.get("ref"), str) and isinstance(p.get("digest"), str)}
    yanked, notes = yanks_now(sorted(pins)) if pins else ({}, [])
    if as_json:
        click.echo(json.dumps(traced_json(found, yanked, list(notes)), indent=2, sort_keys=True))
        return
    for line in traced_lines(found, yanked, list(notes)):
        click.echo(line)
