"""``forge jobs list | show ID | status ID | logs ID [-f] | cancel ID | rm ID… | prune``: the jobs store,
through each job's backend."""

from __future__ import annotations

import json

import click

from ..cluster.jobdir_layout import SPEC_FILE
from .choices import BackendChoice
from .completion import complete_job_ids
from .output import JobOutput, note, plural
from .registry_options import job_registry_options, registry_options


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
    from ..jobs.store import JobStore

    return _refreshed(JobStore().get(job_id))


def _get_with_dir(job_id: str):
    """The record of *job_id*, refusing one whose job directory was deleted outside forge
    (its log, status and provenance lived there: printing nothing would look like a job
    that said nothing)."""
    from pathlib import Path

    from ..errors import NotFoundError

    record = _get(job_id)
    if not Path(record.dir).is_dir():
        raise NotFoundError(
            f"job {record.id}: its directory {record.dir} is gone (deleted outside forge)",
            hint=f"drop the record with: forge jobs rm {record.id} (or forge jobs prune --gone for every such job)",
        )
    return record


DEFAULT_LIMIT = 20


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the records as a JSON list.")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help=f"Show the N most recent jobs [default: {DEFAULT_LIMIT}; every match with a filter].")
@click.option("--all", "show_all", is_flag=True, help="Show every job.")
@click.option("--plugin", "plugin", metavar="REF|sf1:DIGEST",
              help="Only jobs that ran this plugin version (owner/name@version), any version of owner/name, or a tree digest.")
@click.option("--yanked", is_flag=True, help="Only jobs that ran a plugin version yanked now.")
@click.option("--param", "params", metavar="KEY=VALUE", multiple=True,
              help="Only jobs whose parameter KEY had VALUE (compared as typed); repeatable.")
@registry_options("With --yanked: the registry whose yanks count (default: FORGE_REGISTRY, config).")
def list_jobs(as_json: bool, limit: int | None, show_all: bool, plugin: str | None, yanked: bool, params: tuple,
              registry: str | None, insecure: bool, ca_file: str | None) -> None:
    """List submitted jobs, newest last, with status and exit code.

    Text and --json show the same jobs: the --limit most recent (20 unless told), or
    every one with --all; how many were left out is said on stderr. With --plugin,
    --yanked or --param, the jobs that ran it, removed jobs (their tombstones) included,
    and every match unless --limit is given; jobs whose pins are not known (recorded
    before job records kept them, their job files gone) are listed apart, never dropped.

    \b
    Example:
      forge jobs list
      forge jobs list --all --json | jq -r '.[] | select(.status=="failed") | .id'
      forge jobs list --plugin starforge/opsd-patch@1.2.0
      forge jobs list --param opsd.scale=0.5 --json
    """
    if plugin or yanked or params:
        _list_filtered(as_json, limit, plugin, yanked, params, dict(registry=registry, insecure=insecure, ca_file=ca_file))
        return
    from ..jobs.store import JobStore

    limit = limit or DEFAULT_LIMIT
    everything, unreadable = JobStore().scan()
    sweep_staging_leftovers(everything)
    listed = everything if show_all else everything[-limit:]
    records = [_refreshed(r) for r in listed]
    omitted = len(everything) - len(records)
    if as_json:
        click.echo(json.dumps([r.shown() for r in records] + [unreadable_row(u) for u in unreadable], indent=2,
                              sort_keys=True))
    elif not records and not unreadable:
        note("no jobs yet (submit one with: forge submit)")
    else:
        _print_records(records, unreadable=unreadable)
    if omitted:
        note(f"{len(records)} of {plural(len(everything), 'job')} shown, the most recent; {omitted} older omitted (--all shows every job)")
    from ..terminal_text import shown

    for u in unreadable:  # never silenced: a record forge cannot read is damage, not chatter
        click.echo(shown(f"warning: job record {u.path} is unreadable ({u.reason}); forge jobs rm {u.id} removes it"),
                   err=True)


def sweep_staging_leftovers(records) -> None:
    """Remove what killed stagings left in the folders *records*' jobs were staged in, and say so."""
    from ..jobs.leftovers import sweep_beside

    for leftover in sweep_beside(r.dir for r in records):
        note(f"note: removed {leftover.describe()}")


