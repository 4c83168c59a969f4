"""``forge submit [DIR] [--set KEY=VALUE]... [--backend NAME] [--dry-run] [--detach]``."""

from __future__ import annotations

import json
import sys

import click

from .choices import BackendChoice
from .completion import complete_set_keys
from .output import JobOutput, note
from .registry_options import job_registry_options


@click.command("submit")
@click.argument("directory", default=".", type=click.Path(file_okay=False))
@click.option("-f", "--values", "values_files", multiple=True, metavar="FILE",
              help="YAML of config keys laid over forge.yaml's config: (repeatable; --set comes after).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", shell_complete=complete_set_keys, help="Override a hyperparameter (+KEY=VALUE adds a new key).")
@click.option("--backend", type=BackendChoice(), help="Where to run (default: forge.yaml's backend).")
@click.option("--dry-run", is_flag=True, help="Print the JobSpec JSON; stage and run nothing.")
@click.option("--detach", is_flag=True, help="Return once the job has started instead of waiting for it.")
@job_registry_options()
@click.option("--dev", "dev", multiple=True, metavar="NAME=DIR",
              help="Run the unpublished plugin directory DIR in place of the locked plugin NAME (repeatable).")
@click.option("--allow-yanked", is_flag=True, help="Run locked versions that are yanked, this once (the job record says so).")
@click.option("--json", "as_json", is_flag=True, help="Print the job record as JSON on stdout (the job's output goes to stderr).")
def submit(directory, values_files, sets, backend, dry_run, detach, registry, insecure, ca_file, require_signatures, dev,
           allow_yanked, as_json) -> None:
    """Stage the locked experiment as a job and run it.

    The lock must match forge.yaml (run 'forge lock' first); it is never re-resolved
    here. Plugins of an owner with trusted keys (forge trust add) must carry a valid
    signature; --require-signatures demands one of every owner. Without --detach this
    waits, streams the job's output, and exits with the job's exit code; Ctrl-C cancels
    the job. -f/--values FILE lays a YAML file of config keys over forge.yaml's config:
    (helm's values file); --set comes after it (--set a=1,b=2 sets two). With --json the record (id, dir, status, exit_code, and exit_source: "job"
    for the trainer's own code, "forge" for the launcher's or the backend's) is printed
    once the job has ended (started, with --detach). --dev NAME=DIR runs a plugin's
    working directory in place of its locked version (the inner loop of a plugin author:
    no bump, publish or relock); it is checked, digested and verified like any other,
    shown everywhere as OWNER/NAME@VERSION+dev.DIGEST, and never signed. A locked version
    its publisher yanked is refused (exit 18) unless forge.yaml acknowledges it
    (allow_yanked: true) or --allow-yanked runs it this once; the job record lists it.

    \b
    Example:
      forge submit examples/quickstart --set opsd.scale=0.5
      forge submit --dry-run --set grpo.group_size=16 | jq .hyperparams
      forge submit -f sweep/lr-high.yaml --set grpo.seed=1,grpo.steps=80
      forge submit --detach && forge jobs list
    """
    from ..experiment.submit import submit_experiment
    from ..experiment.values import values_overrides

    dev_dirs: dict = {}
    if dev:  # its module only when --dev is given
        from ..experiment.dev_plugins import parse_dev_options

        dev_dirs = parse_dev_options(dev)
    sub = submit_experiment(
        directory,
        [ov for path in values_files for ov in values_overrides(path)] + list(sets),
        backend=backend,
        registry=registry,
        insecure=insecure, ca_file=ca_file,
        detach=detach,
        dry_run=dry_run,
        require_signatures=require_signatures,
        dev=dev_dirs,
        allow_yanked=allow_yanked,
    )
    for d in sub.resolved.dev:
        note(f"note: dev plugin {d.entry.ref} from {d.root} runs in place of the locked {d.replaces} (unpublished, unsigned)")
    if dry_run:
        click.echo(sub.spec.to_json(), nl=False)
        return
    record = sub.record
    assert record is not None and sub.backend is not None  # not a dry run
    for text in sub.notes:
        note(text)
    follow(sub.backend, record, detach=detach, as_json=as_json)


def follow(runner, record, *, detach: bool, as_json: bool) -> None:
    """Say where the job is; unless *detach*, stream its output, wait, and exit with its code."""
    from ..backends.base import wait

    if as_json:
        click.echo(f"job {record.id} in {record.dir}", err=True)
    else:
        click.echo(f"job     : {record.id}")
        click.echo(f"dir     : {record.dir}")
    sys.stdout.flush()
    if detach:
        if as_json:
            click.echo(json.dumps(job_result(record), indent=2, sort_keys=True))
            return
        click.echo(f"backend : {record.backend} ({record.status}); follow with: forge jobs logs {record.id} -f")
        return
    out = JobOutput(sys.stderr if as_json else None)
    try:
        record = wait(runner, record, out.write)
    except KeyboardInterrupt:
        out.flush()
        record = runner.refresh(record)
        click.echo(f"\njob {record.id} cancelled", err=True)
        if as_json:
            click.echo(json.dumps(job_result(record), indent=2, sort_keys=True))
        raise click.exceptions.Exit(130)
    out.flush()
    code = record.exit_code if record.exit_code is not None else 1
    detail = f" ({record.message})" if record.message and record.status != "succeeded" else ""
    click.echo(f"job {record.id} {record.status}, exit code {record.exit_code}{detail}", err=True)
    if as_json:
        click.echo(json.dumps(job_result(record), indent=2, sort_keys=True))
    raise click.exceptions.Exit(code)


# launcher phases whose exit code is the launcher's own (docs/launcher.md); "entrypoint" is the trainer's
LAUNCHER_PHASES = ("spec", "verify", "requires", "import", "install")


def job_result(record) -> dict:
    """The job record plus ``phase`` (from the job's status.json, when readable) and
    ``exit_source``: None while running or after exit 0, ``"job"`` when the code is the
    training entrypoint's own, ``"forge"`` when the launcher or the backend set it."""
    from ..experiment.jobinfo import launch_status

    status = launch_status(record) or {}
    phase = status.get("phase")
    source = None
    if record.exit_code not in (None, 0):
        source = "job" if phase == "entrypoint" and status.get("code") == record.exit_code else "forge"
    elif record.final and record.exit_code is None:
        source = "forge"
    return {**record.shown(), "phase": phase, "exit_source": source}