UNREADABLE = "unreadable"  # the status `jobs list` shows for a file of the store that holds no record


def unreadable_row(u) -> dict:
    """``forge jobs list --json``'s row for an unreadable record: every key a record's row has
    (null), the status ``unreadable``, the reason as ``message`` and the file as ``record``."""
    from dataclasses import fields

    from ..jobs.jobrecord import JobRecord

    row: dict = {f.name: None for f in fields(JobRecord)}
    row.update(id=u.id, status=UNREADABLE, message=u.reason, record=str(u.path), backend_ref={})
    return row


def _print_records(records: list, removed: frozenset = frozenset(), unreadable=()) -> None:
    rows = [("ID", "STATUS", "EXIT", "BACKEND", "CREATED", "DIR")]
    for r in records:
        where = "(removed)" if r.id in removed else r.dir
        rows.append((r.id, r.status, "-" if r.exit_code is None else str(r.exit_code), r.backend, r.created, where))
    rows += [(u.id, UNREADABLE, "-", "-", "-", f"record {u.path}") for u in unreadable]
    from ..terminal_text import shown

    for line in table(rows):
        click.echo(shown(line))


def _list_filtered(as_json: bool, limit: int | None, plugin: str | None, yanked: bool, params: tuple, registry: dict) -> None:
    from ..experiment.job_query import find_jobs

    found = find_jobs(plugin=plugin, yanked=yanked, params=params, registry=registry)
    for line in found.notes:
        note(line)
    matches = found.matches[-limit:] if limit else found.matches
    records = [_refreshed(j.record) if not j.removed else j.record for j in matches]
    removed = frozenset(j.record.id for j in matches if j.removed)
    if as_json:
        out = []
        for job, record in zip(matches, records):
            shown = record.shown()
            shown["removed"] = job.removed
            shown["ran"] = found.ran.get(record.id, [])
            out.append(shown)
        for job in found.unknown:
            shown = job.record.shown()
            shown["removed"] = job.removed
            shown["ran"] = None
            out.append(shown)
        click.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        if records:
            _print_records(records, removed)
            from ..terminal_text import shown as escaped

            for record in records:
                for line in found.ran.get(record.id, []):
                    click.echo(escaped(f"  {record.id}: {line}"))
        else:
            note(f"no job {found.described}")
        if found.unknown:
            note(f"{plural(len(found.unknown), 'job')} with pins unknown (recorded before job records kept them; "
                 f"their {SPEC_FILE} is gone), so not known to have run it or not:")
            _print_records([j.record for j in found.unknown], frozenset(j.record.id for j in found.unknown if j.removed))
    if limit and len(found.matches) > limit:
        note(f"{limit} of {plural(len(found.matches), 'matching job')} shown, the most recent")


def table(rows: list) -> list:
    """*rows* (the first is the header) as lines of left-aligned columns; the last column is not padded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]


@click.command("show")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option("--json", "as_json", is_flag=True, help="Print the record, launcher status and provenance summary as JSON.")
def show(job_id: str, as_json: bool) -> None:
    """Show a job's status, exit code, directory and provenance.

    The provenance says what the job's plugins did.

    ID may be any unique prefix of a job id (a bare job name is one only while a single
    job of that name exists); 'forge jobs list' shows the ids.

    \b
    Example:
      forge jobs show quickstart-20261129-120000-3fa2
      forge jobs show quickstart-20261129-120000 --json | jq .provenance.plugins
    """
    from ..experiment.jobinfo import job_details

    record = _get_with_dir(job_id)
    details = job_details(record)
    if as_json:
        click.echo(json.dumps(details, indent=2, sort_keys=True, default=str))
        return
    from ..terminal_text import shown

    for line in render_details(details):
        click.echo(shown(line))  # the record, status.json and provenance: written by the job's processes


def render_details(d: dict) -> list:
    from ..cluster.patching import hiding_message

    exit_text = "" if d["exit_code"] is None else f" (exit {d['exit_code']})"
    lines = [
        f"id       : {d['id']}",
        f"name     : {d['name']}",
        f"status   : {d['status']}{exit_text}",
        f"backend  : {d['backend']}",
        f"dir      : {d['dir']}",
        f"created  : {d['created']}",
    ]
    if d.get("replay_of"):
        lines.append(f"replay of: {d['replay_of']}")
    for y in d.get("ran_yanked") or ():
        lines.append(f"yanked   : ran {y.get('ref')} although it is yanked ({y.get('reason')}); "
                     f"allowed by {y.get('allowed_by')}")
    lines.extend(pin_lines(d))
    if d.get("outputs"):
        lines.append(f"outputs  : {d['outputs']['where']}")
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
    lines.extend(provenance_source_lines(prov))
    for ref, p in sorted((prov.get("plugins") or {}).items()):
        counts = ", ".join(
            f"{k.replace('_', ' ')} {p[k]}"
            for k in ("verified", "loaded", "registered", "installed_later", "skipped", "shadowed", "pending", "left-alone", "disabled", "failed")
            if p.get(k)
        )
        how = "environment" if p.get("kind") == "environment" else p.get("load") or "-"
        lines.append(f"  plugin  : {ref} ({p.get('source') or '-'}, {how}) {counts or 'no activity'}  {p.get('digest') or ''}".rstrip())
    patches = [p for p in prov.get("patches") or [] if isinstance(p, dict)]
    if patches:
        rows: list[tuple] = [("  patches:", "STATUS", "MODE", "PLUGIN", "TARGET")]
        rows += [("", *(str(p.get(k) or "-") for k in ("status", "mode", "plugin", "target"))) for p in patches]
        lines.extend(line.rstrip() for line in table(rows))
    for p in patches:
        message = hiding_message(p)
        if message:
            lines.append(f"  warning : {message}")
    for f in prov.get("failures") or []:
        lines.append(f"  failure : {f.get('phase', '?')} {f.get('plugin') or ''} {f.get('message') or ''}".rstrip())
    from ..jobs.node_cleanup import cleanup_lines

    lines.extend(cleanup_lines(d.get("node_cleanup")))
    return lines


def pin_lines(d: dict) -> list:
    """What the job ran: its plugin pins and its parameters (SPEC §18)."""
    if d.get("plugins") is None:
        return [f"pins     : unknown (recorded before job records kept them, and its {SPEC_FILE} is gone)"]
    lines = []
    for i, pin in enumerate(d["plugins"]):
        lines.append(f"{'pins     :' if i == 0 else '          '} {pin.get('ref')}  {pin.get('digest')}")
    if not d["plugins"]:
        lines.append("pins     : none")
    params = d.get("params") or {}
    for i, key in enumerate(sorted(params)):
        lines.append(f"{'params   :' if i == 0 else '          '} {key} = {_param_text(params[key])}")
    if not params:
        lines.append("params   : none")
    return lines


def _param_text(value) -> str:
    """A parameter as it would be written after ``--set KEY=``: strings quoted, so ``"0.5"`` and ``0.5`` differ."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def provenance_source_lines(prov: dict) -> list:
    """Where the records came from (the job's own report), one line per host, missing hosts."""
    lines = []
    fetch = prov.get("from_log") or {}
    if prov.get("reported_via") or fetch:
        refused = sum(fetch.get("refused", {}).values())
        read = f"{fetch.get('frames', 0)} framed record(s) read, {refused} refused" + (
            f", {fetch['frames_past_cap']} past the {fetch['cut_at_bytes']}-byte cap" if fetch.get("frames_past_cap") else "")
        lines.append(f"  source  : reported by the job itself, through its log ({read})")
        for reason, count in sorted((fetch.get("refused") or {}).items()):
            lines.append(f"  refused : {count} x {reason}")
    for host, h in sorted((prov.get("per_host") or {}).items()):
        roles = ", ".join(f"{role} {n}" for role, n in sorted(h.get("roles", {}).items()))
        attempts = ", ".join(str(a) for a in h.get("attempts", []))
        failures = f", {h['failures']} failed" if h.get("failures") else ""
        lines.append(f"  host    : {host}: {h.get('processes', 0)} process(es) ({roles}), attempt {attempts}, "
                     f"{h.get('patched', 0)} patched{failures}")
    for host in prov.get("missing_hosts") or []:
        lines.append(f"  missing : {host}: no provenance record from this host")
    return lines


@click.command("status")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option("--json", "as_json", is_flag=True, help="Print {id, status, exit_code} as JSON (and message, for a live job the backend says more of).")
def status(job_id: str, as_json: bool) -> None:
    """Print a job's status (and exit code once it has ended).

    A live job's status comes with what the backend says of it, such as
    "pending: requeued (attempt 2, recorded as attempt 1)" for a Slurm job that Slurm requeued.

    \b
    Example:
      forge jobs status quickstart-20261129-120000-3fa2
    """
    record = _get(job_id)
    # what the backend says of a live job (a requeued Slurm job: which attempt, when it starts)
    said = record.message if not record.final else ""
    if as_json:
        out = {"id": record.id, "status": record.status, "exit_code": record.exit_code, **({"message": said} if said else {})}
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    exit_text = "" if record.exit_code is None else f" (exit {record.exit_code})"
    click.echo(f"{record.id}: {record.status}{exit_text}" + (f": {said}" if said else ""))


@click.command("logs")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new output until the job ends.")
def logs(job_id: str, follow: bool) -> None:
    """Print (or follow) a job's output.

    The output is the launcher's plugin lines and the trainer's own.

    \b
    Example:
      forge jobs logs quickstart-20261129-120000-3fa2 -f
    """
    record = _get_with_dir(job_id)
    out = JobOutput()
    try:
        for chunk in _backend_for(record).logs(record, follow=follow):
            out.write(chunk)
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130)
    finally:
        out.flush()


@click.command("cancel")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option("--json", "as_json", is_flag=True, help="Print the resulting record as JSON.")
def cancel(job_id: str, as_json: bool) -> None:
    """Cancel a running job.

    Local jobs get SIGTERM to their process group, SIGKILL after a grace period.

    \b
    Example:
      forge jobs cancel quickstart-20261129-120000-3fa2
    """
    record = _get(job_id)
    was_final = record.final
    record = _backend_for(record).cancel(record)
    if as_json:
        click.echo(json.dumps(record.shown(), indent=2, sort_keys=True))
    elif was_final:
        click.echo(f"job {record.id} already ended: {record.status}")
    else:
        click.echo(f"job {record.id} {record.status}")


@click.command("rm")
@click.argument("job_ids", metavar="ID...", nargs=-1, required=True, shell_complete=complete_job_ids)
@click.option("--with-outputs", is_flag=True, help="Also delete what the jobs wrote into their working directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the removed ids as a JSON list.")
def rm(job_ids: tuple, with_outputs: bool, as_json: bool) -> None:
    """Delete ended jobs: their records and their staged job directories.

    A job that is still pending or running is refused (cancel it first). A job whose
    working directory holds outputs (checkpoints, logs it wrote) is refused, with their
    size, unless --with-outputs is given. A record forge cannot read (listed as
    'unreadable') is removed alone: its job directory cannot be known from it. Every ID is
    checked before anything is deleted. A job whose directory cannot be deleted entirely (a
    folder of another user in it) keeps its record; forge says what is left and exits non-zero.

    \b
    Example:
      forge jobs rm quickstart-20261129-120000-3fa2
    """
    from ..errors import BackendError
    from ..jobs.cleanup import remove_jobs
    from ..jobs.store import JobStore

    sweep_staging_leftovers(JobStore().list())
    records, unreadable = [], []
    for job_id in job_ids:
        try:
            records.append(_get(job_id))
        except BackendError:
            damaged = JobStore().unreadable(job_id)
            if damaged is None:
                raise
            unreadable.append(damaged)  # a record nobody can read: only its file can go
    _remove_and_report(lambda: remove_jobs(records, with_outputs=with_outputs, unreadable=unreadable), as_json)


@click.command("prune")
@click.option("--older-than", "age", metavar="AGE", help="Delete ended jobs created longer ago than AGE (30m, 12h, 7d, 2w).")
@click.option("--gone", is_flag=True, help="Drop the records of jobs whose directory was deleted outside forge.")
@click.option("--dry-run", is_flag=True, help="Only print which jobs would be deleted.")
@click.option("--with-outputs", is_flag=True, help="Also delete what the jobs wrote into their working directory.")
@click.option("--json", "as_json", is_flag=True, help="Print the removed ids as a JSON list.")
def prune(age: str | None, gone: bool, dry_run: bool, with_outputs: bool, as_json: bool) -> None:
    """Delete ended jobs created longer ago than AGE, or the records of jobs whose directory is gone.

    Their records and job directories go. Pending and running jobs are kept whatever their
    age; a record whose directory was deleted by hand is dropped with --gone (it has
    nothing left to show). A job whose working directory holds outputs is refused, with
    their size, and then nothing at all is deleted; --with-outputs deletes the outputs too.

    \b
    Example:
      forge jobs prune --older-than 7d
      forge jobs prune --gone --dry-run
    """
    from ..jobs.cleanup import check_removable, parse_age, remove_jobs, select_prune
    from ..jobs.store import JobStore

    everything = JobStore().list()
    sweep_staging_leftovers(everything)
    selection = select_prune(everything, older_than=parse_age(age) if age is not None else None, gone=gone,
                      refresh=_refreshed)
    if dry_run:
        check_removable(selection.chosen, with_outputs=with_outputs)
        removed = [r.id for r in selection.chosen]
        _report_removed(removed, as_json, verb="would remove")
    else:
        _remove_and_report(lambda: remove_jobs(selection.chosen, with_outputs=with_outputs), as_json)
    if selection.dirless:
        note(f"{plural(len(selection.dirless), 'job')} kept whose directory is gone: forge jobs prune --gone drops their records")


def _remove_and_report(remove, as_json: bool) -> None:
    """Run *remove* and print the ids it removed, also when it then fails on a job it could not remove."""
    from ..errors import RemovalError

    try:
        removed = remove()
    except RemovalError as exc:
        if exc.removed:
            _report_removed(exc.removed, as_json)
        raise
    _report_removed(removed, as_json)


def _report_removed(ids: list, as_json: bool, verb: str = "removed") -> None:
    if as_json:
        click.echo(json.dumps(ids, indent=2))
        return
    for job_id in ids:
        click.echo(f"{verb} {job_id}")
    if not ids:
        note("no jobs to remove")


@click.command("replay")
@click.argument("job_id", metavar="ID", shell_complete=complete_job_ids)
@click.option("--backend", type=BackendChoice(), help="Where to run the replay (default: where ID ran).")
@click.option("--dry-run", is_flag=True, help="Check everything and print the new JobSpec; submit nothing.")
@click.option("--strict", is_flag=True, help="Refuse when the environment differs from the one ID ran in (default: warn).")
@click.option("--detach", is_flag=True, help="Return once the job has started instead of waiting for it.")
@job_registry_options("A registry serving the plugin versions ID ran (tried first).")
@click.option("--json", "as_json", is_flag=True, help="Print the new job's record as JSON on stdout (its output goes to stderr).")
def replay(job_id, backend, dry_run, strict, detach, registry, insecure, ca_file, require_signatures, as_json) -> None:
    """Run again exactly what job ID ran, as a new job.

    The same plugin versions by tree digest (from the cache or any configured registry
    serving that digest), hyperparams, entrypoint, Python and built-ins, the recipe as
    it was staged for ID (not today's working tree: its tree digest is checked against
    ID's JobSpec) and the same runtime zip (checked against the sha256 in ID's record).
    Today's trust policy applies. Refuses, naming what differs, when a plugin, the
    recipe or the runtime no longer matches (exit 10). The new job compares its
    environment fingerprint with ID's and warns on a difference (--strict: refuses).
    A job of an older starforge-core that recorded no recipe digest or runtime sha256
    is replayed with a note saying what cannot be proved (its staged recipe, this
    starforge-core's runtime); --strict refuses it.
    Its record, JobSpec and provenance say 'replay of ID'. Waits and exits with the new
    job's exit code, as forge submit does.

    \b
    Example:
      forge jobs replay quickstart-20261129-120000-3fa2
      forge jobs replay quickstart-20261129-120000-3fa2 --strict --backend slurm
    """
    from ..experiment.replay import replay_job
    from .submit import follow

    done = replay_job(job_id, backend=backend, registry=registry, insecure=insecure, ca_file=ca_file, dry_run=dry_run, strict=strict,
                      detach=detach, require_signatures=require_signatures)
    for line in done.notes:
        note(f"note: {line}")
    for line in done.warnings:
        click.echo(f"warning: {line}", err=True)
    if dry_run:
        click.echo(done.spec.to_json(), nl=False)
        return
    follow(done.backend, done.record, detach=detach, as_json=as_json)
